"""The tuned pair exported for vLLM, llama-server and transformers: each parses in its engine's own format."""
import json
import re
import shlex
from pathlib import Path

import pytest
import torch

from engine.events import Drafting
from engine.serving import TunedPair, export
from tests.schema import errors

FIXTURES = Path(__file__).parent / "fixtures"
SCHEMA = json.loads((FIXTURES / "vllm_speculative_config.schema.json").read_text())
SPECULATIVE = [Drafting.MODEL, Drafting.LOOKUP, Drafting.BOTH]


def pair(drafting: Drafting, gamma: int = 4) -> TunedPair:
    return TunedPair("HuggingFaceTB/SmolLM2-135M-Instruct", "org/draft" if drafting.draft_model else None,
                     drafting, gamma, stop_below=0.41)


def command(text: str) -> list[str]:
    """The export's command line: its one line that is not a comment."""
    (line,) = [line for line in text.splitlines() if line and not line.startswith("#")]
    return shlex.split(line)


def value_of(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# ------------------------------------------------------------------------------------------------------ vLLM


@pytest.mark.parametrize("drafting", SPECULATIVE)
def test_the_vllm_command_passes_a_speculative_config_that_fits_vllm_s_schema(drafting):
    argv = command(export(pair(drafting), "vllm").text)
    assert argv[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    assert value_of(argv, "--model") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    config = json.loads(value_of(argv, "--speculative-config"))
    assert errors(config, SCHEMA) == []
    assert config["num_speculative_tokens"] == 4


def test_the_vllm_config_beside_the_command_is_the_same_config():
    text = export(pair(Drafting.MODEL), "vllm").text
    shown = json.loads(re.search(r"# speculative_config = (.*)", text).group(1))
    assert shown == json.loads(value_of(command(text), "--speculative-config"))


def test_plain_decoding_has_no_speculative_config():
    assert "--speculative-config" not in command(export(pair(Drafting.NONE), "vllm").text)


@pytest.mark.parametrize("config, complaint", [
    ({"method": "draft_model", "model": "d", "speculative_tokens": 4}, "unknown field"),
    ({"method": "draft_model", "model": "d", "num_speculative_tokens": 0}, "<= 0"),
    ({"method": "ngram", "num_speculative_tokens": 4}, "'prompt_lookup_max' is required"),
    ({"method": "lookahead", "num_speculative_tokens": 4}, "is not one of"),
    ({"num_speculative_tokens": 4}, "'method' is required"),
])
def test_the_schema_refuses_configs_vllm_refuses(config, complaint):
    """Negative control for the vLLM test: the schema is not one that anything fits."""
    assert any(complaint in e for e in errors(config, SCHEMA)), errors(config, SCHEMA)


# ------------------------------------------------------------------------------------------------ llama-server


def help_flags() -> dict[str, tuple[str | None, bool]]:
    """Every flag in the --help fixture: (its value hint or None, whether it is removed)."""
    flags = {}
    for line in (FIXTURES / "llama_server_help_speculative.txt").read_text().splitlines():
        if not line.startswith("-"):
            continue
        spelling, _, rest = re.split(r"\s{3,}", line, maxsplit=1)[0].rpartition(" ")
        names, hint = (spelling, rest) if not rest.startswith("-") else (f"{spelling} {rest}".strip(), None)
        for name in names.split(", "):
            flags[name.strip()] = (hint, "REMOVED" in line)
    return flags


def flag_problems(argv: list[str]) -> list[str]:
    """What in a llama-server command line its --help does not allow."""
    flags, problems, i = help_flags(), [], 1
    while i < len(argv):
        flag = argv[i]
        if flag not in flags:
            problems.append(f"unknown flag {flag}")
            i += 1
            continue
        hint, removed = flags[flag]
        if removed:
            problems.append(f"removed flag {flag}")
        if hint is not None:
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                problems.append(f"{flag} needs a value")
            elif "," in hint and not set(argv[i + 1].split(",")) <= set(hint.split(",")):
                problems.append(f"{flag} {argv[i + 1]}: not among {hint}")
            i += 1
        i += 1
    return problems


@pytest.mark.parametrize("drafting", [*SPECULATIVE, Drafting.NONE])
def test_the_llama_server_flags_are_all_in_its_help(drafting):
    argv = command(export(pair(drafting), "llama-server").text)
    assert argv[0] == "llama-server" and flag_problems(argv) == []


def test_the_llama_server_flags_carry_gamma_and_the_stop():
    argv = command(export(pair(Drafting.MODEL), "llama-server").text)
    assert value_of(argv, "--spec-draft-n-max") == "4" and value_of(argv, "--draft-p-min") == "0.41"
    assert value_of(argv, "--model-draft") == "org/draft" and value_of(argv, "--spec-type") == "draft-simple"


@pytest.mark.parametrize("argv, problem", [
    (["llama-server", "--draft-max", "4"], "removed flag --draft-max"),
    (["llama-server", "--draft-maxx", "4"], "unknown flag --draft-maxx"),
    (["llama-server", "--spec-type", "lookahead"], "not among"),
    (["llama-server", "--spec-draft-n-max"], "needs a value"),
])
def test_the_help_check_refuses_what_llama_server_refuses(argv, problem):
    """Negative control for the llama-server test."""
    assert any(problem in p for p in flag_problems(argv)), flag_problems(argv)


# ------------------------------------------------------------------------------------------------ transformers


def generate_kwargs(text: str) -> dict:
    """The keyword arguments of the export's model.generate(...) call, as Python reads them."""
    import ast

    call = next(node for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "generate")
    return {k.arg: (ast.literal_eval(k.value) if k.arg != "assistant_model" else "draft")
            for k in call.keywords if k.arg is not None}


@pytest.mark.parametrize("drafting", SPECULATIVE)
def test_the_transformers_kwargs_are_generation_config_fields(drafting):
    from transformers import GenerationConfig

    kwargs = generate_kwargs(export(pair(drafting), "transformers").text)
    config_kwargs = {k: v for k, v in kwargs.items() if k != "assistant_model"}
    known = vars(GenerationConfig())
    assert set(config_kwargs) <= set(known)
    assert {k: getattr(GenerationConfig(**config_kwargs), k) for k in config_kwargs} == config_kwargs


@pytest.mark.parametrize("drafting", [Drafting.MODEL, Drafting.LOOKUP])
def test_transformers_generate_runs_with_the_exported_kwargs(drafting):
    from tests.tiny import tiny_model

    target, draft = tiny_model(0), tiny_model(1, layers=1)
    kwargs = generate_kwargs(export(pair(drafting), "transformers").text)
    if "assistant_model" in kwargs:
        kwargs["assistant_model"] = draft.model
    ids = torch.tensor([[3, 7, 11, 5, 3, 7, 11]])
    output = target.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False,
                                   pad_token_id=1, **kwargs)
    plain = target.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False,
                                  pad_token_id=1)
    assert output.tolist() == plain.tolist()


def test_transformers_generate_refuses_a_misspelled_kwarg():
    """Negative control for the test above: generate() does check what it is given."""
    from tests.tiny import tiny_model

    target = tiny_model(0)
    ids = torch.tensor([[3, 7, 11]])
    with pytest.raises(ValueError, match="num_assistant_token"):
        target.model.generate(ids, max_new_tokens=2, pad_token_id=1, num_assistant_token=4)


# ---------------------------------------------------------------------------------------------------- all


@pytest.mark.parametrize("engine", ["vllm", "llama-server", "transformers"])
def test_every_export_says_what_it_was_checked_against(engine):
    rendered = export(pair(Drafting.MODEL), engine).render()
    assert re.match(rf"# {engine}: checked against .*(commit [0-9a-f]{{7}}|\d+\.\d+\.\d+)", rendered)


def test_a_draft_model_drafting_without_a_draft_is_refused():
    with pytest.raises(ValueError, match="needs a draft model"):
        export(TunedPair("t", None, Drafting.MODEL, 4), "vllm")
