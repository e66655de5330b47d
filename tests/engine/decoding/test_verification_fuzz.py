"""Fuzzing warp, sample, residual and both verification rules on random distributions with zeros, ties, tiny
vocabularies and point masses: never a token outside the warped support, never NaN or a division by zero; and the
emitted token is distributed as p (with a negative control that must fail)."""
from __future__ import annotations

import pytest
import torch

from engine.decoding import verification
from engine.decoding.sampling import sample, warp
from engine.decoding.verification import residual, verify_greedy, verify_sampling
from engine.events import DecodeSettings

CASES = 150


def random_logits(rows: int, vocab: int, generator: torch.Generator) -> torch.Tensor:
    """Logits of one of five shapes: spread out, with zeros (-inf), with ties, a point mass, or all equal."""
    kind = int(torch.randint(5, (), generator=generator))
    logits = torch.randn(rows, vocab, generator=generator) * 4
    if kind == 1:  # zeros: some tokens impossible, at least one left
        mask = torch.rand(rows, vocab, generator=generator) < 0.5
        mask[torch.arange(rows), torch.randint(vocab, (rows,), generator=generator)] = False
        logits[mask] = float("-inf")
    elif kind == 2:  # ties, the top included
        logits = torch.randint(3, (rows, vocab), generator=generator).float()
    elif kind == 3:  # point masses
        logits = torch.full((rows, vocab), float("-inf"))
        logits[torch.arange(rows), torch.randint(vocab, (rows,), generator=generator)] = 0.0
    elif kind == 4:
        logits = torch.zeros(rows, vocab)
    return logits


def random_settings(generator: torch.Generator) -> DecodeSettings:
    r = torch.rand(4, generator=generator).tolist()
    return DecodeSettings(greedy=r[0] < 0.2, temperature=0.05 + 3 * r[1], top_k=int(r[2] * 6),
                          top_p=max(1e-3, 1.0 if r[3] < 0.3 else r[3]))


def assert_distribution(probs: torch.Tensor) -> None:
    assert torch.isfinite(probs).all() and (probs >= 0).all()
    assert torch.allclose(probs.sum(-1), torch.ones(probs.shape[:-1]), atol=1e-5)


def test_warp_sample_residual_and_verification_stay_inside_the_support():
    generator = torch.Generator().manual_seed(0)
    for _ in range(CASES):
        vocab = int(torch.tensor([1, 2, 3, 5, 17])[torch.randint(5, (), generator=generator)])
        gamma = int(torch.randint(1, 5, (), generator=generator))
        settings = random_settings(generator)
        target_probs = warp(random_logits(gamma + 1, vocab, generator), settings)  # (γ+1, vocab)
        draft_probs = warp(random_logits(gamma, vocab, generator), settings)  # (γ, vocab)
        assert_distribution(target_probs)
        assert_distribution(draft_probs)
        draft_tokens = torch.tensor([sample(q, generator) for q in draft_probs])
        assert (draft_probs[torch.arange(gamma), draft_tokens] > 0).all()  # sample never picks a zero

        for p, q in zip(target_probs, draft_probs):
            r = residual(p, q)
            assert_distribution(r)
            assert ((r > 0) <= (p > 0)).all()  # the residual lives inside p's support

        verdict = verify_sampling(draft_tokens, draft_probs, target_probs, generator)
        n = verdict.n_accepted
        assert 0 <= n <= gamma and all(0.0 <= d < 1.0 for d in verdict.draws)
        assert (target_probs[torch.arange(n), draft_tokens[:n]] > 0).all()  # never accepts what p rules out
        assert target_probs[n, verdict.next_token] > 0

        greedy = verify_greedy(draft_tokens, target_probs)
        assert target_probs[greedy.n_accepted, greedy.next_token] == target_probs[greedy.n_accepted].max()


def test_a_zero_draft_probability_does_not_divide_by_zero():
    target_probs = torch.tensor([[0.5, 0.5], [1.0, 0.0]])
    for p_x in (0.0, 0.5):
        probs = target_probs.clone()
        probs[0] = torch.tensor([1 - p_x, p_x])
        verdict = verify_sampling(torch.tensor([1]), torch.tensor([[1.0, 0.0]]), probs, torch.Generator())
        assert verdict.n_accepted == (1 if p_x else 0)  # p/q = inf: kept; 0/0: rejected, never NaN


def test_sampling_from_no_mass_at_all_is_an_error_not_a_token():
    with pytest.raises(ValueError, match="total mass"):
        sample(torch.zeros(4), torch.Generator())
    with pytest.raises(ValueError, match="total mass"):
        sample(torch.tensor([float("nan"), 1.0]), torch.Generator())


def first_token_counts(target_probs: torch.Tensor, draft_probs: torch.Tensor, samples: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    counts = torch.zeros(target_probs.shape[-1])
    for _ in range(samples):
        draft = torch.tensor([sample(draft_probs[0], generator)])
        verdict = verify_sampling(draft, draft_probs, target_probs, generator)
        counts[draft[0] if verdict.n_accepted else verdict.next_token] += 1
    return counts


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's statistic over p's support; a token outside it counts as infinitely unlikely."""
    if counts[probs == 0].sum() > 0:
        return float("inf")
    expected = probs * counts.sum()
    support = probs > 0
    return float(((counts[support] - expected[support]) ** 2 / expected[support]).sum())


# Pearson's statistic above which a correct sampler fails once in 10,000 runs, by degrees of freedom (k − 1)
CHI_SQUARE_1E4 = {1: 15.1, 2: 18.4, 3: 21.1, 4: 23.5}


def fuzz_pairs() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Small random p, q with zeros and ties, and a hand-made pair where p and q disagree a lot."""
    generator = torch.Generator().manual_seed(3)
    pairs = [(torch.tensor([0.9, 0.0, 0.1, 0.0]), torch.tensor([0.1, 0.5, 0.3, 0.1]))]
    for _ in range(3):
        settings = DecodeSettings(greedy=False, top_p=0.9)
        p, q = (warp(random_logits(1, 4, generator)[0], settings) for _ in range(2))
        pairs.append((p, q))
    return pairs


def test_the_emitted_token_is_distributed_as_p_on_random_distributions():
    for p, q in fuzz_pairs():
        counts = first_token_counts(torch.stack([p, p]), q[None], samples=3000, seed=11)
        assert chi_square(counts, p) < CHI_SQUARE_1E4[int((p > 0).sum()) - 1 or 1], (p, q, counts)


def test_negative_control_resampling_from_p_instead_of_the_residual_is_detected(monkeypatch):
    monkeypatch.setattr(verification, "residual", lambda target_probs, draft_probs: target_probs)
    p, q = fuzz_pairs()[0]
    counts = first_token_counts(torch.stack([p, p]), q[None], samples=3000, seed=11)
    assert chi_square(counts, p) > CHI_SQUARE_1E4[1]
