"""Compare drafters: each drafting starts from what the conversation taught the live planner and leaves it as it
was, and a drafting that drafted nothing is said to have done plain AR's work, not given a speedup."""
from __future__ import annotations

import dataclasses

import pytest

import app.chat.worker as app_worker
from engine.events import DecodeSettings, Drafting
from tests.ui.helpers import REPLY_TIMEOUT_MS, send
from tests.ui.synthetic import accepted_round
from ui.compare.drafters_dialog import drafters_table
from words.records import DrafterComparison, DrafterRun, ReplyRequest


def test_compare_drafters_starts_each_planner_from_what_the_chat_taught_and_leaves_it_as_it_was(
        make_studio, mixed_decoder, qtbot, monkeypatch):
    studio = make_studio(mixed_decoder, greedy=True, max_new_tokens=10, gamma=3)
    send(qtbot, studio)
    live = studio.worker.decoder.planner.acceptance
    learnt = (list(live.kept), list(live.reached), {k: list(v) for k, v in live.calibration.items()})
    assert learnt[1], "the reply drafted nothing: no acceptance to carry over"
    started_with = []
    planner = app_worker.RoundPlanner

    def recording(costs, acceptance):
        started_with.append((list(acceptance.kept), list(acceptance.reached)))
        return planner(costs, acceptance)

    monkeypatch.setattr(app_worker, "RoundPlanner", recording)
    with qtbot.waitSignal(studio.chat.drafters_compared, timeout=REPLY_TIMEOUT_MS):
        studio.window.menus.compare_drafters_action.trigger()
    assert started_with == [learnt[:2]] * 4 * app_worker.DRAFTER_PASSES  # each drafting's runs, plain AR's too
    assert (live.kept, live.reached, live.calibration) == learnt


def test_a_drafting_that_drafted_nothing_is_plain_ars_work_not_a_speedup(qapp):
    steps = tuple(dataclasses.replace(accepted_round(i, [], "w"), gamma=0) for i in range(4))
    slower = tuple(dataclasses.replace(step, round_s=2 * step.round_s) for step in steps)  # one run's spread
    drafted = tuple(accepted_round(i, ["a"], "b") for i in range(2))
    request = ReplyRequest(({"role": "user", "content": "hi"},), DecodeSettings())
    comparison = DrafterComparison(request, (DrafterRun(Drafting.MODEL, drafted), DrafterRun(Drafting.LOOKUP, slower),
                                             DrafterRun(Drafting.NONE, steps)))
    table = drafters_table(comparison)
    assert [table.item(r, 0).text() for r in range(3)] == ["draft model", "copying only", "none (plain AR)"]
    assert table.item(1, 5).text() == "plain AR's work (drafted nothing)"  # no 0.50× for the same work
    assert float(table.item(1, 2).text()) == pytest.approx(float(table.item(2, 2).text()) / 2, rel=0.01)  # it stands
    assert table.item(0, 5).text().endswith("×") and table.item(2, 5).text() == "1.00×"
    assert [table.item(r, 1).text() for r in range(3)] == ["4", "4", "4"]  # what each run decoded
    assert [table.item(r, 6).text() for r in range(3)] == ["—"] * 3  # one run each: no spread to tell


def test_a_table_where_no_drafting_drafted_says_it_ranks_nothing(qapp):
    """Every drafting ran plain target steps (the twenty-third walk: four rows of plain AR's work, 60 % apart): the
    note says the table ranks none. The control: one drafting drafted, and the note does not."""
    from ui.compare.drafters_dialog import DraftersDialog

    steps = tuple(dataclasses.replace(accepted_round(i, [], "w"), gamma=0) for i in range(4))
    drafted = tuple(accepted_round(i, ["a"], "b") for i in range(2))
    request = ReplyRequest(({"role": "user", "content": "hi"},), DecodeSettings())
    idle = DrafterComparison(request, tuple(DrafterRun(d, steps) for d in Drafting))
    some = DrafterComparison(request, (DrafterRun(Drafting.MODEL, drafted),
                                       *(DrafterRun(d, steps) for d in Drafting if d is not Drafting.MODEL)))
    dialogs = [DraftersDialog(comparison, None) for comparison in (idle, some)]
    assert dialogs[0].note.text().startswith("On this prompt no drafting drafted anything")
    assert "no drafting drafted" not in dialogs[1].note.text()


def test_each_row_says_how_far_apart_its_runs_were(qapp):
    """Plain AR ran twice, once at half the speed: its row says 100 %; the draft model's two runs were alike (0 %)."""
    steps = tuple(dataclasses.replace(accepted_round(i, [], "w"), gamma=0) for i in range(4))
    slower = tuple(dataclasses.replace(step, round_s=2 * step.round_s) for step in steps)
    drafted = [DrafterRun(Drafting.MODEL, tuple(accepted_round(i, ["a"], "b") for i in range(2))) for _ in range(2)]
    runs = (DrafterRun.fastest(Drafting.MODEL, drafted),
            DrafterRun.fastest(Drafting.NONE, [DrafterRun(Drafting.NONE, slower), DrafterRun(Drafting.NONE, steps)]))
    table = drafters_table(DrafterComparison(ReplyRequest(({"role": "user", "content": "hi"},), DecodeSettings()), runs))
    assert table.horizontalHeaderItem(6).text() == "runs apart"
    assert [table.item(r, 6).text() for r in range(2)] == ["0%", "100%"]


