"""The remote worker against a local server playing an OpenAI-compatible engine, and the report it feeds."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QObject, QThread, Signal

from app.chat.remote_worker import RemoteWorker
from engine.events import DecodeSettings
from tests.fake_engine import FakeEngine, closed_port, serving
from ui.why.engine_report import FATES_NOTE, EngineReport

GREEDY = DecodeSettings(mode="ar", greedy=True, max_new_tokens=16)


@pytest.fixture
def worker_thread():
    thread = QThread()
    yield thread
    thread.quit()
    thread.wait(5000)


class Window(QObject):
    """Stands in for the window: its signal reaches the worker's slot on the worker's thread (queued)."""

    submitted = Signal(object, object)


def started(worker: RemoteWorker, thread: QThread) -> tuple[RemoteWorker, Window]:
    window = Window()
    worker.moveToThread(thread)
    window.submitted.connect(worker.on_prompt_submitted)
    thread.start()
    return worker, window


def test_worker_streams_a_reply_and_the_report_shows_the_engines_acceptance(qtbot, worker_thread):
    report = EngineReport()
    qtbot.addWidget(report)
    with serving(FakeEngine()) as url:
        worker, window = started(RemoteWorker(url), worker_thread)
        pieces = []
        worker.text_received.connect(pieces.append)
        worker.reply_finished.connect(report.on_reply_finished)
        with qtbot.waitSignal(worker.reply_finished, timeout=10000):
            window.submitted.emit([{"role": "user", "content": "hi"}], GREEDY)
        qtbot.waitUntil(lambda: "acceptance rate" in report.summary.text(), timeout=5000)  # its queued slot
    assert "".join(p.text for p in pieces) == "Hello there, friend!"
    assert "acceptance rate 0.50 (2 of 4 drafts)" in report.summary.text()
    assert "mean acceptance length 3.00" in report.summary.text()
    assert list(report.bars.opts["height"]) == [1.0, 1.0, 0.0, 0.0]
    assert list(report.bars.opts["x"]) == [1, 2, 3, 4]
    assert report.plot.getAxis("bottom")._tickLevels == [[(1, "1"), (2, "2"), (3, "3"), (4, "4")]]  # whole positions
    assert report.note.text() == FATES_NOTE


def test_worker_says_in_one_line_that_no_engine_answers(qtbot, worker_thread):
    worker, window = started(RemoteWorker(f"http://127.0.0.1:{closed_port()}/v1"), worker_thread)
    with qtbot.waitSignal(worker.failed, timeout=10000) as failure:
        window.submitted.emit([{"role": "user", "content": "hi"}], GREEDY)
    assert "connection refused" in failure.args[0] and "\n" not in failure.args[0]
