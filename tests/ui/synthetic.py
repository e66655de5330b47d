"""Hand-made round events for UI tests that need exact text (Markdown, special tokens, copied drafts)."""
from __future__ import annotations

import dataclasses

from engine.events import DraftedToken, EmittedToken, Fate, RoundEvent, TokenProb


def accepted_round(index: int, texts: list[str], bonus: str, greedy: bool = True, q: float = 0.8,
                   finish: str | None = None) -> RoundEvent:
    """Every draft accepted, then a bonus token."""
    drafted = tuple(DraftedToken(100 + i, t, 0.9, q, None if greedy else 0.1, True) for i, t in enumerate(texts))
    emitted = tuple(EmittedToken(100 + i, t, Fate.ACCEPTED, 0.9) for i, t in enumerate(texts))
    emitted += (EmittedToken(99, bonus, Fate.BONUS, 0.7),)
    return RoundEvent(index=index, gamma=len(texts), drafted=drafted, emitted=emitted,
                      text_delta="".join(texts) + bonus, draft_s=0.01, verify_s=0.02, round_s=0.03,
                      target_step_s=0.02, finish_reason=finish)


def plain_steps(n: int, text: str = "x", step_s: float = 0.02) -> tuple[RoundEvent, ...]:
    """A plain AR run of `n` one-token steps (a Comparison's `ar_events`)."""
    return tuple(RoundEvent(index=i, gamma=0, drafted=(), emitted=(EmittedToken(99, text, Fate.TARGET, 0.7),),
                            text_delta=text, draft_s=0.0, verify_s=step_s, round_s=step_s, target_step_s=step_s)
                 for i in range(n))


def in_order(*events: RoundEvent) -> tuple[RoundEvent, ...]:
    """These rounds as one decode's, numbered from 0 (a round numbered 0 again starts a continued part)."""
    return tuple(dataclasses.replace(event, index=i) for i, event in enumerate(events))


def rejected_round(index: int, kept: list[str], rejected: str, correction: str, greedy: bool = True,
                   gamma: int | None = None, rejected_q: float = 0.7) -> RoundEvent:
    """The drafts in `kept` accepted, `rejected` thrown away, `correction` emitted in its place."""
    top_p = (TokenProb(1, correction, 0.6), TokenProb(2, rejected, 0.3))
    top_q = (TokenProb(2, rejected, rejected_q), TokenProb(3, "<|im_start|>", 0.0))
    drafted = tuple(DraftedToken(100 + i, t, 0.9, 0.8, None if greedy else 0.1, True) for i, t in enumerate(kept))
    drafted += (DraftedToken(2, rejected, 0.3, rejected_q, None if greedy else 0.95, False, top_p, top_q),)
    emitted = tuple(EmittedToken(100 + i, t, Fate.ACCEPTED, 0.9) for i, t in enumerate(kept))
    emitted += (EmittedToken(1, correction, Fate.CORRECTED if greedy else Fate.RESAMPLED, 0.6),)
    return RoundEvent(index=index, gamma=gamma if gamma is not None else len(kept) + 1, drafted=drafted,
                      emitted=emitted, text_delta="".join(kept) + correction, draft_s=0.01, verify_s=0.02,
                      round_s=0.03, target_step_s=0.02)


def markdown_reply() -> list[RoundEvent]:
    """A short answer with bold text, a code fence, a rejected draft inside the code and an end-of-turn token."""
    return [
        accepted_round(0, ["Here", " is", " **"], "fast"),
        accepted_round(1, ["**", " code", ":\n"], "\n"),
        accepted_round(2, ["```", "python", "\n"], "def"),
        rejected_round(3, [" f", "():", "\n"], " pass", "    return", gamma=6),
        accepted_round(4, [" 1", "\n"], "```"),
        accepted_round(5, ["\n", "Done", "."], "<|im_end|>", finish="eos"),
    ]
