"""Round events become token spans in reading order, with each rejected draft just before its replacement."""
from engine.events import DraftedToken, EmittedToken, Fate, RoundEvent
from ui.tokens import reply_text, round_spans


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

