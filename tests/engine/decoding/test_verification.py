"""The acceptance rule and the residual distribution, on hand-made p and q (no model involved)."""
import torch

from engine.decoding.sampling import warp
from engine.decoding.verification import residual, verify_greedy, verify_sampling
from engine.events import DecodeSettings, Fate

VOCAB = 6


def peaked(token: int, vocab: int = VOCAB, mass: float = 0.999) -> torch.Tensor:
    probs = torch.full((vocab,), (1 - mass) / (vocab - 1))
    probs[token] = mass
    return probs


def test_drafts_the_target_agrees_with_are_all_accepted_and_a_bonus_follows():
    draft_tokens = torch.tensor([2, 4, 1])
    draft_probs = torch.stack([peaked(2), peaked(4), peaked(1)])
    target_probs = torch.stack([peaked(2), peaked(4), peaked(1), peaked(5)])
    verdict = verify_sampling(draft_tokens, draft_probs, target_probs, torch.Generator().manual_seed(0))
    assert verdict.n_accepted == 3
    assert verdict.next_fate is Fate.BONUS
    assert verdict.next_token == 5
    assert len(verdict.draws) == 3


def test_a_draft_the_target_rules_out_is_rejected_and_replaced_from_the_residual():
    draft_tokens = torch.tensor([2, 3, 1])
    draft_probs = torch.stack([peaked(2), peaked(3), peaked(1)])
    target_probs = torch.stack([peaked(2), peaked(0), peaked(1), peaked(5)])  # the target wants 0, not 3
    verdict = verify_sampling(draft_tokens, draft_probs, target_probs, torch.Generator().manual_seed(0))
    assert verdict.n_accepted == 1
    assert verdict.next_fate is Fate.RESAMPLED
    assert verdict.next_token == 0
    assert len(verdict.draws) == 2  # the third draft is never looked at


def test_greedy_accepts_while_argmaxes_agree_then_takes_the_target_argmax():
    target_probs = torch.stack([peaked(2), peaked(4), peaked(0), peaked(5)])
    verdict = verify_greedy(torch.tensor([2, 4, 1]), target_probs)
    assert (verdict.n_accepted, verdict.next_token, verdict.next_fate) == (2, 0, Fate.CORRECTED)
    verdict = verify_greedy(torch.tensor([2, 4, 0]), target_probs)
    assert (verdict.n_accepted, verdict.next_token, verdict.next_fate) == (3, 5, Fate.BONUS)


def test_residual_is_the_normalised_excess_and_falls_back_to_p_when_empty():
    p = torch.tensor([0.3, 0.7])
    q = torch.tensor([0.8, 0.2])
    assert torch.allclose(residual(p, q), torch.tensor([0.0, 1.0]))  # the seed's two-token example
    assert torch.equal(residual(p, p), p)


def _first_token_frequencies(target_probs, draft_probs, samples: int, accept_all: bool = False) -> torch.Tensor:
    """Emit the first token of many rounds (γ = 1) and count how often each token comes out."""
    generator = torch.Generator().manual_seed(1234)
    counts = torch.zeros(target_probs.shape[-1])
    for _ in range(samples):
        draft = torch.multinomial(draft_probs[0], 1, generator=generator)
        if accept_all:
            token = int(draft)
        else:
            verdict = verify_sampling(draft, draft_probs, target_probs, generator)
            token = int(draft) if verdict.n_accepted else verdict.next_token
        counts[token] += 1
    return counts


def _chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    support = expected > 0
    assert counts[~support].sum() == 0, "a token with zero target probability was emitted"
    return float(((counts[support] - expected[support]) ** 2 / expected[support]).sum())


# 99.9% quantile of chi-square with 5 degrees of freedom: a correct sampler exceeds it once in a thousand runs.
CHI2_CRITICAL_DF5 = 20.52


def _pair():
    generator = torch.Generator().manual_seed(7)
    target_logits = torch.randn(2, VOCAB, generator=generator) * 1.5
    draft_logits = torch.randn(2, VOCAB, generator=generator) * 1.5
    return target_logits, draft_logits


def test_speculative_sampling_reproduces_the_target_distribution():
    target_logits, draft_logits = _pair()
    settings = DecodeSettings(greedy=False, temperature=1.0)
    target_probs, draft_probs = warp(target_logits, settings), warp(draft_logits, settings)
    counts = _first_token_frequencies(target_probs, draft_probs, samples=20000)
    assert _chi_square(counts, target_probs[0]) < CHI2_CRITICAL_DF5
    total_variation = 0.5 * (counts / counts.sum() - target_probs[0]).abs().sum()
    assert total_variation < 0.02


def test_negative_control_accepting_every_draft_fails_the_same_test():
    target_logits, draft_logits = _pair()
    settings = DecodeSettings(greedy=False, temperature=1.0)
    target_probs, draft_probs = warp(target_logits, settings), warp(draft_logits, settings)
    counts = _first_token_frequencies(target_probs, draft_probs, samples=20000, accept_all=True)
    assert _chi_square(counts, target_probs[0]) > CHI2_CRITICAL_DF5


def test_warped_target_distribution_is_reproduced_with_temperature_top_k_and_top_p():
    target_logits, draft_logits = _pair()
    settings = DecodeSettings(greedy=False, temperature=0.7, top_k=4, top_p=0.9)
    target_probs, draft_probs = warp(target_logits, settings), warp(draft_logits, settings)
    assert (target_probs[0] == 0).sum() >= 2  # top-k 4 of 6 removed at least two tokens
    counts = _first_token_frequencies(target_probs, draft_probs, samples=20000)
    assert _chi_square(counts, target_probs[0]) < CHI2_CRITICAL_DF5