def test_a_drafting_keeps_its_fastest_whole_run_and_the_others_speeds(qapp):
    """Of runs of the same work, the fastest whole one is the row (a stopped run only where none is whole), with how
    far the slowest fell behind; the control, a single run, has no spread."""
    steps = tuple(dataclasses.replace(accepted_round(i, [], "w"), gamma=0) for i in range(4))
    slower = tuple(dataclasses.replace(step, round_s=2 * step.round_s) for step in steps)
    fast, slow = DrafterRun(Drafting.NONE, steps), DrafterRun(Drafting.NONE, slower)
    stopped = DrafterRun(Drafting.NONE, tuple(dataclasses.replace(s, round_s=s.round_s / 4) for s in steps[:2]),
                         stopped=True)
    for attempts in ([slow, fast], [fast, slow], [slow, stopped, fast]):
        kept = DrafterRun.fastest(Drafting.NONE, attempts)
        assert kept.events == steps and kept.others_tokens_per_s == (slow.stats.tokens_per_s,)
        assert kept.spread == pytest.approx(1.0)
    assert DrafterRun.fastest(Drafting.NONE, [stopped, DrafterRun(Drafting.NONE, (), stopped=True)]) == stopped
    assert DrafterRun.fastest(Drafting.NONE, [slow]).spread == 0.0


def test_a_second_compare_drafters_of_the_same_prompt_says_how_far_it_moved_from_the_first(qapp):
    """The twenty-fourth walk: run twice, every row 12-28 % slower the second time, "up to 4 % apart" within it.
    The second run's note says how far the rows moved and that they rank alike; a swapped order says neither is
    sure. The control: a first run, or one of other settings, says nothing of another."""
    from ui.compare.drafters_dialog import DraftersDialog

    def run(drafting: Drafting, slower: float) -> DrafterRun:
        rounds = tuple(dataclasses.replace(accepted_round(i, ["a"], "b"), round_s=0.03 * slower) for i in range(4))
        return DrafterRun(drafting, rounds)

    request = ReplyRequest(({"role": "user", "content": "hi"},), DecodeSettings())
    first = DrafterComparison(request, (run(Drafting.LOOKUP, 1.0), run(Drafting.NONE, 1.4)))
    again = DrafterComparison(request, (run(Drafting.LOOKUP, 1.25), run(Drafting.NONE, 1.6)))
    swapped = DrafterComparison(request, (run(Drafting.LOOKUP, 1.6), run(Drafting.NONE, 1.4)))
    dialogs = [DraftersDialog(again, None, first), DraftersDialog(swapped, None, first), DraftersDialog(first, None)]
    alike, differently, alone = (dialog.note.text() for dialog in dialogs)
    assert "moved up to 20%" in alike and "rank alike" in alike
    assert "rank differently" in differently and "last Compare drafters" not in alone


def test_a_table_whose_plain_ar_ran_slower_undrawn_than_the_chat_s_drawn_plain_ar_reply_says_the_machine_slowed(qapp):
    """The twenty-seventh walk: a plain AR reply drawn at 95.9 tok/s, then Compare drafters' plain AR at 82.0
    undrawn. The note says the machine ran slower and what to read the rows by; the controls: a table whose plain
    AR ran about as fast, and a chat without a plain AR reply to that prompt, say nothing of it."""
    from ui.compare.drafters_dialog import DraftersDialog

    def run(drafting: Drafting, round_s: float) -> DrafterRun:
        return DrafterRun(drafting, tuple(dataclasses.replace(accepted_round(i, ["a"], "b"), round_s=round_s)
                                          for i in range(4)))

    request = ReplyRequest(({"role": "user", "content": "hi"},), DecodeSettings())
    table = DrafterComparison(request, (run(Drafting.LOOKUP, 0.02), run(Drafting.NONE, 0.025)))  # 80 tok/s
    dialogs = [DraftersDialog(table, None, None, 96.0), DraftersDialog(table, None, None, 82.0),
               DraftersDialog(table, None)]
    slower, alike, alone = (dialog.note.text() for dialog in dialogs)
    assert "Plain AR ran 80.0 tok/s here, undrawn, against 96.0 tok/s as this chat's reply" in slower
    assert "Plain AR ran" not in alike and "Plain AR ran" not in alone


def test_compare_drafters_is_shown_beside_the_chat_s_drawn_plain_ar_reply_to_the_same_prompt(make_studio,
                                                                                             mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, max_new_tokens=6)
    shown = []
    studio.chat.drafters_compared.connect(shown.append)
    studio.window.controls.mode.setCurrentIndex(studio.window.controls.mode.findData("ar"))
    plain = send(qtbot, studio, "w3 w4")
    with qtbot.waitSignal(studio.chat.drafters_compared, timeout=REPLY_TIMEOUT_MS):
        studio.window.menus.compare_drafters_action.trigger()
    assert shown[-1].drawn_ar_tokens_per_s == plain.stats.tokens_per_s > 0
    studio.window.controls.mode.setCurrentIndex(studio.window.controls.mode.findData("spec"))
    send(qtbot, studio, "w5 w6")  # the control: the last prompt has no plain AR reply
    with qtbot.waitSignal(studio.chat.drafters_compared, timeout=REPLY_TIMEOUT_MS):
        studio.window.menus.compare_drafters_action.trigger()
    assert shown[-1].drawn_ar_tokens_per_s == 0.0
