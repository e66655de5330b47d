"""The window with a running engine as its target (tests/fake_engine.py plays one on loopback): a URL in the model
panel, the reply as plain text, the Engine tab's figures, one-line failures, and Model ▸ Serve the embedded pair
on vLLM with a stand-in for the vLLM server."""
from __future__ import annotations

from PySide6.QtCore import Qt, QThread
from PySide6.QtWidgets import QApplication

from app.pair.serving_peer import ServingPeer
from engine.events import Fate
from engine.serving import TunedPair
from tests.fake_engine import FakeEngine, closed_port, serving
from tests.ui.helpers import REPLY_TIMEOUT_MS, send
from ui.why.engine_report import FATES_NOTE

MISSING = "vLLM is not installed in .venv-vllm: make serving-peer"


def connect_in_picker(qtbot, studio, url: str) -> None:
    """Type the URL as the target and press Connect, as a user would."""
    picker = studio.window.picker
    picker.target.clear()
    qtbot.keyClicks(picker.target, url)
    assert picker.load_button.text() == "Connect" and picker.draft.text() == ""
    with qtbot.waitSignal(studio.chat.remote_connected, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(picker.load_button, Qt.MouseButton.LeftButton)


def replied_remotely(qtbot, make_studio, mixed_decoder):
    """A studio that connected to a fake engine in the picker and got one reply from it; and the engine's URL."""
    studio = make_studio(mixed_decoder, greedy=True)
    with serving(FakeEngine()) as url:
        connect_in_picker(qtbot, studio, url)
        send(qtbot, studio, "hi")
    return studio, url


def test_a_url_target_streams_plain_text_and_the_engine_tab_shows_its_counts(qtbot, make_studio, mixed_decoder):
    studio, url = replied_remotely(qtbot, make_studio, mixed_decoder)
    window = studio.window
    item = window.chat.transcript.last_reply()
    spans = window.chat.spans[item.first:item.end]
    assert "".join(s.text for s in spans) == "Hello there, friend!"
    assert {s.fate for s in spans} == {Fate.UNKNOWN}  # no fate is made up
    report = window.engine_report
    assert window.chart_tabs.isTabVisible(window.engine_tab) and window.chart_tabs.currentWidget() is report
    # the fake's /metrics moved by one drafting step of 4 drafts, 2 accepted (positions 0 and 1)
    assert "acceptance rate 0.50 (2 of 4 drafts)" in report.summary.text()
    assert "mean acceptance length 3.00" in report.summary.text()
    assert list(report.bars.opts["height"]) == [1.0, 1.0, 0.0, 0.0]
    assert "fake-model at " + url in item.header


def test_the_legend_and_inspector_say_fates_are_not_known(qtbot, make_studio, mixed_decoder):
    studio, _ = replied_remotely(qtbot, make_studio, mixed_decoder)
    window = studio.window
    assert window.legend.remote_note.isVisibleTo(window) and not window.legend.chips[Fate.ACCEPTED].isVisibleTo(window)
    assert not window.legend.trace_action.isEnabled()
    window.analysis.on_token_clicked(window.chat.transcript.last_reply().first)
    assert window.inspector.label.text() == FATES_NOTE and not window.inspector.pinned


def test_an_engine_that_is_down_is_one_status_line_and_the_local_pair_replies(qtbot, make_studio, mixed_decoder):
    studio = make_studio(mixed_decoder, greedy=True)
    window = studio.window
    picker = window.picker
    picker.target.setText(f"http://127.0.0.1:{closed_port()}/v1")
    with qtbot.waitSignal(studio.chat.remote_failed, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(picker.load_button, Qt.MouseButton.LeftButton)
    QApplication.processEvents()
    message = window.statusBar().currentMessage()
    assert "connection refused" in message and "still using the local pair" in message and "\n" not in message
    assert window.error_box is None  # a line, not a dialog
    assert picker.load_button.text() == "Load pair"  # the picker shows the pair that still answers
    reply = send(qtbot, studio)
    assert reply.remote is None and reply.events


def test_back_to_the_local_pair_from_the_model_menu(qtbot, make_studio, mixed_decoder):
    studio, _ = replied_remotely(qtbot, make_studio, mixed_decoder)
    window = studio.window
    assert window.menus.local_action.isEnabled()
    with qtbot.waitSignal(window.models_shown, timeout=REPLY_TIMEOUT_MS):
        window.menus.local_action.trigger()
    assert not window.chart_tabs.isTabVisible(window.engine_tab) and window.controls.gamma.isEnabled()
    reply = send(qtbot, studio)
    assert reply.remote is None and reply.events and reply.request.messages[1]["content"] == "Hello there, friend!"


def test_serving_on_vllm_is_disabled_with_the_make_target_when_it_is_missing(qtbot, make_studio, mixed_decoder):
    studio = make_studio(mixed_decoder, build_options={"serving_peer": ServingPeer(), "vllm_missing": MISSING})
    action = studio.window.menus.serve_action
    assert not action.isEnabled() and "make serving-peer" in action.toolTip()
    assert action.text().endswith("(vLLM not installed)")  # said where a disabled item shows no tooltip


class StandInServer:
    """Plays engine.benchmark.vllm_peer.VllmServer: `start` serves a FakeEngine on loopback, `stop` ends it."""

    made: list[StandInServer] = []

    def __init__(self, model_dir: str, speculative: dict | None):
        self.model_dir, self.speculative = model_dir, speculative
        self.stopped = False
        self._serving = serving(FakeEngine(served="target"))
        StandInServer.made.append(self)

    def start(self) -> StandInServer:
        self.base_url = self._serving.__enter__()
        return self

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self._serving.__exit__(None, None, None)


def test_serve_the_embedded_pair_on_vllm_then_chat_with_it_and_stop_it(qtbot, make_studio, mixed_decoder):
    StandInServer.made.clear()
    peer = ServingPeer(make_server=StandInServer,
                       pair_for=lambda drafting, gamma: TunedPair("/served/target", "/served/draft", drafting, gamma))
    studio = make_studio(mixed_decoder, greedy=True, gamma=5, build_options={"serving_peer": peer,
                                                                             "vllm_missing": None})
    window = studio.window
    assert window.menus.serve_action.isEnabled()
    finished_on = []  # the window hears of the ready server on its own thread, never the peer's
    shown = window.on_serving_finished
    window.on_serving_finished = lambda url="": (finished_on.append(QThread.currentThread()), shown(url))
    with qtbot.waitSignal(studio.chat.remote_connected, timeout=REPLY_TIMEOUT_MS) as connected:
        window.menus.serve_action.trigger()
    assert finished_on == [QApplication.instance().thread()]
    server = StandInServer.made[-1]
    assert server.model_dir == "/served/target"
    assert server.speculative == {"method": "draft_model", "model": "/served/draft", "num_speculative_tokens": 5}
    assert connected.args[0].model == "target" and connected.args[0].url == server.base_url
    assert send(qtbot, studio, "hi").remote.url == server.base_url
    with qtbot.waitSignal(window.models_shown, timeout=REPLY_TIMEOUT_MS):
        window.menus.local_action.trigger()
    qtbot.waitUntil(lambda: server.stopped, timeout=REPLY_TIMEOUT_MS)


def test_closing_the_studio_stops_the_server_it_started(qtbot, make_studio, mixed_decoder):
    StandInServer.made.clear()
    peer = ServingPeer(make_server=StandInServer,
                       pair_for=lambda drafting, gamma: TunedPair("/t", "/d", drafting, gamma))
    studio = make_studio(mixed_decoder, build_options={"serving_peer": peer, "vllm_missing": None})
    with qtbot.waitSignal(studio.chat.remote_connected, timeout=REPLY_TIMEOUT_MS):
        studio.window.menus.serve_action.trigger()
    studio.shutdown()
    assert StandInServer.made[-1].stopped