def test_a_point_mass_proposal_such_as_a_copied_token_keeps_the_target_distribution():
    target_logits, _ = _pair()
    settings = DecodeSettings(greedy=False, temperature=1.0)
    target_probs = warp(target_logits, settings)
    copied = torch.zeros_like(target_probs)
    copied[:, int(target_probs[0].argmin())] = 1.0  # the copy the target likes least: mostly rejected
    counts = _first_token_frequencies(target_probs, copied, samples=20000)
    assert _chi_square(counts, target_probs[0]) < CHI2_CRITICAL_DF5


def _first_two_tokens(target_probs, draft_probs, samples: int, draft_second) -> torch.Tensor:
    """Joint counts of the first two emitted tokens when a round drafts a second token only if
    `draft_second(x1, x2)` says so (p and q do not depend on the prefix, so the target's joint is p1 ⊗ p2)."""
    generator = torch.Generator().manual_seed(99)
    counts = torch.zeros(VOCAB, VOCAB)
    for _ in range(samples):
        x1, x2 = (int(torch.multinomial(draft_probs[i], 1, generator=generator)) for i in (0, 1))
        drafts = [x1, x2] if draft_second(x1, x2) else [x1]
        verdict = verify_sampling(torch.tensor(drafts), draft_probs[: len(drafts)],
                                  target_probs[: len(drafts) + 1], generator)
        emitted = drafts[: verdict.n_accepted] + [verdict.next_token]
        if len(emitted) == 1:  # the next round starts at the second position
            y = torch.multinomial(draft_probs[1], 1, generator=generator)
            verdict = verify_sampling(y, draft_probs[1:2], target_probs[1:3], generator)
            emitted.append(int(y) if verdict.n_accepted else verdict.next_token)
        counts[emitted[0], emitted[1]] += 1
    return counts


# 99.9% quantile of chi-square with 35 degrees of freedom (6 × 6 pairs of tokens).
CHI2_CRITICAL_DF35 = 66.62


def _three_positions():
    """p for three positions and q for two: q is close to p at the first and far from it at the second."""
    generator = torch.Generator().manual_seed(5)
    p1, p3 = warp(torch.randn(2, VOCAB, generator=generator) * 1.5, DecodeSettings(greedy=False))
    p2 = torch.tensor([0.6, 0.1, 0.1, 0.1, 0.05, 0.05])
    q2 = torch.tensor([0.1, 0.5, 0.1, 0.1, 0.1, 0.1])
    return torch.stack([p1, p2, p3]), torch.stack([0.8 * p1 + 0.2 / VOCAB, q2])


def test_a_draft_length_chosen_from_the_drafts_alone_keeps_the_target_distribution():
    target_probs, draft_probs = _three_positions()
    counts = _first_two_tokens(target_probs, draft_probs, 20000, lambda x1, x2: x1 % 2 == 0)
    assert _chi_square(counts.flatten(), torch.outer(target_probs[0], target_probs[1]).flatten()) < CHI2_CRITICAL_DF35


def test_negative_control_a_draft_length_chosen_by_looking_at_p_fails_the_same_test():
    target_probs, draft_probs = _three_positions()
    counts = _first_two_tokens(target_probs, draft_probs, 20000,
                               lambda x1, x2: target_probs[1, x2] >= draft_probs[1, x2])  # only sure acceptances
    assert _chi_square(counts.flatten(), torch.outer(target_probs[0], target_probs[1]).flatten()) > CHI2_CRITICAL_DF35


def _token_after_a_long_copied_run(samples: int, accept_all: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """A round of 16 copied drafts (point masses, as a pasted function's copy proposes them): the token emitted at the
    16th position, counted over the rounds that kept the 15 copies before it, and the target's p there."""
    run = 16
    generator = torch.Generator().manual_seed(99)
    copies = torch.tensor([t % VOCAB for t in range(run)])
    target_probs = torch.stack([peaked(int(t), mass=0.9) for t in copies[:-1]]
                               + [warp(_pair()[0], DecodeSettings(greedy=False, temperature=1.0))[0]] * 2)
    copies[-1] = int(target_probs[run - 1].argmin())  # the last copy the target likes least: mostly resampled
    draft_probs = torch.nn.functional.one_hot(copies, VOCAB).float()
    counts = torch.zeros(VOCAB)
    for _ in range(samples):
        verdict = verify_sampling(copies, draft_probs, target_probs, generator)
        kept = run if accept_all else verdict.n_accepted
        if kept >= run - 1:
            counts[int(copies[-1]) if kept == run else verdict.next_token] += 1
    return counts, target_probs[run - 1]


def test_a_long_copied_run_keeps_the_target_distribution_at_its_end():
    counts, p = _token_after_a_long_copied_run(8000)
    assert counts.sum() > 1000  # enough rounds kept the 15 copies before it
    assert _chi_square(counts, p) < CHI2_CRITICAL_DF5


def test_negative_control_keeping_every_copy_of_a_long_run_fails_the_same_test():
    counts, p = _token_after_a_long_copied_run(8000, accept_all=True)
    assert _chi_square(counts, p) > CHI2_CRITICAL_DF5
