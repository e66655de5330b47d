"""The verification step of speculative decoding (section 19.4.3 of the seed), as pure functions.

Notation follows the seed: p = the target's distribution (`target_probs`), q = the draft's (`draft_probs`),
γ drafts x_1..x_γ, a uniform draw r per draft. Draft x_i is accepted when r < min(1, p(x_i)/q(x_i)); at the
first rejection the round ends with a token from the residual p' = norm(max(0, p − q)); if all γ are
accepted the target's distribution at position γ+1 gives a bonus token. Every emitted token is then
distributed exactly as p (the seed's proof: min(q, p) + max(0, p − q) = p).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.events import Fate
from engine.decoding.sampling import sample


@dataclass(frozen=True)
class Verdict:
    n_accepted: int  # length of the accepted prefix of the drafts
    next_token: int  # the correction (after a rejection) or the bonus token (after none)
    next_fate: Fate
    draws: tuple[float, ...]  # r for each draft the target looked at; empty in greedy mode


def _accepted_prefix(accepted: torch.Tensor) -> int:
    """Number of leading True values in a bool vector."""
    return int(accepted.to(torch.int32).cumprod(0).sum().item())


def residual(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """p' = norm(max(0, p − q)); falls back to p when the residual is empty (p ≤ q everywhere, i.e. p = q)."""
    excess = (target_probs - draft_probs).clamp_min(0.0)
    total = excess.sum()
    return excess / total if total > 0 else target_probs


def verify_sampling(draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                    generator: torch.Generator) -> Verdict:
    """Rejection sampling over γ drafts.

    draft_tokens (γ,), draft_probs (γ, vocab): q at each draft position; target_probs (γ+1, vocab): p at each
    draft position plus the one after the last draft.
    """
    gamma = draft_tokens.shape[0]
    positions = torch.arange(gamma, device=draft_tokens.device)
    p_x = target_probs[positions, draft_tokens]
    q_x = draft_probs[positions, draft_tokens]
    r = torch.rand(gamma, generator=generator, device=target_probs.device)
    # q(x) > 0 since x was drawn from q; the floor only keeps a caller's zero from dividing (p/q = inf: accepted)
    accept_prob = torch.minimum(torch.ones_like(p_x), p_x / q_x.clamp_min(torch.finfo(q_x.dtype).tiny))
    n = _accepted_prefix(r < accept_prob)
    if n < gamma:
        token, fate = sample(residual(target_probs[n], draft_probs[n]), generator), Fate.RESAMPLED
    else:
        token, fate = sample(target_probs[gamma], generator), Fate.BONUS
    return Verdict(n, token, fate, tuple(r[: min(n + 1, gamma)].tolist()))


def verify_greedy(draft_tokens: torch.Tensor, target_probs: torch.Tensor) -> Verdict:
    """Greedy mode: accept while the draft equals the target's argmax; then take the target's argmax."""
    gamma = draft_tokens.shape[0]
    target_choice = target_probs.argmax(-1)  # (γ+1,)
    n = _accepted_prefix(draft_tokens == target_choice[:gamma])
    fate = Fate.CORRECTED if n < gamma else Fate.BONUS
    return Verdict(n, int(target_choice[n].item()), fate, ())
