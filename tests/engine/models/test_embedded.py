"""Integration tests on the real embedded pair (SmolLM2-135M-Instruct and our draft); `make test` prepares them."""
import json
import os
import subprocess
import sys

import pytest

from engine.decoding.decoder import Decoder
from engine.events import DecodeSettings
from engine.models import embedded
from engine.stats import reply_stats

pytestmark = pytest.mark.embedded
MESSAGES = [{"role": "user", "content": "Name three colours of the rainbow."}]


@pytest.fixture(scope="module")
def self_drafting():
    # the de-quantised target drafting for itself: an exact copy
    return Decoder.load("embedded", "embedded", device="cpu", dtype="float32", draft_int8=False, target_weights="dtype")


def test_embedded_target_drafting_for_itself_accepts_everything_and_matches_ar(self_drafting):
    # copies are not the model's drafts; a draft as dear as the target would never be run by cost-aware rounds
    settings = DecodeSettings(gamma=4, max_new_tokens=32, lookup=False, cost_aware=False, stop_below=0.0)
    spec = list(self_drafting.generate(MESSAGES, settings))
    ar = list(self_drafting.generate(MESSAGES, DecodeSettings(mode="ar", max_new_tokens=32)))
    assert reply_stats(spec).alpha == 1.0
    assert [t.token_id for e in spec for t in e.emitted] == [t.token_id for e in ar for t in e.emitted]


def test_embedded_draft_is_lossless_in_float32():
    assert embedded.draft_dir().exists(), "run `specdec prepare` (make test does)"
    decoder = Decoder.load("embedded", "embedded-draft", device="cpu", dtype="float32")
    assert decoder.drafter.runner.draft_vocab is not None  # the shipped draft vocabulary is in use
    # γ drafts every round: how many the cost-aware rounds draft depends on this machine's timings
    settings = DecodeSettings(gamma=4, max_new_tokens=48, cost_aware=False, stop_below=0.0)
    spec = list(decoder.generate(MESSAGES, settings))
    ar = list(decoder.generate(MESSAGES, DecodeSettings(mode="ar", max_new_tokens=48)))
    assert [t.token_id for e in spec for t in e.emitted] == [t.token_id for e in ar for t in e.emitted]
    assert reply_stats(spec).alpha > 0.3  # a trained draft, not noise


def _specdec(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, timeout=300)


def test_cli_generate_json_reports_text_tokens_stats_and_rounds():
    result = _specdec("generate", "Say hello.", "--max-new-tokens", "16", "--json", "--dtype", "float32")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["text"] and len(out["token_ids"]) == sum(len(r["emitted"]) for r in out["rounds"]) <= 16
    for key in ("alpha", "tokens_per_round", "n_rounds", "n_drafted", "n_accepted", "tokens_per_s", "wall_s"):
        assert key in out["stats"]
    assert out["stats"]["n_rounds"] == len(out["rounds"])


def test_cli_errors_are_one_line_without_traceback():
    result = _specdec("generate", "hi", "--target", "/nonexistent/model-dir")
    assert result.returncode == 2  # refused with the arguments, before any model loads
    assert result.stderr.startswith("specdec generate: error: argument --target: /nonexistent/model-dir does not "
                                    "exist") and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_cli_speculation_and_ar_decode_one_target_identically_at_any_thread_count():
    """The issue's prompt once started differently in AR (native int4) and speculation (de-quantised)."""
    replies = {}
    for threads in ("1", "2", "4"):
        for mode in ("spec", "ar"):
            result = subprocess.run([sys.executable, "-m", "app.cli", "generate", "Write a short poem about the sea.",
                                     "--json", "--max-new-tokens", "24", "--mode", mode],
                                    capture_output=True, text=True, timeout=300,
                                    env={**os.environ, "OMP_NUM_THREADS": threads})
            assert result.returncode == 0, result.stderr
            out = json.loads(result.stdout)
            replies[threads, mode] = (out["target"]["weights"], out["token_ids"])
    assert len(set(map(str, replies.values()))) == 1, replies


def test_stop_during_a_6000_token_read_in_is_heard_within_half_a_second():
    """Each prefill chunk is sized from the speed the chunks before it were read at, so the time between two
    chances to stop (the target's chunk, then the draft keeping pace) is under 0.5 s. The chunks' sizes are
    checked against that speed, or where the target reads prompts in fixed blocks (a CPU with AMX: Stop is heard
    between their layers) against that size; their measured times only in the median, as another job on the
    machine can stretch any single one."""
    import statistics
    import time

    from engine.decoding.caches import PREFILL_CHUNK_S
    from engine.events import PrefillProgress

    decoder = Decoder.load("embedded", "embedded-draft", device="cpu")
    decoder.warm_up()
    prompt = [{"role": "user", "content": "The quick brown fox jumps over the lazy dog. " * 600}]
    stream = decoder.stream(prompt, DecodeSettings(max_new_tokens=8))
    chunks, gaps, last = [], [], time.perf_counter()
    speed = None  # seconds per position the next chunk is sized on
    for item in stream:
        if isinstance(item, PrefillProgress):
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
            chunks.append((decoder.runner.last_chunk[0], speed))
            speed, total = decoder.runner.seconds_per_position, item.total
            if item.done >= 1024:  # enough chunks to have settled on this machine's speed
                break
    stream.close()  # Stop, between two chunks
    assert total >= 6000
    fixed = getattr(decoder.runner.cache, "read_in_rows", None)
    assert all(n == fixed if fixed else n * seconds <= PREFILL_CHUNK_S or n == 1 for n, seconds in chunks[1:]), chunks
    # fixed blocks hear Stop between their layers (test_read_in.py's test_a_read_in_stopped_between_layers_...)
    assert fixed or statistics.median(gaps) < 0.5, gaps
    assert len(list(decoder.generate(MESSAGES, DecodeSettings(max_new_tokens=4)))) >= 1  # the next reply works


def test_the_guides_copying_example_is_mostly_drafted_by_copies():
    from ui.chat.view import EXAMPLES

    [prompt] = [text for what, text in EXAMPLES if what == "copying"]
    decoder = Decoder.load("embedded", "embedded-draft")  # as the window loads it
    # γ drafts every round: how many the cost-aware rounds draft depends on this machine's timings
    settings = DecodeSettings(cost_aware=False, stop_below=0.0)
    events = list(decoder.generate([{"role": "user", "content": prompt}], settings))
    copied = sum(kind == "copy" and draft.accepted for e in events for kind, draft in zip(e.draft_kinds, e.drafted))
    assert copied > sum(len(e.emitted) for e in events) / 2
