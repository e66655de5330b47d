"""Compare drafters runs each drafting from what the conversation taught the live planner, and leaves it as it was."""
from __future__ import annotations

import app.worker as app_worker
from tests.ui.helpers import REPLY_TIMEOUT_MS, send


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
        studio.window.compare_drafters_action.trigger()
    assert started_with == [learnt[:2]] * 4  # each drafting, plain AR too
    assert (live.kept, live.reached, live.calibration) == learnt
