"""Find the best draft measuring for real (the tiny chain pair, its rounds slowed so that a reply is in flight): Stop
ends it within a second, and quitting the window during it within two."""
from __future__ import annotations

import time

import pytest
from PySide6.QtCore import Qt

from app.pair.library import PickRequest
from engine.benchmark import pick_draft as picking
from engine.benchmark.ranking import LOOKUP, NONE
from tests.app.test_cli import saved_chain_pair
from tests.engine.benchmark.test_pick_budget import cheap_drafts, slowed_rounds  # noqa: F401 (a fixture)
from tests.engine.models.test_library import machine  # noqa: F401 (a fixture)
from tests.ui.pair.test_model_library import models, studio  # noqa: F401 (fixtures: the wired window, its library)

SIGNAL_MS = 60_000
ROUND_S = 0.3  # a reply of 15 rounds then takes 4.5 s: waiting for its end would be late


@pytest.fixture
def picking_with_a_reply_in_flight(qtbot, studio, tmp_path, monkeypatch, cheap_drafts):  # noqa: F811
    """A real pick of the chain pair's draft, lookup and none, started from the window's library, once a reply of
    it is in flight."""
    in_reply = slowed_rounds(monkeypatch, ROUND_S, picking.MAX_NEW_TOKENS)
    target, draft = saved_chain_pair(tmp_path)
    with qtbot.waitSignal(studio.library.pick_started, timeout=SIGNAL_MS):
        studio.library.pick(PickRequest(target, (draft, LOOKUP, NONE), "code", "cpu", "auto", "auto"))
    qtbot.waitUntil(in_reply.is_set, timeout=SIGNAL_MS)
    return studio


def test_stop_ends_a_pick_with_a_reply_in_flight_within_a_second(qtbot, picking_with_a_reply_in_flight):
    studio = picking_with_a_reply_in_flight
    finder = studio.window.picker.finder
    started = time.monotonic()
    with qtbot.waitSignal(studio.library.pick_stopped, timeout=SIGNAL_MS):
        qtbot.mouseClick(finder, Qt.MouseButton.LeftButton)
    assert time.monotonic() - started < 1.0
    assert not studio.library.picking


def test_quitting_during_a_pick_ends_within_two_seconds(picking_with_a_reply_in_flight):
    studio = picking_with_a_reply_in_flight
    started = time.monotonic()
    studio.window.close()
    studio.shutdown()  # what the app runs as it quits (aboutToQuit): it joins every thread, the pick's too
    assert time.monotonic() - started < 2.0
    assert not any(thread.isRunning() for thread in studio.library.threads)
