"""The why-γ tab's line on copies by their place in a run of copies: shown, with each place's count on demand and in
the export, where the chat's rounds copied; absent where they did not."""
from __future__ import annotations

import dataclasses

from app.chat.export import session_json
from app.why import copy_run_line, why_gamma
from engine.events import DecodeSettings
from tests.ui.helpers import shown_window
from tests.ui.synthetic import accepted_round, rejected_round
from words.records import Reply, ReplyRequest, Session

REQUEST = ReplyRequest(({"role": "user", "content": "hi"},), DecodeSettings(gamma=4))


def session_of(*events) -> Session:
    return Session(None, [Reply(REQUEST, tuple(events), "x", False)])


def copying_session() -> Session:
    """A model draft then two copies, all kept; three copies of which the second is rejected."""
    one = dataclasses.replace(accepted_round(0, ["a", "b", "c"], "d"), draft_kinds=("model", "copy", "copy"))
    two = dataclasses.replace(rejected_round(1, ["a"], "x", "y", gamma=3), draft_kinds=("copy",) * 3)
    return session_of(one, two)


def test_the_line_gives_the_share_kept_at_each_place_of_a_run():
    assert copy_run_line(why_gamma(copying_session())).endswith(": 1: 100% of 2 · 2: 50% of 2.")


def test_the_tab_shows_copies_by_place_where_the_chat_copied(qtbot):
    window = shown_window(qtbot, 1400, 900)
    window.on_why_changed(why_gamma(copying_session()))
    label = window.why_charts.copy_runs
    assert label.isVisibleTo(window.why_charts) and "1: 100% of 2 · 2: 50% of 2" in label.text()
    assert "place 2: 1 of 2 copies kept" in label.toolTip()


def test_the_tab_has_no_copies_line_where_no_draft_was_copied(qtbot):
    window = shown_window(qtbot, 1400, 900)
    window.on_why_changed(why_gamma(copying_session()))
    model_only = dataclasses.replace(accepted_round(0, ["a", "b"], "c"), draft_kinds=("model", "model"))
    window.on_why_changed(why_gamma(session_of(model_only)))
    assert not window.why_charts.copy_runs.isVisibleTo(window.why_charts)


def test_the_export_keeps_copies_by_place():
    runs = session_json(copying_session())["why_gamma"]["copy_run_acceptance"]
    assert runs == {"checked": [2, 2], "kept": [2, 1], "shares": [1.0, 0.5]}
