"""The seed's reference algorithm (section 19.4.7), kept as the baseline a reader of the seed would start from:
each draft step and each verification re-runs a model over the whole sequence, with no KV cache.

It follows the printed code line for line, with four departures, each needed to run it beside the engine:
- the target position of draft i is counted from the round's start. The printed `generated.shape[0] + i - 1`
  moves as accepted tokens are appended, so after one acceptance it judges x_i by the wrong position, and once
  more than γ/2 drafts are accepted it indexes past the target's logits (an IndexError);
- the reply stops at EOS, as every other method in the bench does;
- randomness comes from an explicit `torch.Generator`, and probabilities are computed in float32 like the engine's;
- a greedy variant (argmax match, 19.4.5): draft the argmax of q, accept while it is the argmax of p, else take
  the argmax of p.
It yields one `RoundEvent` per round, so the statistics in `engine.stats` apply to it unchanged.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from engine.events import DraftedToken, EmittedToken, Fate, RoundEvent
from engine.models.loading import synchronize


def _logits(model, sequence: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Logits (seq_len, vocab) for every position of `sequence` (seq_len,): one full forward, nothing cached."""
    return model(sequence.unsqueeze(0), use_cache=False).logits[0, :, :vocab_size].float()


def _probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return F.softmax(logits / temperature, dim=-1)


@torch.inference_mode()
def speculative_decode(target_model, draft_model, prefix: list[int], gamma: int, max_tokens: int, *,
                       greedy: bool, temperature: float = 1.0, generator: torch.Generator,
                       eos_ids: set[int], vocab_size: int) -> Iterator[RoundEvent]:
    """Yield one RoundEvent per round until EOS or `max_tokens` new tokens (the seed's `speculative_decode`)."""
    device = target_model.device
    if greedy:
        temperature = 1.0  # argmax does not depend on it
    generated = torch.tensor(prefix, dtype=torch.long, device=device)
    n_prefix = len(prefix)
    index = 0
    while generated.shape[0] - n_prefix < max_tokens:
        round_start = time.perf_counter()
        start = generated.shape[0]  # the seed reads generated.shape[0] inside the loop below; see the docstring

        # 1) draft γ tokens, re-reading the whole sequence for each one
        draft_tokens: list[int] = []
        draft_probs: list[torch.Tensor] = []
        current = generated.clone()
        for _ in range(gamma):
            prob_q = _probs(_logits(draft_model, current, vocab_size)[-1], temperature)
            token = int(prob_q.argmax()) if greedy else int(torch.multinomial(prob_q, 1, generator=generator))
            draft_tokens.append(token)
            draft_probs.append(prob_q)
            current = torch.cat([current, torch.tensor([token], device=device)])
        synchronize(device)
        drafted_at = time.perf_counter()

        # 2) one target pass over prefix + γ drafts
        target_logits = _logits(target_model, current, vocab_size)  # (start + γ, vocab)
        synchronize(device)
        verified_at = time.perf_counter()

        # 3) check the drafts left to right; 4) correct the first rejection, or take the bonus token
        drafted: list[DraftedToken] = []
        new_tokens: list[tuple[int, Fate, float]] = []
        for i in range(gamma):
            p = _probs(target_logits[start + i - 1], temperature)
            q, x = draft_probs[i], draft_tokens[i]
            p_x, q_x = p[x].item(), q[x].item()
            if greedy:
                r, accepted = None, int(p.argmax()) == x
            else:
                r = torch.rand(1, generator=generator, device=device).item()
                accepted = r < min(1.0, p_x / max(q_x, 1e-10))
            drafted.append(DraftedToken(token_id=x, text="", p=p_x, q=q_x, r=r, accepted=accepted))
            if accepted:
                new_tokens.append((x, Fate.ACCEPTED, p_x))
                continue
            if greedy:
                new_token, fate = int(p.argmax()), Fate.CORRECTED
            else:
                residual = torch.clamp(p - q, min=0)
                residual_sum = residual.sum()
                p_prime = residual / residual_sum if residual_sum > 1e-10 else p
                new_token, fate = int(torch.multinomial(p_prime, 1, generator=generator)), Fate.RESAMPLED
            new_tokens.append((new_token, fate, p[new_token].item()))
            break
        else:
            p = _probs(target_logits[-1], temperature)
            bonus = int(p.argmax()) if greedy else int(torch.multinomial(p, 1, generator=generator))
            new_tokens.append((bonus, Fate.BONUS, p[bonus].item()))

        # cut at EOS and at the token budget (the seed truncates to max_tokens once, at the end)
        emitted: list[EmittedToken] = []
        finish = None
        for token, fate, p_token in new_tokens:
            emitted.append(EmittedToken(token, "", fate, p_token))
            if token in eos_ids:
                finish = "eos"
                break
            if start - n_prefix + len(emitted) >= max_tokens:
                finish = "length"
                break
        generated = torch.cat([generated, torch.tensor([t.token_id for t in emitted], device=device)])
        yield RoundEvent(
            index=index, gamma=gamma, drafted=tuple(drafted), emitted=tuple(emitted), text_delta="",
            draft_s=drafted_at - round_start, verify_s=verified_at - drafted_at,
            round_s=time.perf_counter() - round_start, finish_reason=finish,
        )
        if finish:
            return
        index += 1
