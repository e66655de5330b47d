"""The tuned pair for the engines users deploy on: the pair, γ and drafter settings written as a vLLM
`speculative_config` (and its server command), llama-server flags, and transformers `generate()` kwargs, each in
that engine's own format, from the options or a bench's recommendation. No torch here.

Our drafting knobs map onto theirs only so far: a round of ours stops drafting once the chance that it keeps its
next draft falls below `stop_below` (engine.decoding.recommend); llama-server's --draft-p-min and transformers'
assistant_confidence_threshold stop on the draft's own confidence in each token, the nearest knob each has, and
vLLM has none (it drafts γ every round). Copying what followed the last LOOKUP_NGRAM tokens is their n-gram /
prompt lookup. llama-server runs both side by side; where vLLM or transformers cannot, the draft model is kept
and a note says so.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from engine.choices import DRAFTINGS
from engine.events import Drafting

ENGINES = ("vllm", "llama-server", "transformers")
# What each export was checked against: the source of the fields and flags it writes
CHECKED_AGAINST = {
    "vllm": "vLLM main at commit 002e77c (vllm/config/speculative.py, SpeculativeConfig)",
    "llama-server": "llama.cpp at commit 00dc805 (tools/server/README.md, the --help table)",
    "transformers": "transformers 5.24.0 (GenerationConfig, GenerationMixin.generate)",
}
LOOKUP_NGRAM = 3  # engine.decoding.drafters.LOOKUP_NGRAM: a copy follows a match of the last 3 tokens


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# What a bench recommendation (engine.decoding.recommend, as_dict) must give an export: each field, the check its
# value must pass, and what the check asks for
RECOMMENDED_FIELDS = {
    "drafting": (lambda value: value in DRAFTINGS, f"one of {', '.join(DRAFTINGS)}"),
    "gamma": (_whole, "a whole number"),
    "stop_below": (_number, "a number"),
    "speedup": (_number, "a number"),
}


class BenchFileError(ValueError):
    """A --from-bench file that is not a bench's results.json: the message names the file and what it lacks."""


@dataclass(frozen=True)
class TunedPair:
    target: str  # what the engine loads: a hub id or a path (a .gguf for llama-server)
    draft: str | None  # the draft model, the same way; None with lookup only or none
    drafting: Drafting
    gamma: int  # the most drafts per round
    stop_below: float = 0.0  # drafting stops once the chance of keeping the next draft falls below this


@dataclass(frozen=True)
class Export:
    engine: str
    text: str  # in the engine's own format, ready to paste
    checked_against: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    def render(self) -> str:
        """The text after shell-style comment lines saying what it was checked against and any notes."""
        lines = [f"# {self.engine}: checked against {self.checked_against}"]
        lines += [f"# note: {note}" for note in self.notes]
        return "\n".join(lines + [self.text])


def _combined_note(pair: TunedPair, engine: str) -> tuple[str, ...]:
    if pair.drafting is Drafting.BOTH:
        return (f"{engine} runs a draft model or n-gram lookup, not both in one round: this keeps the draft model",)
    return ()


def vllm_speculative_config(pair: TunedPair) -> dict | None:
    """vLLM's SpeculativeConfig fields for this pair; None for plain decoding (no speculative_config)."""
    if pair.drafting is Drafting.NONE:
        return None
    if pair.drafting is Drafting.LOOKUP:
        return {"method": "ngram", "num_speculative_tokens": pair.gamma, "prompt_lookup_max": LOOKUP_NGRAM,
                "prompt_lookup_min": LOOKUP_NGRAM}
    return {"method": "draft_model", "model": pair.draft, "num_speculative_tokens": pair.gamma}


def vllm_export(pair: TunedPair) -> Export:
    config = vllm_speculative_config(pair)
    command = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", pair.target]
    if config is not None:
        command += ["--speculative-config", json.dumps(config)]
    # the config as vLLM's Python API takes it, then the server command that passes the same JSON
    text = f"# speculative_config = {json.dumps(config)}\n{shlex.join(command)}"
    notes = _combined_note(pair, "vLLM")
    if pair.drafting is not Drafting.NONE and pair.stop_below:
        notes += (f"vLLM has no confidence stop: it drafts {pair.gamma} tokens every round",)
    return Export("vllm", text, CHECKED_AGAINST["vllm"], notes)


def llama_server_args(pair: TunedPair) -> list[str]:
    """llama-server's command line for this pair (--spec-type, --model-draft, the draft's n-max/n-min, p-min, and
    the n-gram sizes for lookup)."""
    args = ["llama-server", "--model", pair.target]
    types = (["draft-simple"] if pair.drafting.draft_model else []) + (["ngram-simple"] if pair.drafting.lookup else [])
    if types:  # several types run side by side (llama-server's --spec-type takes a list)
        args += ["--spec-type", ",".join(types)]
    if pair.drafting.draft_model:
        args += ["--model-draft", str(pair.draft), "--spec-draft-n-max", str(pair.gamma), "--spec-draft-n-min", "0",
                 "--draft-p-min", f"{pair.stop_below:.2f}"]
    if pair.drafting.lookup:
        args += ["--spec-ngram-simple-size-n", str(LOOKUP_NGRAM), "--spec-ngram-simple-size-m", str(pair.gamma)]
    return args


