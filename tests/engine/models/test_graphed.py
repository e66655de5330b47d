"""The GPU's static-cache forward (engine.models.graphed), run eagerly on the CPU: its positions, masks, padding,
span and rollback against transformers' own forward, and the decoding that feeds it device tensors. Capturing and
replaying CUDA graphs runs only where CUDA is (the bench's GPU rows)."""
import pytest
import torch

from engine.decoding import caches
from engine.decoding.caches import CachedModel
from engine.decoding.costs import CostModel, RoundPlanner
from engine.decoding.decoder import Decoder
from engine.decoding.drafters import DraftModelDrafter
from engine.events import DecodeSettings
from engine.models import graphed, synthetic
from tests.engine.models.test_fast_llama import build
from tests.tiny import PROMPT, tiny_tokenizer


@pytest.fixture
def static_on_cpu(monkeypatch):
    monkeypatch.setattr(caches, "STATIC_DEVICES", ("cuda", "cpu"))


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_static_forward_matches_transformers_through_steps_blocks_rollback_and_a_longer_span(kind, static_on_cpu):
    model = build(kind)
    runner = CachedModel(model, 64)
    assert isinstance(runner.cache, graphed.StaticLlama) and runner.on_device
    sequence = [3, 9, 14, 2, 7, 30, 31]
    runner.forward(sequence[:5])
    runner.forward(sequence[5:6])
    block = runner.forward(sequence[6:] + [40, 41], keep=3)  # a verification block of three, padded to 16 rows
    runner.rollback(6)  # two of them rejected: their keys stay in the cache, masked
    step = runner.forward([50])
    reference = model(torch.tensor([sequence + [40, 41]])).logits[0]
    assert torch.allclose(block, reference[-3:], atol=1e-5)
    assert torch.allclose(step[0], model(torch.tensor([sequence[:6] + [50]])).logits[0, -1], atol=1e-5)
    # a prompt longer than a block runs unpadded; past MIN_SPAN positions the span (and the cache) grow
    long = [(7 * i) % 64 for i in range(graphed.MIN_SPAN + 40)]
    runner.reset()
    runner.forward(long[:-1])
    last = runner.forward(long[-1:])
    assert runner.cache._span == 2 * graphed.MIN_SPAN
    assert torch.allclose(last[0], model(torch.tensor([long])).logits[0, -1], atol=1e-4)


def test_a_reply_reads_one_span_whatever_block_reaches_a_position(static_on_cpu):
    runner = CachedModel(build("llama"), 64)
    runner.expect(300)
    assert runner.cache._span == 2 * graphed.MIN_SPAN and runner.cache.capacity >= 512
    runner.forward([i % 64 for i in range(graphed.MIN_SPAN - 4)])  # a block ending past MIN_SPAN: no other span for it
    runner.forward([5, 6, 7, 8])
    assert runner.cache._span == 2 * graphed.MIN_SPAN


def test_padded_blocks_score_a_position_as_its_single_step_does(static_on_cpu):
    """On the CPU every call has 16 rows, so the probe holds here; a block of another row count (the control) runs
    other kernel shapes, which is what padding avoids."""
    model = build("qwen3")
    padded = CachedModel(model, 64).cache
    assert padded.batch_invariant
    block = padded.forward(torch.tensor([3, 9, 14, 2, 7]), 5)
    padded.crop(0)
    steps = torch.cat([padded.forward(torch.tensor([t]), 1) for t in (3, 9, 14, 2, 7)])
    assert torch.equal(block, steps)
    unpadded = graphed.StaticLlama(model, model.lm_head.weight, graphs=False, rows=1)
    blocks = unpadded.forward(torch.tensor([3, 9, 14, 2, 7]), 5)
    assert torch.allclose(blocks, steps, atol=1e-5)


def planner_of(flat_s: float, draft_s: float, rows: int = 9) -> RoundPlanner:
    return RoundPlanner(CostModel([flat_s] * rows, draft_step_s=draft_s))


