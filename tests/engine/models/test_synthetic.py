"""Synthetic pairs of named shapes (`specdec bench --shapes`): random weights built in memory; the perfect pair's
draft is the target's own first layers, so every greedy draft is kept, where a random draft's are not."""
import json

import pytest
import torch

from app.cli import main
from engine.decoding.decoder import Decoder
from engine.events import DecodeSettings
from engine.models import synthetic
from tests.tiny import PROMPT, tiny_tokenizer


def replies(spec: str) -> tuple[dict, list]:
    target, draft = synthetic.pair(spec, torch.device("cpu"), torch.float32, tokenizer=tiny_tokenizer())
    decoder = Decoder(target, draft=draft)
    out = {}
    for mode in ("ar", "spec"):
        settings = DecodeSettings(mode=mode, gamma=4, greedy=True, max_new_tokens=24, lookup=False,
                                  cost_aware=False, stop_below=0.0)
        out[mode] = list(decoder.generate(PROMPT, settings))
    return {mode: [t.token_id for e in events for t in e.emitted] for mode, events in out.items()}, out["spec"]


def test_the_perfect_pair_keeps_every_draft_and_equals_greedy_ar():
    tokens, rounds = replies("perfect:tiny")
    assert tokens["spec"] == tokens["ar"] and len(tokens["ar"]) == 24
    drafted = [d for e in rounds for d in e.drafted]
    assert drafted and all(d.accepted for d in drafted)


def test_a_random_draft_of_another_shape_is_not_kept_every_time():
    """Negative control: the same rounds with an unrelated random draft reject drafts, and still equal AR."""
    tokens, rounds = replies("tiny:tiny")
    assert tokens["spec"] == tokens["ar"]
    assert not all(d.accepted for e in rounds for d in e.drafted)


@pytest.mark.parametrize("spec", ["qwen3-4b", "qwen3-4b:nope", "perfect:nope", "nope:tiny"])
def test_unknown_shapes_are_refused_with_the_known_ones(spec):
    with pytest.raises(synthetic.ShapeError, match="qwen3-0.6b"):
        synthetic.parse(spec)


def test_the_named_shapes_are_the_published_configs():
    four_b, small = synthetic.config("qwen3-4b"), synthetic.config("qwen3-0.6b")
    assert (four_b.hidden_size, four_b.num_hidden_layers, four_b.intermediate_size) == (2560, 36, 9728)
    assert (small.hidden_size, small.num_hidden_layers, small.intermediate_size) == (1024, 28, 3072)


@pytest.mark.embedded
def test_bench_runs_a_synthetic_pair_and_labels_it(tmp_path, capsys):
    prompts = tmp_path / "p.txt"
    prompts.write_text("Say hi.\n")
    assert main(["bench", "--shapes", "perfect:tiny", "--methods", "ar,spec", "--gammas", "3", "--stop-below", "0",
                 "--decoding", "greedy", "--max-new-tokens", "12", "--prompts", str(prompts), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    spec = next(r for r in result["runs"] if r["method"] == "spec")
    assert spec["alpha"] == 1.0 and result["greedy_identical"] is True
    assert result["env"]["target"]["name"] == "synthetic tiny"
