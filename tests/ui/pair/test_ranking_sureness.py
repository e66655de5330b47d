"""The ranking dialog of a pick within its budget: how sure each figure is, and a figure that is not fair shown
as the reason it is not ranked by, not as a speedup."""
from __future__ import annotations

from engine.benchmark import ranking as ranked
from engine.benchmark.ranking import NONE, Pick
from tests.engine.benchmark.test_pick_budget import issue_picks


def dialog_of(qtbot, picks, seconds=58.0):
    from ui.pair.draft_ranking import RankingDialog

    dialog = RankingDialog(ranked.Ranking("t.gguf", "code", "here", "2026-12-05", picks, seconds))
    qtbot.addWidget(dialog)
    return dialog


def test_a_row_that_is_not_fair_says_why_instead_of_its_figure(qtbot):
    picks = ranked.rank(ranked.judge(issue_picks(slowed_step_ms=215.5, tokens_per_round=1.0), plain_step_ms=123.3))
    rows = dialog_of(qtbot, picks).rows()
    assert rows[0][:2] == ["steady.gguf", "1.20x"] and rows[0][-1] == "from 6 replies, 1.10–1.30x"
    assert rows[-1][:2] == ["idle.gguf", ranked.SLOWED_NOTE]
    assert "1.50x" not in rows[-1]


def test_the_verdict_says_how_sure_the_best_is_and_when_the_time_ran_out_first(qtbot):
    clear = dialog_of(qtbot, [Pick("a.gguf", 1.4, replies=5, low=1.3, high=1.5),
                              Pick(NONE, 1.0, replies=5, low=1.0, high=1.0)])
    assert "a.gguf pays most: 1.40x plain AR's speed here (from 5 replies, 1.30–1.50x)." in clear.note.text()
    assert "time ran out" not in clear.note.text() and "in 58 s (loading the models included)" in clear.note.text()
    close = dialog_of(qtbot, [Pick("a.gguf", 1.4, replies=5, low=1.3, high=1.5),
                              Pick("b.gguf", 1.35, replies=5, low=1.25, high=1.45),
                              Pick(NONE, 1.0, replies=5, low=1.0, high=1.0)])
    assert "Not clearly ahead of the next yet: the time ran out first" in close.note.text()
