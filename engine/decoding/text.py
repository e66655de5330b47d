"""Per-token text, decoded incrementally from the reply's token sequence.

A character can span several tokens (an emoji is 4 UTF-8 bytes, often two or three byte-level tokens), so
decoding a token alone shows '�'. Here each token is decoded after the few tokens before it; bytes that do not
make a whole character yet are held back, and the token that completes the character carries it. Special tokens
(<|im_end|>, ...) carry no text. The offsets are those of transformers' TextStreamer and vLLM's detokenizer.
"""
from __future__ import annotations

from functools import cached_property

from transformers import PreTrainedTokenizerBase
from transformers.convert_slow_tokenizer import bytes_to_unicode

INCOMPLETE = "\ufffd"  # what decode() makes of bytes that are not (yet) a whole character
BYTE_OF = {char: byte for byte, char in bytes_to_unicode().items()}  # byte-level BPE's alphabet, read back


class TextStream:
    """The text each token of a reply adds, in order; `peek` tells what a token would add without taking it."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        # ids[prefix:read] is decoded as context for what follows it (a tokenizer may decode a token differently
        # at the start of a text); ids[read:] are held back: their bytes do not make a whole character yet.
        self.prefix = self.read = 0

    def push(self, token: int) -> str:
        """Append `token`; the text it completes ('' while a character is incomplete or for a special token)."""
        self.ids.append(token)
        text = self._new_text(self.ids)
        if text and not text.endswith(INCOMPLETE):
            self.prefix, self.read = self.read, len(self.ids)
            return text
        return ""

    def peek(self, token: int) -> str:
        """The text `token` would show if it came next, an incomplete character as '�' (for rejected drafts, which
        nothing follows)."""
        return self._new_text(self.ids + [token])

    def label(self, token: int) -> str:
        """As `peek`, for lists of candidates: a special token is named (<|im_end|>) rather than empty, and a piece
        of a character as its bytes (‹e6 97›) rather than '�', where the tokenizer says what they are."""
        piece = self.tokenizer.convert_ids_to_tokens(token)
        if token in self.tokenizer.all_special_ids:
            return piece
        text = self.peek(token)
        if INCOMPLETE in text and self._byte_level:
            return "‹" + " ".join(f"{BYTE_OF[char]:02x}" for char in piece) + "›"
        return text

    @cached_property
    def _byte_level(self) -> bool:
        """Whether tokens are spelled in GPT-2's byte alphabet (one character per byte), as byte-level BPE does."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        return type(getattr(backend, "decoder", None)).__name__ == "ByteLevel"

    def flush(self) -> str:
        """The text still held back at the end of a reply ('�' for a character its last tokens left incomplete)."""
        text = self._new_text(self.ids)
        self.prefix = self.read = len(self.ids)
        return text

    def fork(self) -> "TextStream":
        """An independent copy to try tokens in (only the ids still decoded as context are copied)."""
        copy = TextStream(self.tokenizer)
        copy.ids = self.ids[self.prefix:]
        copy.read = self.read - self.prefix
        return copy

    def _new_text(self, ids: list[int]) -> str:
        before = self._decode(ids[self.prefix:self.read])
        after = self._decode(ids[self.prefix:])
        return after[len(before):] if len(after) > len(before) else ""

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True) if ids else ""
