"""The repetition stop: a reply ends once its last tokens are one span said over and over.

Small targets loop in greedy decoding (SmolLM2-135M repeats a haiku's line forty times, or one sentence for four
hundred tokens). Ending the reply there keeps every token the target's own: the reply is a prefix of what plain
decoding would write, and speculative and plain AR replies stop at the same token because the rule is checked
after every token, not every round.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

REPEATS = 4  # times the span must occur back to back
# tokens; a longer period is not taken for a loop. A small target loops whole paragraphs of 70-odd tokens too
# (walk 29: one said twelve times after Continue), and a verbatim 128-token span four times over is no answer.
LONGEST_SPAN = 128
SHORTEST_LOOP = 48  # tokens the repetition must cover in all, so that "ha ha ha" or a table's rule is left alone
LOOKBACK = LONGEST_SPAN * REPEATS  # the most of a reply's last tokens the rule reads
# Sentence punctuation is one mark to the rule: a small target looping a clause often ends it with "，" and "。" by
# turns, which no span repeats exactly (walk 27: a Chinese clause five times in a row ran to the budget).
PAUSES = frozenset(",.;:!?，。、；：！？")
PAUSE = -1  # what every token that is such a mark alone is read as


def is_pause(text: str) -> bool:
    """Whether a token's text is sentence punctuation alone (spaces and line breaks aside)."""
    marks = text.strip()
    return bool(marks) and all(mark in PAUSES for mark in marks)


def read_for_loops(tokens: Iterable[int], text_of: Callable[[int], str]) -> list[int]:
    """`tokens` as the rule compares them: each sentence mark (by its text, `text_of`) as PAUSE."""
    return [PAUSE if is_pause(text_of(token)) else token for token in tokens]


def repeating(tokens: list[int]) -> bool:
    """Whether `tokens` end with one span of at most LONGEST_SPAN tokens repeated REPEATS times back to back,
    covering at least SHORTEST_LOOP tokens."""
    if len(tokens) < SHORTEST_LOOP:
        return False
    last = tokens[-1]
    recent = tokens[-LONGEST_SPAN - 1:-1]
    # a period p has tokens[-1 - p] == tokens[-1]: only those p are candidates
    for period in (len(recent) - i for i, token in enumerate(recent) if token == last):
        covered = max(period * REPEATS, SHORTEST_LOOP)
        if covered <= len(tokens):
            tail = tokens[-covered:]
            if tail[period:] == tail[:-period]:
                return True
    return False
