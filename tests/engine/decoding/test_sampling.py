"""Temperature, top-k and top-p, and their application to p and q alike."""
import math

import torch

from engine.decoding.sampling import warp
from engine.events import DecodeSettings


def test_temperature_divides_the_logits():
    logits = torch.tensor([2.0, 1.0, 0.0])
    probs = warp(logits, DecodeSettings(greedy=False, temperature=0.5))
    assert torch.allclose(probs, torch.softmax(logits / 0.5, -1))


def test_top_k_keeps_the_k_most_likely_tokens():
    probs = warp(torch.tensor([3.0, 1.0, 2.0, 0.0]), DecodeSettings(greedy=False, top_k=2))
    assert probs[1] == 0 and probs[3] == 0
    assert math.isclose(float(probs.sum()), 1.0, rel_tol=1e-6)


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    probs = warp(logits, DecodeSettings(greedy=False, top_p=0.75))
    assert torch.allclose(probs, torch.tensor([0.5, 0.3, 0.0, 0.0]) / 0.8)


def test_top_p_always_keeps_the_most_likely_token():
    probs = warp(torch.tensor([5.0, 0.0]), DecodeSettings(greedy=False, top_p=0.01))
    assert torch.equal(probs, torch.tensor([1.0, 0.0]))


def test_warp_works_row_wise_on_a_block_of_positions():
    logits = torch.randn(3, 10)
    settings = DecodeSettings(greedy=False, temperature=0.8, top_k=5, top_p=0.9)
    block = warp(logits, settings)
    rows = torch.stack([warp(row, settings) for row in logits])
    assert torch.allclose(block, rows)
