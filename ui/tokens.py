"""Turn round events into the token spans the chat pane shows, rejected drafts in the place they were proposed."""
from __future__ import annotations

import re
from dataclasses import dataclass

from engine.events import DraftedToken, EmittedToken, Fate, RoundEvent

# Chat-template markers such as <|im_end|> or </s>: part of the trace, never of the text a reader sees.
SPECIAL_TOKEN = re.compile(r"<\|[^<>|]*\|>|</?s>")


@dataclass(frozen=True)
class TokenSpan:
    """One token on screen; `drafted` carries p, q, r for drafts, `replaces` the draft a correction replaced.

    `greedy` and `round_drafts` (drafts proposed in the span's round) let the inspector word each mode and the
    bonus sentence truthfully; `copied` marks a prompt-lookup draft (q = 1), `special` a chat-template token.
    """

    text: str
    fate: Fate
    round_index: int
    emitted: EmittedToken | None = None  # None for a rejected draft: it never joined the reply
    drafted: DraftedToken | None = None
    replaces: DraftedToken | None = None
    greedy: bool = True
    round_drafts: int = 0
    copied: bool = False
    special: bool = False

    @property
    def label(self) -> str:
        """What the inspector names the token by: its text, or for a piece of a character (whose text waits for
        the token that completes it) its bytes as its draft was labelled, else ‹…›."""
        if self.text or self.special:
            return self.text
        if self.drafted is not None and self.drafted.text.startswith("‹"):
            return self.drafted.text
        return "‹…›"

    @property
    def clean(self) -> bool:
        """Whether the span belongs to the text a reader sees (and copies)."""
        return self.fate is not Fate.REJECTED and not self.special


def is_copied(token: DraftedToken | None, lookup: bool) -> bool:
    """Prompt lookup proposes with q = 1 exactly; a draft model's softmax practically never reaches 1.0."""
    return lookup and token is not None and token.q >= 1.0


def round_spans(event: RoundEvent, lookup: bool = False) -> list[TokenSpan]:
    """Accepted drafts, then the rejected draft (if its replacement was emitted), then the correction or bonus.

    `lookup` says whether the reply was drafted with prompt lookup on, so q = 1 drafts are known to be copies.
    """
    # Greedy verification draws no r; a round without drafts (plain AR) has no mode to show.
    greedy = not event.drafted or event.drafted[0].r is None
    common = dict(greedy=greedy, round_drafts=event.gamma)
    spans = []
    last = len(event.emitted) - 1
    for i, token in enumerate(event.emitted):
        drafted = event.drafted[i] if i < len(event.drafted) else None
        special = bool(SPECIAL_TOKEN.fullmatch(token.text)) or (i == last and event.finish_reason == "eos")
        if token.fate is Fate.ACCEPTED:
            spans.append(TokenSpan(token.text, token.fate, event.index, token, drafted,
                                   copied=is_copied(drafted, lookup), special=special, **common))
            continue
        rejected = drafted if drafted is not None and not drafted.accepted else None
        if rejected is not None:
            spans.append(TokenSpan(rejected.text, Fate.REJECTED, event.index, None, rejected,
                                   copied=is_copied(rejected, lookup), **common))
        spans.append(TokenSpan(token.text, token.fate, event.index, token, None, rejected, special=special,
                               **common))
    return spans


def remote_span(text: str, index: int) -> TokenSpan:
    """One streamed piece of a remote engine's reply: its text, with no fate, as the engine reports none."""
    return TokenSpan(text, Fate.UNKNOWN, index)


def reply_text(spans: list[TokenSpan]) -> str:
    """The text the reader sees: rejected drafts and chat-template tokens left out."""
    return "".join(s.text for s in spans if s.clean)
