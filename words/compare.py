"""A reply beside its plain AR run: where the two texts part and one sentence on why.

Greedy speculative decoding emits the target's argmax at every position, so it matches plain AR exactly when
the target scores a position the same way in a multi-token verification pass as in a one-token step. On the
fast path the engine guarantees that (PairInfo.greedy_exact); elsewhere the two passes can round differently,
and a near-tie between the two best tokens then flips. Sampling runs draw different random numbers.
"""
from __future__ import annotations

from engine.events import EmittedToken, PairInfo
from words.records import Comparison, Reply
from words.transcript import ComparisonView
from words.wording import estimate_apart


def first_difference(left: list[int], right: list[int]) -> int | None:
    """The first index where two token sequences differ (the shorter one's end counts); None when equal."""
    for i, (a, b) in enumerate(zip(left, right)):
        if a != b:
            return i
    return None if len(left) == len(right) else min(len(left), len(right))


def greedy_is_exact(pair: PairInfo | None) -> bool:
    """Whether the engine promises greedy speculative = greedy AR token for token for this pair."""
    return pair is not None and pair.greedy_exact


def parting(comparison: Comparison, reply: Reply) -> int | None:
    """Where the reply and its plain AR run part; where a stopped run ends is where it stopped, no parting."""
    ours, theirs = [t.token_id for t in reply.tokens], [t.token_id for t in comparison.ar_tokens]
    at = first_difference(ours, theirs)
    return None if comparison.stopped and at == min(len(ours), len(theirs)) else at


def explain(comparison: Comparison, reply: Reply, exact: bool) -> str:
    ours, theirs = reply.tokens, comparison.ar_tokens
    at = parting(comparison, reply)
    if comparison.stopped:
        if not theirs:
            return "The comparison was stopped before plain AR made a token, so nothing is measured."
        return ("The comparison was stopped early, so no speed is measured; "
                + (f"plain AR's {len(theirs)} tokens are the reply's first {len(theirs)}." if at is None
                   else f"the texts part at token {at + 1}."))
    if not reply.request.settings.greedy:
        if at is None:
            return "Sampling: both runs drew the same tokens."
        return (f"Sampling: the texts part at token {at + 1} because the two runs draw different random numbers; "
                "both follow the target's distribution, and only the speed is compared.")
    if at is None:
        if exact:
            return f"Plain AR produced the same {len(ours)} tokens: greedy speculative decoding is exact here."
        return (f"Plain AR produced the same {len(ours)} tokens (on this path greedy is exact only up to "
                "rounding).")
    return (f"The texts part at token {at + 1}: this reply has {_token(ours, at)} where plain AR has "
            f"{_token(theirs, at)}, a near-tie between the target's best tokens that the multi-token verification "
            "pass and the one-token AR step round differently"
            + ("." if exact else "; off the fast path greedy is exact only up to rounding."))


def _token(tokens: tuple[EmittedToken, ...], at: int) -> str:
    if at >= len(tokens):
        return "the end of the text"
    return f"“{tokens[at].text}” (p = {tokens[at].p:.3f})"


def comparison_view(comparison: Comparison, reply: Reply, summary: str, pair: PairInfo | None, label: str = ""
                    ) -> ComparisonView:
    ours, theirs = reply.tokens, comparison.ar_tokens
    at = parting(comparison, reply)
    return ComparisonView(summary=summary, explanation=explain(comparison, reply, greedy_is_exact(pair)),
                          reply_tokens=tuple(t.text for t in ours), ar_tokens=tuple(t.text for t in theirs),
                          first_difference=at, label=label, sampled=not reply.request.settings.greedy,
                          details=estimate_apart(comparison, reply))
