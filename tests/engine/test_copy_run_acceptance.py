"""Acceptance of copies by their place in a run of copies, from synthetic rounds: places counted from the run's
first copy, a model draft ending a run, and drafts the target never checked left out."""
from engine.events import DraftedToken, EmittedToken, Fate, RoundEvent
from engine.stats import copy_run_acceptance


def event(kinds: str, n_accepted: int) -> RoundEvent:
    """A round of drafts of these kinds ("m" model, "c" copy, one letter each) that kept the first n."""
    looked_at = min(n_accepted + 1, len(kinds))
    drafted = tuple(DraftedToken(5, "", 0.5, 1.0, None, i < n_accepted) for i in range(looked_at))
    fates = [Fate.ACCEPTED] * n_accepted + [Fate.BONUS if n_accepted == len(kinds) else Fate.CORRECTED]
    return RoundEvent(index=0, gamma=len(kinds), drafted=drafted,
                      emitted=tuple(EmittedToken(5, "", fate, 0.5) for fate in fates), text_delta="", draft_s=0.0,
                      verify_s=0.01, round_s=0.01, draft_kinds=tuple({"m": "model", "c": "copy"}[k] for k in kinds))


def test_copies_are_placed_from_their_runs_first_copy_not_the_rounds_start():
    """After a model draft the copies are at places 1 and 2 (from the round's start they would be 2 and 3)."""
    runs = copy_run_acceptance([event("mcc", 3), event("ccc", 1)])
    assert runs.checked == (2, 2)
    assert runs.kept == (2, 1)
    assert runs.shares == (1.0, 0.5)


def test_a_model_draft_ends_a_run_and_the_next_copy_starts_one():
    runs = copy_run_acceptance([event("cmc", 3)])
    assert (runs.checked, runs.kept) == ((2,), (2,))


def test_copies_after_the_first_rejection_are_not_counted():
    runs = copy_run_acceptance([event("cccc", 0)])  # the target checked the first copy only
    assert (runs.checked, runs.kept) == ((1,), (0,))


def test_rounds_without_copies_leave_it_empty():
    runs = copy_run_acceptance([event("mm", 2), event("", 0)])
    assert (runs.checked, runs.shares) == ((), ())
