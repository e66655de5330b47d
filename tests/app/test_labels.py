"""Byte pieces of a character are labelled by their bytes (‹e8›) in the trace, the inspector and the CLI, never
as '�' or an empty label."""
from __future__ import annotations

import dataclasses

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from app.chat.labels import byte_label, with_byte_labels
from engine.events import Fate
from tests.tiny import tiny_tokenizer
from tests.ui.helpers import text_of
from tests.ui.synthetic import rejected_round
from ui.chat.inspector import span_html
from words.tokens import round_spans


@pytest.fixture(scope="module")
def byte_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on English only: a CJK character stays three one-byte tokens."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(["hello world, the quick brown fox"] * 10, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend)


def first_byte_of(tokenizer, char: str) -> int:
    return tokenizer(char)["input_ids"][0]  # 请 is e8 af b7


def test_a_byte_piece_is_labelled_by_its_bytes(byte_tokenizer):
    assert byte_label(byte_tokenizer, first_byte_of(byte_tokenizer, "请")) == "‹e8›"


def test_a_tokenizer_without_a_byte_alphabet_gives_no_byte_label():
    tokenizer = tiny_tokenizer()
    assert byte_label(tokenizer, tokenizer.convert_tokens_to_ids("w3")) is None


def test_a_rejected_byte_draft_reads_as_its_bytes_in_the_inspector(byte_tokenizer):
    token_id = first_byte_of(byte_tokenizer, "请")
    event = rejected_round(0, ["a"], "\ufffd", "b")
    draft = event.drafted[1]
    top = tuple(dataclasses.replace(t, token_id=token_id) if t.text == "\ufffd" else t for t in draft.top_p)
    event = dataclasses.replace(event, drafted=(event.drafted[0], dataclasses.replace(
        draft, token_id=token_id, top_p=top, top_q=tuple(dataclasses.replace(t, token_id=token_id) if t.text ==
                                                         "\ufffd" else t for t in draft.top_q))))
    labelled = with_byte_labels(event, byte_tokenizer)
    assert labelled.drafted[1].text == "‹e8›" and labelled.emitted == event.emitted
    spans = {span.fate: span for span in round_spans(labelled)}
    assert "‹e8›" in text_of(span_html(spans[Fate.REJECTED]))
    assert "Where the draft proposed ‹e8›" in text_of(span_html(spans[Fate.CORRECTED]))
    assert "\ufffd" not in text_of(span_html(spans[Fate.CORRECTED]))


def test_an_emitted_byte_piece_has_a_label():
    event = rejected_round(0, [""], "x", "b")  # the accepted draft is a piece whose text waits for the next token
    [piece] = [s for s in round_spans(event) if s.fate is Fate.ACCEPTED]
    assert piece.label == "‹…›" and "A piece of a character" in text_of(span_html(piece))


def test_a_draft_read_after_pieces_of_a_character_loses_their_replacement_mark(byte_tokenizer):
    event = rejected_round(0, [], "\ufffdx", "b")
    assert with_byte_labels(event, byte_tokenizer).drafted[0].text == "x"
