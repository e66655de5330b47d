"""Turn round events into the token spans the chat pane shows, rejected drafts in the place they were proposed."""
from __future__ import annotations

import re
from dataclasses import dataclass

from engine.events import DraftedToken, EmittedToken, Fate, RoundEvent

# A piece of a character labelled by its bytes, as app/chat/labels.py and the engine's top lists write it: ‹e4 bd›
BYTE_LABEL = re.compile(r"‹([0-9a-f]{2}(?: [0-9a-f]{2})*)›")
PART_OF_A_CHARACTER = "part of a UTF-8 character"


def label_bytes(label: str) -> bytes | None:
    """The bytes a piece of a character is labelled by (‹e4 bd› → b'\\xe4\\xbd'); None for any other text."""
    match = BYTE_LABEL.fullmatch(label)
    return bytes.fromhex(match.group(1)) if match else None


def byte_part(label: str, after: str) -> str | None:
    """"2 of the 3 bytes of 你": which character a piece labelled by its bytes belongs to, where the text shown
    after the piece (`after`) begins with that character; None where it does not, or the label spells no bytes."""
    piece = label_bytes(label)
    character = after[:1]
    whole = character.encode("utf-8")
    if piece is None or len(piece) >= len(whole):
        return None
    # A piece that begins with a lead byte (not 10xxxxxx) begins its character; one that does not, continues it.
    found = whole.find(piece)
    if found == 0 if piece[0] & 0xC0 != 0x80 else found > 0:
        return f"{len(piece)} of the {len(whole)} bytes of {character}"
    return None


def byte_wording(label: str, after: str = "") -> str | None:
    """A byte label with its meaning: "‹e4 bd›: 2 of the 3 bytes of 你" where `byte_part` knows the character, else
    "‹e4 bd› (part of a UTF-8 character)"; None for a label that spells no bytes."""
    if label_bytes(label) is None:
        return None
    part = byte_part(label, after)
    return f"{label}: {part}" if part else f"{label} ({PART_OF_A_CHARACTER})"


@dataclass(frozen=True)
class TokenSpan:
    """One token on screen; `drafted` carries p, q, r for drafts, `replaces` the draft a correction replaced.

    `greedy` and `round_drafts` (drafts proposed in the span's round) let the inspector word each mode and the
    bonus sentence truthfully; `copied` marks a prompt-lookup draft (q = 1), `replaced_a_copy` a token put in place
    of one, `special` a chat-template token.
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
    replaced_a_copy: bool = False
    special: bool = False
    after: str = ""  # what its round emitted after it (a rejected draft: its replacement on), to name a character

    @property
    def byte_wording(self) -> str | None:
        """A token labelled by its bytes, with what they are (`byte_wording`); None for any other token."""
        return byte_wording(self.label, self.after)

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


def round_spans(event: RoundEvent, lookup: bool = False, round_index: int | None = None) -> list[TokenSpan]:
    """Accepted drafts, then the rejected draft (if its replacement was emitted), then the correction or bonus.

    `lookup` says whether the reply was drafted with prompt lookup on, so q = 1 drafts are known to be copies.
    `round_index` is the round's place in the reply as shown (default: the event's own index, which a continuation's
    part counts from 0 again).
    """
    index = event.index if round_index is None else round_index
    # Greedy verification draws no r; a round without drafts (plain AR) has no mode to show.
    greedy = not event.drafted or event.drafted[0].r is None
    common = dict(greedy=greedy, round_drafts=event.gamma)
    spans = []
    last = len(event.emitted) - 1
    for i, token in enumerate(event.emitted):
        drafted = event.drafted[i] if i < len(event.drafted) else None
        # The engine writes no text for a control token, so a token that reads like one ("</s>", a pasted
        # "<|im_end|>") is text; the control token that ends the reply is the one a reader does not see.
        special = i == last and event.finish_reason == "eos"
        after = "".join(t.text for t in event.emitted[i + 1:])
        if token.fate is Fate.ACCEPTED:
            spans.append(TokenSpan(token.text, token.fate, index, token, drafted,
                                   copied=is_copied(drafted, lookup), special=special, after=after, **common))
            continue
        rejected = drafted if drafted is not None and not drafted.accepted else None
        if rejected is not None:
            spans.append(TokenSpan(rejected.text, Fate.REJECTED, index, None, rejected,
                                   copied=is_copied(rejected, lookup), after=token.text + after, **common))
        spans.append(TokenSpan(token.text, token.fate, index, token, None, rejected,
                               replaced_a_copy=is_copied(rejected, lookup), special=special, after=after, **common))
    return spans


def remote_span(text: str, index: int) -> TokenSpan:
    """One streamed piece of a remote engine's reply: its text, with no fate, as the engine reports none."""
    return TokenSpan(text, Fate.UNKNOWN, index)


def reply_text(spans: list[TokenSpan]) -> str:
    """The text the reader sees: rejected drafts and chat-template tokens left out."""
    return "".join(s.text for s in spans if s.clean)
