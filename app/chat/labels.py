"""Labels for tokens that are pieces of a character: a draft that is one or two bytes of a CJK character decodes
alone to '�'; shown as its bytes (‹e6 97›), it reads as what it is, as the inspector's top-token lists (the
engine's TextStream.label) already write it. Applied by the worker before a round reaches the window, and by the
CLI's coloured output."""
from __future__ import annotations

import dataclasses

from transformers import PreTrainedTokenizerBase

from engine.decoding.text import BYTE_OF, INCOMPLETE
from engine.events import DraftedToken, RoundEvent, TokenProb


def is_byte_level(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether tokens are spelled in GPT-2's byte alphabet (one character per byte), as byte-level BPE does."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return type(getattr(backend, "decoder", None)).__name__ == "ByteLevel"


def byte_label(tokenizer: PreTrainedTokenizerBase, token_id: int) -> str | None:
    """‹e6 97›: the token's bytes, where the tokenizer spells them (None elsewhere)."""
    piece = tokenizer.convert_ids_to_tokens(token_id)
    if not piece or not is_byte_level(tokenizer) or any(char not in BYTE_OF for char in piece):
        return None
    return "‹" + " ".join(f"{BYTE_OF[char]:02x}" for char in piece) + "›"


def labelled(token: DraftedToken | TokenProb, tokenizer: PreTrainedTokenizerBase) -> DraftedToken | TokenProb:
    if isinstance(token, DraftedToken) and (token.top_p or token.top_q):
        token = dataclasses.replace(token, top_p=tuple(labelled(t, tokenizer) for t in token.top_p),
                                    top_q=tuple(labelled(t, tokenizer) for t in token.top_q))
    if INCOMPLETE not in token.text:
        return token
    own = token.text.replace(INCOMPLETE, "")  # a '�' before its text is the earlier pieces', not its own
    if own and not token.text.endswith(INCOMPLETE):
        return dataclasses.replace(token, text=own)
    label = byte_label(tokenizer, token.token_id)
    return token if label is None else dataclasses.replace(token, text=label)


def with_byte_labels(event: RoundEvent, tokenizer: PreTrainedTokenizerBase) -> RoundEvent:
    """The round with every draft that is a piece of a character spelled as its bytes, and a draft read after
    such pieces without their '�'. Drafts are display only (what joined the reply is in `emitted`), so the reply's
    text is unchanged."""
    drafted = tuple(labelled(token, tokenizer) for token in event.drafted)
    return event if drafted == event.drafted else dataclasses.replace(event, drafted=drafted)