def test_a_gpu_like_planner_learns_to_draft_long_and_refuses_a_draft_as_dear_as_its_target():
    """Blocks of any rows cost one step (a GPU's): rounds whose drafts are all kept lengthen the next ones to the
    cap within a few dozen rounds; rounds whose drafts are mostly rejected (the control) stay short."""
    for kept, lengths in ((1.0, range(15, 16)), (0.3, range(0, 4))):
        planner = planner_of(0.004, 0.0004)
        for _ in range(40):
            planned = planner.planned_length(15)
            planner.acceptance.record(["model"] * planned, [0.9] * planned, round(planned * kept))
        assert planner.planned_length(15) in lengths
    assert planner_of(0.004, 0.004).planned_length(15) == 0


def drafters(static: bool, monkeypatch, spec: str = "tiny:tiny"):
    monkeypatch.setattr(caches, "STATIC_DEVICES", ("cuda", "cpu") if static else ("cuda",))
    target, draft = synthetic.pair(spec, torch.device("cpu"), torch.float32, tokenizer=tiny_tokenizer())
    return Decoder(target, draft=draft)


@pytest.mark.parametrize("greedy", [True, False])
def test_drafting_from_device_tensors_proposes_what_the_host_loop_does(greedy, monkeypatch):
    settings = DecodeSettings(mode="spec", gamma=5, greedy=greedy, temperature=0.8, lookup=False, cost_aware=False,
                              stop_below=0.0)
    proposals = []
    for on_device in (True, False):
        decoder = drafters(True, monkeypatch)
        drafter = decoder.drafter
        assert isinstance(drafter, DraftModelDrafter) and drafter.runner.on_device
        if not on_device:
            monkeypatch.setattr(CachedModel, "on_device", property(lambda self: False))
        sequence = decoder.chat_ids(PROMPT)
        drafter.prefill(sequence)
        generator = torch.Generator().manual_seed(3)
        planner = planner_of(0.004, 0.0004)
        proposal = drafter.propose(sequence, 5, settings, generator, planner)
        proposals.append((proposal.tokens, proposal.probs, len(drafter.runner)))
        monkeypatch.undo()
    (device_tokens, device_probs, device_fed), (host_tokens, host_probs, host_fed) = proposals
    assert len(device_tokens) == 5 and device_tokens == host_tokens and device_fed == host_fed
    assert torch.equal(device_probs, host_probs)


@pytest.mark.parametrize("spec", ["perfect:tiny", "tiny:tiny"])
def test_decoding_on_the_static_forward_equals_greedy_ar_in_blocks_of_at_most_one_graph(spec, monkeypatch):
    """The perfect pair keeps every draft; the random one (the control) rejects most: both equal greedy AR."""
    decoder = drafters(True, monkeypatch, spec)
    tokens = {}
    for mode in ("ar", "spec"):
        settings = DecodeSettings(mode=mode, gamma=64, greedy=True, max_new_tokens=40, lookup=False,
                                  cost_aware=False, stop_below=0.0)
        events = list(decoder.generate(PROMPT, settings))
        tokens[mode] = [t.token_id for e in events for t in e.emitted]
    assert max(e.gamma for e in events) == graphed.BLOCK_ROWS - 1  # γ 64 asked: one graphed block at most
    assert tokens["spec"] == tokens["ar"] and len(tokens["ar"]) == 40
    assert (len(events) <= 3) == (spec == "perfect:tiny")


def test_the_probe_runs_outside_inference_mode_after_the_cache_grew_inside_it(static_on_cpu):
    """The decoder reads greedy_exact (the probe) outside inference mode; a forward grows the cache inside it."""
    runner = CachedModel(build("llama"), 64)
    runner.forward([i % 64 for i in range(graphed.MIN_CAPACITY + 8)])
    assert runner.cache.capacity > graphed.MIN_CAPACITY and torch.is_inference(runner.cache.k)
    assert runner.batch_invariant
