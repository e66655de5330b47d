"""A pair timed while the machine was busy: its last quiet timing here is planned and judged on instead, and the
controller says so."""
from __future__ import annotations

import dataclasses
import json
from datetime import datetime

from PySide6.QtCore import QSettings

from app.chat.controller import ChatController
from app.chat.timing import QuietTimings
from engine.events import ModelInfo, PairInfo
from words.records import Runtime

RUNTIME = Runtime(cpu_capability="AVX2", threads=2, target_kernel="Q4×Q8 native kernel (AVX2)",
                  draft_weights="int8")
NOW = datetime(2026, 12, 2, 10, 45)


def costs(step_ms: float) -> dict:
    return {"target_block_ms": [step_ms, step_ms * 1.1], "draft_step_ms": step_ms / 4, "copy_ms": 0.01,
            "overhead_ms": 0.5}


def pair(step_ms: float) -> PairInfo:
    return PairInfo(ModelInfo("t", "/t", 1, 64), ModelInfo("d", "/d", 1, 64), "cpu", "float32",
                    target_step_s=step_ms / 1e3, costs=costs(step_ms))


def timings(tmp_path) -> QuietTimings:
    return QuietTimings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))


def test_a_timing_far_slower_than_the_last_quiet_one_is_set_aside_for_it(tmp_path):
    key = QuietTimings.key(pair(6.0), RUNTIME)
    assert not timings(tmp_path).judge(key, costs(6.0), NOW).busy  # the first: nothing to compare with
    busy = timings(tmp_path).judge(key, costs(40.0), NOW)  # kept between sessions: a new settings object
    assert busy.busy and busy.costs == costs(6.0)
    assert "40.0 ms" in busy.note and "6.0 ms when timed here on 2026-12-02 10:45" in busy.note
    # the control: a timing within BUSY_FACTOR of the quiet one stands, and becomes the one to compare with
    assert not timings(tmp_path).judge(key, costs(10.0), NOW).busy
    assert timings(tmp_path).judge(key, costs(25.0), NOW).busy


def test_a_second_slow_timing_in_a_row_is_taken_as_the_machines_speed_now(tmp_path):
    key = QuietTimings.key(pair(6.0), RUNTIME)
    # each timing, and the one planned on: the quiet one where it was far slower, once
    for step_ms, planned_ms in ((6.0, 6.0), (40.0, 6.0), (40.0, 40.0), (45.0, 45.0), (100.0, 45.0)):
        judged = timings(tmp_path).judge(key, costs(step_ms), NOW)
        assert judged.costs == costs(planned_ms) and judged.busy is (planned_ms != step_ms)


def test_each_pair_and_runtime_is_timed_apart_and_nothing_is_kept_without_settings(tmp_path):
    kept = timings(tmp_path)
    kept.judge(QuietTimings.key(pair(6.0), RUNTIME), costs(6.0), NOW)
    more_threads = QuietTimings.key(pair(6.0), dataclasses.replace(RUNTIME, threads=8))
    bfloat16 = QuietTimings.key(dataclasses.replace(pair(6.0), dtype="bfloat16"), RUNTIME)
    for key in (more_threads, bfloat16):
        assert not kept.judge(key, costs(40.0), NOW).busy
    unkept = QuietTimings(None)
    for step_ms in (6.0, 40.0):
        assert not unkept.judge("any", costs(step_ms), NOW).busy


def test_the_controller_plans_on_the_quiet_timing_and_says_why(tmp_path):
    ChatController(quiet_timings=timings(tmp_path)).on_models_loaded(pair(6.0), RUNTIME)
    chat = ChatController(quiet_timings=timings(tmp_path))
    replaced, notices = [], []
    chat.costs_replaced.connect(replaced.append)
    chat.notice_posted.connect(notices.append)
    chat.on_models_loaded(pair(40.0), RUNTIME)
    assert replaced == [costs(6.0)] and chat.pair.costs == costs(6.0) and chat.pair.target_step_s == 0.006
    assert chat.timing.fastest == 0.006  # busy replies are judged against the quiet step
    assert notices and notices[-1] == chat.why.costs_note and "busy while the pair was timed" in notices[-1]
    chat.on_models_loaded(pair(7.0), RUNTIME)  # a quiet load after it: its own timing, and no note
    assert replaced == [costs(6.0)] and chat.pair.costs == costs(7.0) and chat.why.costs_note == ""


def test_a_quiet_timing_kept_by_another_version_without_a_cost_this_one_needs_is_not_planned_on(tmp_path):
    """Kept without `draft_step_ms` (another version's settings): a busy timing now stands, and is kept, where
    planning on the kept one failed with a KeyError when the cost model was rebuilt from it."""
    key = QuietTimings.key(pair(6.0), RUNTIME)
    older = {name: value for name, value in costs(6.0).items() if name != "draft_step_ms"}
    timings(tmp_path).settings.setValue(f"{QuietTimings.GROUP}/{key}", json.dumps({"costs": older, "at": "x"}))
    judged = timings(tmp_path).judge(key, costs(40.0), NOW)
    assert not judged.busy and judged.costs == costs(40.0)
    assert timings(tmp_path).judge(key, costs(6.0), NOW).costs == costs(6.0)  # the new timing was kept
