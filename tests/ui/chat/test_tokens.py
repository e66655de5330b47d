"""Round events become token spans in reading order, with each rejected draft just before its replacement."""
from engine.events import DraftedToken, EmittedToken, Fate, RoundEvent
from words.tokens import byte_part, byte_wording, reply_text, round_spans


def event(drafted, emitted, gamma=4):
    return RoundEvent(index=0, gamma=gamma, drafted=tuple(drafted), emitted=tuple(emitted), text_delta="",
                      draft_s=0.0, verify_s=0.0, round_s=0.0)


def test_rejected_draft_sits_between_accepted_prefix_and_its_replacement():
    drafted = [DraftedToken(5, "a", 0.9, 0.8, 0.1, True), DraftedToken(6, "b", 0.1, 0.7, 0.9, False)]
    emitted = [EmittedToken(5, "a", Fate.ACCEPTED, 0.9), EmittedToken(7, "c", Fate.RESAMPLED, 0.5)]
    spans = round_spans(event(drafted, emitted))
    assert [(s.text, s.fate) for s in spans] == [("a", Fate.ACCEPTED), ("b", Fate.REJECTED), ("c", Fate.RESAMPLED)]
    assert spans[0].drafted.q == 0.8 and spans[2].replaces is drafted[1]
    assert reply_text(spans) == "ac"


def test_bonus_follows_all_accepted_drafts_and_ar_tokens_stand_alone():
    drafted = [DraftedToken(5, "a", 0.9, 0.8, 0.1, True)]
    emitted = [EmittedToken(5, "a", Fate.ACCEPTED, 0.9), EmittedToken(8, "d", Fate.BONUS, 0.4)]
    assert [s.fate for s in round_spans(event(drafted, emitted, gamma=1))] == [Fate.ACCEPTED, Fate.BONUS]
    ar = round_spans(event([], [EmittedToken(9, "e", Fate.TARGET, 0.3)], gamma=0))
    assert [(s.fate, s.drafted) for s in ar] == [(Fate.TARGET, None)]


def test_rejection_whose_replacement_was_cut_by_eos_is_not_shown():
    drafted = [DraftedToken(1, "<eos>", 0.9, 0.8, 0.1, True), DraftedToken(6, "b", 0.1, 0.7, 0.9, False)]
    emitted = [EmittedToken(1, "<eos>", Fate.ACCEPTED, 0.9)]
    assert [s.fate for s in round_spans(event(drafted, emitted))] == [Fate.ACCEPTED]



def test_a_byte_piece_is_named_by_the_character_the_text_after_it_begins_with():
    assert byte_part("‹e4 bd›", "你好") == "2 of the 3 bytes of 你"  # 你 is e4 bd a0
    assert byte_part("‹a0›", "你") == "1 of the 3 bytes of 你"  # a continuation byte, not its first
    assert byte_wording("‹e4 bd›", "你") == "‹e4 bd›: 2 of the 3 bytes of 你"


def test_a_byte_piece_of_an_unknown_character_says_it_is_part_of_one():
    assert byte_part("‹e4 bd›", "好") is None  # 好 is e5 a5 bd: the bytes are in it, but not where a piece begins
    assert byte_wording("‹e4 bd›", "x") == "‹e4 bd› (part of a UTF-8 character)"
    assert byte_wording("word", "x") is None


def test_a_rejected_draft_knows_the_text_written_in_its_place():
    drafted = [DraftedToken(5, "‹e4 bd›", 0.1, 0.7, 0.9, False)]
    spans = round_spans(event(drafted, [EmittedToken(7, "你", Fate.RESAMPLED, 0.5)]))
    assert spans[0].fate is Fate.REJECTED and spans[0].after == "你"
    assert spans[0].byte_wording == "‹e4 bd›: 2 of the 3 bytes of 你"


def test_a_token_that_reads_like_a_control_token_is_text():
    # Qwen2's vocabulary has "</s>" as an ordinary token, and a reply may echo a pasted "<|im_end|>" piece by piece;
    # the engine writes no text for a real control token
    emitted = [EmittedToken(128247, "</s>", Fate.TARGET, 0.9), EmittedToken(27, "<|im_end|>", Fate.TARGET, 0.8),
               EmittedToken(151645, "", Fate.TARGET, 0.9)]
    spans = round_spans(RoundEvent(index=0, gamma=0, drafted=(), emitted=tuple(emitted), text_delta="", draft_s=0.0,
                                   verify_s=0.0, round_s=0.0, finish_reason="eos"))
    assert [s.special for s in spans] == [False, False, True]
    assert reply_text(spans) == "</s><|im_end|>"
