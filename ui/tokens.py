"""Turn round events into the token spans the chat pane shows, rejected drafts in the place they were proposed."""
from __future__ import annotations

from dataclasses import dataclass

from engine.events import DraftedToken, EmittedToken, Fate, RoundEvent


@dataclass(frozen=True)
class TokenSpan:
    """One token on screen; `drafted` carries p, q, r for drafts, `replaces` the draft a correction replaced."""

    text: str
    fate: Fate
    round_index: int
    emitted: EmittedToken | None = None  # None for a rejected draft: it never joined the reply
    drafted: DraftedToken | None = None
    replaces: DraftedToken | None = None


def round_spans(event: RoundEvent) -> list[TokenSpan]:
    """Accepted drafts, then the rejected draft (if its replacement was emitted), then the correction or bonus."""
    spans = []
    for i, token in enumerate(event.emitted):
        drafted = event.drafted[i] if i < len(event.drafted) else None
        if token.fate is Fate.ACCEPTED:
            spans.append(TokenSpan(token.text, token.fate, event.index, token, drafted))
            continue
        rejected = drafted if drafted is not None and not drafted.accepted else None
        if rejected is not None:
            spans.append(TokenSpan(rejected.text, Fate.REJECTED, event.index, None, rejected))
        spans.append(TokenSpan(token.text, token.fate, event.index, token, None, rejected))
    return spans


def reply_text(spans: list[TokenSpan]) -> str:
    """The text the reader sees with rejected drafts hidden (token by token, so special tokens included)."""
    return "".join(s.text for s in spans if s.fate is not Fate.REJECTED)
