"""Per-token text, decoded incrementally from the reply's token sequence.

A character can span several tokens (an emoji is 4 UTF-8 bytes, often two or three byte-level tokens), so
decoding a token alone shows '�'. Here each token is decoded after the few tokens before it; bytes that do not
make a whole character yet are held back, and the token that completes the character carries it. A reply that
ends part-way through a character (cut at max new tokens, stopped, or ended by EOS) leaves those bytes out rather
than showing '�', and `left_out` says so. Special tokens (<|im_end|>, ...) carry no text. The offsets are those of transformers' TextStreamer and vLLM's detokenizer.
"""
from __future__ import annotations

import codecs
from functools import cached_property

from jinja2 import TemplateError
from transformers import PreTrainedTokenizerBase
from transformers.convert_slow_tokenizer import bytes_to_unicode

INCOMPLETE = "\ufffd"  # what decode() makes of bytes that are not (yet) a whole character
BYTE_OF = {char: byte for byte, char in bytes_to_unicode().items()}  # byte-level BPE's alphabet, read back


def utf8_length(lead: int) -> int | None:
    """How many bytes the UTF-8 character that begins with the byte `lead` has (None: no character begins so)."""
    for length, (low, high) in enumerate(((0x00, 0x80), (0xC2, 0xE0), (0xE0, 0xF0), (0xF0, 0xF5)), start=1):
        if low <= lead < high:
            return length
    return None


def left_out_note(held: bytes | None) -> str:
    """The note on a reply that ended part-way through a character, in words: how many of the character's bytes
    were written and, where the tokenizer spells them (`held`), which ones."""
    note = "the reply ended part-way through a character: only"
    if not held:
        return f"{note} some of its UTF-8 bytes were written, too few to make it, so they were left out of the text"
    length = utf8_length(held[0])
    written = f"{len(held)} of its {length}" if length is not None and len(held) < length else f"{len(held)}"
    were, them = ("was", "it") if len(held) == 1 else ("were", "they")
    return (f"{note} {written} UTF-8 bytes {were} written ({' '.join(f'{b:02x}' for b in held)}), too few to make "
            f"the character, so {them} {were} left out of the text")


SYSTEM_MARK = "\u2063system\u2063"  # text no real prompt holds, to find where a template puts a system prompt
USER_MARK = "\u2063user\u2063"


def template_system_prompt(tokenizer: PreTrainedTokenizerBase) -> str:
    """The system prompt the chat template adds to a conversation that brings none (SmolLM2's "You are a helpful
    AI assistant named SmolLM, …"); "" where it adds none or has no template. Read off the template itself: the
    conversation rendered with a marked system prompt, and without one."""
    if not tokenizer.chat_template:
        return ""

    def rendered(messages: list[dict]) -> str:
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    user = {"role": "user", "content": USER_MARK}
    try:
        marked, bare = rendered([{"role": "system", "content": SYSTEM_MARK}, user]), rendered([user])
    except TemplateError:  # a template that refuses a system role adds none of its own
        return ""
    head, _, tail = marked.partition(SYSTEM_MARK)
    if not tail or not bare.startswith(head):
        return ""
    end = bare.find(tail, len(head))
    return bare[len(head):end].strip() if end > len(head) else ""


class TextStream:
    """The text each token of a reply adds, in order; `peek` tells what a token would add without taking it."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        # ids[prefix:read] is decoded as context for what follows it (a tokenizer may decode a token differently
        # at the start of a text); ids[read:] are held back: their bytes do not make a whole character yet.
        self.prefix = self.read = 0
        self.left_out: str | None = None  # after `flush`: a one-line note when an incomplete character was dropped

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
        return self.labels([token])[0]

    def labels(self, tokens: list[int]) -> list[str]:
        """`label` of each token, decoded in one call of the tokenizer (the inspector's top lists come every round
        that rejects a draft)."""
        pieces = self.tokenizer.convert_ids_to_tokens(tokens)
        before = self._decode(self.ids[self.prefix:self.read])
        afters = self.tokenizer.batch_decode([self.ids[self.prefix:] + [t] for t in tokens], skip_special_tokens=True)
        labels = []
        for token, piece, after in zip(tokens, pieces, afters):
            text = after[len(before):] if len(after) > len(before) else ""
            if token in self._special_ids:
                labels.append(piece)
            elif INCOMPLETE in text and self._byte_level:
                labels.append("‹" + " ".join(f"{BYTE_OF[char]:02x}" for char in piece) + "›")
            else:
                labels.append(text)
        return labels

    @cached_property
    def _special_ids(self) -> set[int]:
        return set(self.tokenizer.all_special_ids)

    @cached_property
    def _byte_level(self) -> bool:
        """Whether tokens are spelled in GPT-2's byte alphabet (one character per byte), as byte-level BPE does."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        return type(getattr(backend, "decoder", None)).__name__ == "ByteLevel"

    def flush(self) -> str:
        """The whole characters still held back at the end of a reply. Bytes its last tokens left short of a
        character are dropped, never shown as '�', and `left_out` says which."""
        text = self._new_text(self.ids)
        whole = text.rstrip(INCOMPLETE)
        if whole != text:
            self.left_out = left_out_note(self._bytes(self.ids[self.read:]) if self._byte_level else None)
        self.prefix = self.read = len(self.ids)
        return whole

    def _bytes(self, ids: list[int]) -> bytes:
        """The bytes at the end of `ids` that do not make a whole UTF-8 character (byte-level tokenizers only)."""
        raw = bytes(BYTE_OF[char] for piece in self.tokenizer.convert_ids_to_tokens(ids) for char in piece)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        decoder.decode(raw)
        return decoder.getstate()[0]

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