def llama_server_export(pair: TunedPair) -> Export:
    notes: tuple[str, ...] = ()
    if pair.drafting.draft_model:
        notes += ("--draft-max and --draft-min are removed in this llama.cpp: --spec-draft-n-max and "
                  "--spec-draft-n-min replace them (older builds take the old names)",)
    for name in [pair.target] + ([pair.draft] if pair.drafting.draft_model else []):
        if not str(name).endswith(".gguf"):
            notes += (f"{name} is not a GGUF file: convert it with llama.cpp's convert_hf_to_gguf.py first",)
    return Export("llama-server", shlex.join(llama_server_args(pair)), CHECKED_AGAINST["llama-server"], notes)


def transformers_generate_kwargs(pair: TunedPair) -> dict:
    """generate()'s assisted-decoding kwargs; `assistant_model` is the draft's name, to load with
    AutoModelForCausalLM.from_pretrained."""
    if pair.drafting is Drafting.NONE:
        return {}
    if pair.drafting is Drafting.LOOKUP:
        return {"prompt_lookup_num_tokens": pair.gamma, "max_matching_ngram_size": LOOKUP_NGRAM}
    return {"assistant_model": pair.draft, "num_assistant_tokens": pair.gamma,
            "num_assistant_tokens_schedule": "constant", "assistant_confidence_threshold": round(pair.stop_below, 2)}


def transformers_export(pair: TunedPair) -> Export:
    kwargs = transformers_generate_kwargs(pair)
    shown = ", ".join(f"{k}=draft" if k == "assistant_model" else f"{k}={v!r}" for k, v in kwargs.items())
    lines = ["from transformers import AutoModelForCausalLM, AutoTokenizer", "",
             f"model = AutoModelForCausalLM.from_pretrained({pair.target!r})",
             f"tokenizer = AutoTokenizer.from_pretrained({pair.target!r})"]
    if "assistant_model" in kwargs:
        lines.append(f"draft = AutoModelForCausalLM.from_pretrained({pair.draft!r})")
    lines.append("inputs = tokenizer(\"...\", return_tensors=\"pt\")")
    lines.append(f"output = model.generate(**inputs{', ' + shown if shown else ''})")
    return Export("transformers", "\n".join(lines), CHECKED_AGAINST["transformers"],
                  _combined_note(pair, "transformers' generate()"))


def export(pair: TunedPair, engine: str) -> Export:
    if pair.drafting is not Drafting.NONE and not 1 <= pair.gamma <= 64:
        raise ValueError(f"gamma must be between 1 and 64, not {pair.gamma}")
    if pair.drafting.draft_model and not pair.draft:
        raise ValueError(f"drafting with {pair.drafting.value} needs a draft model")
    return {"vllm": vllm_export, "llama-server": llama_server_export,
            "transformers": transformers_export}[engine](pair)


def bench_choice(path: Path) -> dict:
    """From a bench's results.json (engine.benchmark.bench writes it): target, draft and the recommendation across
    drafters, else the best predicted one of any method. A file that does not read as one raises BenchFileError."""
    def lacks(what: str) -> BenchFileError:
        return BenchFileError(f"--from-bench {path}: not a bench's results.json: {what}")

    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BenchFileError(f"--from-bench {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise lacks(f"not JSON ({exc})") from None
    if not isinstance(result, dict):
        raise lacks(f"a JSON {type(result).__name__}, not an object with 'recommendations'")
    found = result.get("recommendations")
    if not found:
        raise BenchFileError(f"--from-bench {path}: no recommendation in it (run the bench at several --gammas)")
    if not isinstance(found, list):
        raise lacks("its 'recommendations' is not a list")
    for number, item in enumerate(found, 1):
        if not (isinstance(item, dict) and isinstance(item.get("method"), str)
                and isinstance(item.get("recommended"), dict)):
            raise lacks(f"recommendation {number} has no 'method' and 'recommended' object")
        advice = item["recommended"]
        for name, (check, wanted) in RECOMMENDED_FIELDS.items():
            if not check(advice.get(name)):
                given = f"is {json.dumps(advice[name])}, not {wanted}" if name in advice else f"is missing ({wanted})"
                raise lacks(f"recommendation {number}'s '{name}' {given}")
    env = result.get("env") or {}
    if not isinstance(env, dict):
        raise lacks("its 'env' is not an object")
    across = [r for r in found if r["method"] == "drafters"]
    advice = (across or sorted(found, key=lambda r: -r["recommended"]["speedup"]))[0]["recommended"]
    return {"target": _model_name(env, "target"), "draft": _model_name(env, "draft"), "gamma": advice["gamma"],
            "drafting": advice["drafting"], "stop_below": advice["stop_below"]}


def _model_name(env: dict, role: str) -> str | None:
    """The name of the bench's target or draft model; None where it ran without one."""
    model = env.get(role)
    return model.get("name") if isinstance(model, dict) and isinstance(model.get("name"), str) else None
