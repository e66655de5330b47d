"""`specdec-studio`: create the window, the decoding worker and the remote-engine worker (each on its thread),
connect them, run the app.

With --prompt it drives itself: load the pair, send the prompt, and after the reply save a screenshot and exit.
"""
from __future__ import annotations

import argparse
import gc
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import (QCoreApplication, QEvent, QObject, QSettings, QStandardPaths, Qt, QThread, QTimer, Signal,
                            Slot)
from PySide6.QtWidgets import QApplication, QSplashScreen, QWidget
from transformers.utils import logging as transformers_logging

from app.chat.controller import ChatController
from app.chat.remote_worker import RemoteWorker
from app.chat.store import ChatStore, ChatStoreError
from app.chat.timing import QuietTimings
from app.chat.worker import DecodeWorker
from app.cli.arguments import (DEVICE_HELP, DTYPE_HELP, STOP_BELOW_HELP, TARGET_WEIGHTS_HELP, HelpFormatter,
                               finite_float, length_rule, seed_below, setting, whole_number)
from app.pair import machine
from app.pair.library import ModelLibrary, PickRequest
from app.pair.serving_peer import ServingPeer, tuned_choice
from engine.benchmark.vllm_peer import SERVED_NAME, missing_reason
from engine.choices import DEVICES, DTYPES, TARGET_WEIGHTS
from engine.decoding.decoder import Decoder
from engine.events import DecodeSettings
from engine.models.pairing import PRESETS
from engine.remote import API_KEY_ENV, DEFAULT_TIMEOUT_S
from engine.remote_records import is_url, public_url
from ui.window.main_window import MainWindow
from ui.window.preferences import apply_pair, apply_settings
from words.records import SEED_LIMIT

# The window's defaults: sampling at T = 0.7, where the embedded pair writes real words and the README measures,
# and the repetition stop (the engine's DecodeSettings keeps T = 1.0 and no stop, the plain definitions, for the
# CLI and the tests).
APP_DEFAULTS = DecodeSettings(temperature=0.7, stop_repeating=True)
QUIT_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # Ctrl+C, and `kill` or a session's end: both quit as the window does
# A window never painted (mapped on another workspace, or minimised) starts loading after this all the same
FIRST_PAINT_WAIT_MS = 2000


@dataclass
class Studio:
    window: MainWindow
    chat: ChatController
    worker: DecodeWorker
    thread: QThread
    remote_worker: RemoteWorker
    remote_thread: QThread
    peer: ServingPeer  # a vLLM server started from the Model menu
    peer_thread: QThread
    library: ModelLibrary  # the models on this machine, and Find the best draft
    _threads: tuple = field(init=False, default=())

    def __post_init__(self) -> None:
        self._threads = (self.thread, self.remote_thread, self.peer_thread)

    def start(self) -> None:
        for thread in self._threads:
            thread.start()
        self.library.start()

    def shutdown(self) -> None:
        """Stop any reply, draft pick or timing at load, let the workers' current round, timing step or streamed
        piece finish, stop a vLLM server started here, and join the threads. What the workers sent on their way out
        (the stopped reply) is then delivered, so the window shows and saves it as a stopped reply before the app's
        event loop is gone."""
        self.library.stop_pick()  # first: a pick ends within a round, while the others below are waited for
        self.worker.request_quit()
        self.remote_worker.request_stop()
        self.peer.request_stop(wait=True)
        self.library.shutdown()
        for thread in self._threads:
            thread.quit()
            thread.wait()
        QCoreApplication.sendPostedEvents()


def build(decoder: Decoder | None = None, target: str = "embedded", draft: str | None = "embedded-draft",
          device: str = "auto", dtype: str = "auto", defaults: DecodeSettings = DecodeSettings(),
          store: ChatStore | None = None, preferences: QSettings | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
          serving_peer: ServingPeer | None = None, vllm_missing: str | None = None) -> Studio:
    """The window, the chat controller and the workers on their own (not yet started) threads, wired together;
    an injected decoder skips loading: the worker announces it with `models_loaded` as soon as the thread starts.
    `store` and `preferences` are where chats and settings are kept (in memory / not at all when None);
    `timeout_s` is how long a remote engine may stay silent; `serving_peer` and `vllm_missing` replace the vLLM
    server of the Model menu and why it cannot run (tests inject both; by default .venv-vllm decides)."""
    available = machine.devices()
    if serving_peer is None:
        serving_peer, vllm_missing = ServingPeer(), missing_reason()
    window = MainWindow(PRESETS, target, draft, device, dtype, defaults, preferences, devices=available,
                        dtypes=machine.dtypes(available), offline=machine.offline_presets(PRESETS),
                        vllm_missing=vllm_missing)
    chat = ChatController(store, QuietTimings(preferences))
    chat.chart_image = window.analysis.chart_image  # the export's image
    worker = DecodeWorker(decoder)
    thread = QThread()
    thread.setObjectName("decode-worker")
    worker.moveToThread(thread)
    direct = Qt.ConnectionType.DirectConnection  # stop and γ must reach a worker busy in its round loop

    # the window's commands
    window.load_requested.connect(chat.load_pair)
    window.send_requested.connect(chat.send)
    window.stop_requested.connect(chat.stop)
    window.regenerate_requested.connect(chat.regenerate)
    chat.seed_advanced.connect(window.on_seed_advanced)
    window.continue_requested.connect(chat.continue_reply)
    window.edit_requested.connect(chat.edit)
    window.gamma_requested.connect(chat.set_gamma)
    window.new_chat_requested.connect(chat.new_chat)
    window.export_requested.connect(chat.export_to)
    window.compare_drafters_requested.connect(chat.compare_drafters)
    window.history.chat_chosen.connect(chat.open_chat)
    window.history.set_library(chat)
    # what the controller reports, for the window to draw: straight to the one pane that draws it where one does
    chat.status_changed.connect(window.on_status_changed)
    chat.load_started.connect(window.status_bar.on_load_started)
    chat.timing_started.connect(window.status_bar.on_timing_started)
    chat.timing_progressed.connect(window.status_bar.on_timing_progressed)
    chat.pair_loaded.connect(window.on_pair_loaded)
    chat.load_failed.connect(window.on_load_failed)
    chat.conversation_cleared.connect(window.on_conversation_cleared)
    chat.turn_started.connect(window.on_turn_started)
    chat.gammas_changed.connect(window.on_gammas_changed)
    chat.round_received.connect(window.on_round_received)
    chat.reply_finished.connect(window.on_reply_finished)
    chat.comparison_progressed.connect(window.status_bar.on_comparison_progressed)
    chat.comparison_reading.connect(window.status_bar.on_comparison_reading)
    chat.comparison_finished.connect(window.on_comparison_finished)
    chat.context_fitted.connect(window.chat_pane.on_context_fitted)
    chat.why_changed.connect(window.on_why_changed)
    chat.drafters_progressed.connect(window.status_bar.on_drafters_progressed)
    chat.drafters_compared.connect(window.on_drafters_compared)
    chat.prefill_progressed.connect(window.on_prefill_progressed)
    chat.turn_completed.connect(window.status_bar.on_turn_completed)
    chat.turn_completed.connect(window.turn_completed)  # after the status bar has cleared its progress
    chat.edit_started.connect(window.chat_pane.on_edit_started)
    chat.edit_cancelled.connect(window.chat_pane.on_edit_cancelled)
    chat.system_prompt_restored.connect(window.chat_pane.on_system_prompt_restored)
    chat.settings_restored.connect(window.on_settings_restored)
    chat.chats_changed.connect(window.history.refresh)
    chat.notice_posted.connect(window.status_bar.on_notice_posted)
    chat.failed.connect(window.on_failed)
    chat.store_failed.connect(window.on_store_failed)
    chat.exported.connect(window.on_exported)
    chat.export_failed.connect(window.on_export_failed)
    # the controller and the worker
    thread.started.connect(worker.on_thread_started)
    chat.load_requested.connect(worker.on_load_requested)
    chat.prompt_requested.connect(worker.on_prompt_submitted)
    chat.reset_requested.connect(worker.on_new_chat_requested)
    chat.drafters_requested.connect(worker.on_drafters_requested)
    chat.reply_drawn.connect(worker.reply_drawn, direct)  # the worker waits for it in its slot
    chat.costs_replaced.connect(worker.on_costs_replaced)
    chat.stop_requested.connect(worker.request_stop, direct)
    chat.gamma_requested.connect(worker.request_gamma, direct)
    worker.models_loaded.connect(chat.on_models_loaded)
    worker.context_fitted.connect(chat.on_context_fitted)
    worker.prefill_progressed.connect(chat.on_prefill_progressed)
    worker.round_finished.connect(chat.on_round_finished)
    worker.reply_finished.connect(chat.on_reply_finished)
    worker.comparison_finished.connect(chat.on_comparison_finished)
    worker.comparison_progressed.connect(chat.on_comparison_progressed)
    worker.comparison_reading.connect(chat.on_comparison_reading)
    worker.costs_measured.connect(chat.on_costs_measured)
    worker.timing_started.connect(chat.timing_started)
    worker.timing_progressed.connect(chat.timing_progressed)
    worker.drafters_progressed.connect(chat.on_drafters_progressed)
    worker.drafters_compared.connect(chat.on_drafters_compared)
    worker.failed.connect(chat.on_failed)
    remote_worker, remote_thread = _wire_remote(window, chat, timeout_s)
    peer_thread = _wire_serving(window, chat, serving_peer)
    library = _wire_library(window, preferences)
    return Studio(window, chat, worker, thread, remote_worker, remote_thread, serving_peer, peer_thread, library)


def _wire_library(window: MainWindow, preferences: QSettings | None) -> ModelLibrary:
    """The Model pair pane's lists of the models on this machine, File ▸ Open model…, and Find the best draft
    (the pick's progress in the status bar, its ranking in a dialog and beside the drafts)."""
    library = ModelLibrary(preferences, window)
    picker, pane, bar = window.picker, window.pair_pane, window.statusBar()
    picker.refresh_requested.connect(library.refresh)
    picker.folder_added.connect(library.add_folder)
    picker.open_requested.connect(library.open_model)
    picker.notice_posted.connect(window.status_bar.on_notice_posted)
    picker.summaries_wanted.connect(library.read_summaries)
    picker.pick_requested.connect(lambda *request: library.pick(PickRequest(request[0], tuple(request[1]),
                                                                            *request[2:])))
    picker.finder.stop_requested.connect(library.stop_pick)
    library.library_changed.connect(picker.show_library)
    library.model_opened.connect(picker.on_model_opened)
    library.summaries_changed.connect(picker.show_summaries)
    library.notice_posted.connect(window.status_bar.on_notice_posted)
    library.pick_started.connect(picker.on_pick_started)
    library.pick_started.connect(lambda: window.chat_pane.set_pick_running(True))
    for ended in (library.pick_finished, library.pick_stopped, library.pick_failed):
        ended.connect(lambda *_: window.chat_pane.set_pick_running(False))
    library.pick_started.connect(
        lambda: bar.showMessage("Find the best draft: loading a copy of the target to measure with…"))
    library.pick_progressed.connect(picker.on_pick_progressed)
    library.pick_progressed.connect(
        lambda done, total, what: bar.showMessage(f"Measuring the drafts: {done}/{total} replies ({what})"))
    library.pick_finished.connect(pane.on_pick_finished)
    library.pick_finished.connect(lambda _ranking: bar.showMessage("Find the best draft: ranked and kept", 8000))
    library.pick_stopped.connect(picker.on_pick_ended)
    library.pick_stopped.connect(lambda: bar.showMessage("Find the best draft stopped; nothing was kept", 8000))
    library.pick_failed.connect(picker.on_pick_ended)
    library.pick_failed.connect(lambda message: bar.showMessage(f"Find the best draft failed: {message}", 20000))
    return library


def _wire_remote(window: MainWindow, chat: ChatController, timeout_s: float) -> tuple[RemoteWorker, QThread]:
    remote, thread = wire_remote_worker(chat, timeout_s)
    window.local_requested.connect(chat.use_local)
    chat.remote_connected.connect(window.on_remote_connected)
    chat.remote_left.connect(window.on_remote_left)
    chat.remote_failed.connect(window.on_remote_failed)
    chat.remote_text_received.connect(window.on_remote_text_received)
    return remote, thread


def wire_remote_worker(chat: ChatController, timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[RemoteWorker, QThread]:
    """A running engine as the target: its worker on its own (not yet started) thread, beside the local one, and
    connected to the controller."""
    remote = RemoteWorker(timeout_s=timeout_s)
    thread = QThread()
    thread.setObjectName("remote-worker")
    remote.moveToThread(thread)
    chat.remote_connect_requested.connect(remote.on_target_requested)
    chat.remote_prompt_requested.connect(remote.on_prompt_submitted)
    chat.remote_stop_requested.connect(remote.request_stop, Qt.ConnectionType.DirectConnection)
    remote.connected.connect(chat.on_remote_connected)
    remote.text_received.connect(chat.on_remote_text_received)
    remote.reply_finished.connect(chat.on_remote_reply_finished)
    remote.stopped.connect(chat.on_remote_stopped)
    remote.failed.connect(chat.on_remote_failed)
    return remote, thread


class _ServingLink(QObject):
    """The GUI thread's side of the serving peer: its slots run on the GUI thread (a plain function connected to
    the peer's signals would run on the peer's thread and touch widgets from there)."""

    start = Signal(str, int)  # drafting, γ

    def __init__(self, window: MainWindow, chat: ChatController, peer: ServingPeer):
        super().__init__(window)
        self.window, self.chat, self.peer = window, chat, peer

    @Slot()
    def on_serve_requested(self) -> None:
        drafting, gamma = tuned_choice(self.chat.why, self.window.controls.settings().gamma)
        self.window.on_serving_requested()
        self.start.emit(drafting.value, gamma)

    @Slot(str)
    def on_started(self, url: str) -> None:
        self.window.on_serving_finished(url)
        self.chat.connect_remote(url, SERVED_NAME)

    @Slot(str)
    def on_failed(self, message: str) -> None:
        self.window.on_serving_failed(message)

    @Slot(object)
    def on_connected(self, target) -> None:
        if self.peer.url is not None and public_url(self.peer.url) != target.url:
            self.peer.request_stop()

    @Slot(object)
    def on_remote_left(self, _request) -> None:
        self.peer.request_stop()


def _wire_serving(window: MainWindow, chat: ChatController, peer: ServingPeer) -> QThread:
    """Model ▸ Serve the embedded pair on vLLM: the server starts on its own thread; once it answers the chat
    connects to it, and it stops when the chat leaves it for the local pair or another engine."""
    thread = QThread()
    thread.setObjectName("serving-peer")
    peer.moveToThread(thread)
    link = _ServingLink(window, chat, peer)
    link.start.connect(peer.on_start_requested)
    window.serve_requested.connect(link.on_serve_requested)
    peer.started.connect(link.on_started)
    peer.failed.connect(link.on_failed)
    chat.remote_connected.connect(link.on_connected)
    chat.remote_left.connect(link.on_remote_left)
    return thread


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    defaults = APP_DEFAULTS
    parser = argparse.ArgumentParser(prog="specdec-studio", description="A chat app that shows speculative decoding",
                                     formatter_class=HelpFormatter)
    parser.add_argument("--target", metavar="M", default=None,
                        help="hub id, local directory, .gguf file or 'embedded'; or a running OpenAI-compatible "
                             "engine's URL (http://127.0.0.1:8000/v1: vLLM, SGLang, llama-server) (default: "
                             "qwen2.5-coder-1.5b where `make run` installed it, else embedded)")
    parser.add_argument("--draft", metavar="M", default=None,
                        help="as --target; 'none' for plain AR only (default: the default target's draft, else "
                             "embedded-draft)")
    parser.add_argument("--model-name", metavar="NAME", default=None,
                        help=f"with a --target URL: the served model to chat with (default: the only one served); "
                             f"an API key, if the engine needs one, is read from ${API_KEY_ENV}")
    parser.add_argument("--timeout", metavar="S", type=setting_positive, default=DEFAULT_TIMEOUT_S,
                        help="with a --target URL: seconds the engine may stay silent before the reply fails")
    parser.add_argument("--device", default="auto", choices=DEVICES, help=DEVICE_HELP)
    parser.add_argument("--dtype", default="auto", choices=DTYPES, help=DTYPE_HELP)
    parser.add_argument("--target-weights", default="auto", choices=TARGET_WEIGHTS,
                        help=TARGET_WEIGHTS_HELP)
    parser.add_argument("--gamma", metavar="N", type=setting("gamma", whole_number), default=defaults.gamma,
                        help="most drafts per round (γ), 1 to 64")
    parser.add_argument("--stop-below", metavar="S", type=setting("stop_below", finite_float), default=None,
                        help=STOP_BELOW_HELP)
    parser.add_argument("--max-new-tokens", metavar="N", type=setting("max_new_tokens", whole_number),
                        default=defaults.max_new_tokens, help="most tokens in a reply")
    parser.add_argument("--seed", metavar="S", type=seed_below(SEED_LIMIT), default=defaults.seed,
                        help="seed for sampling")
    parser.add_argument("--sampling", action="store_true", help="sample instead of greedy decoding")
    parser.add_argument("--temperature", metavar="T", type=setting("temperature", finite_float),
                        default=defaults.temperature, help="sampling temperature")
    parser.add_argument("--compare-ar", action="store_true", help="also decode with plain AR and measure the speedup")
    parser.add_argument("--prompt", help="send this message once the models are loaded")
    parser.add_argument("--quit-after-reply", action="store_true", help="exit 0 after the reply to --prompt")
    parser.add_argument("--screenshot", metavar="PNG", type=Path,
                        help="after the reply, save a PNG of the whole window here")
    parser.add_argument("--data-dir", metavar="DIR", type=Path, help="where chats (chats.sqlite3) and settings "
                        "(settings.ini) are kept (default: the user's data directory for SpecDec Studio)")
    return parser.parse_args(argv)


def setting_positive(text: str) -> float:
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return value


def open_data_dir(data_dir: Path | None) -> tuple[ChatStore, QSettings, str | None]:
    """The chats database and the settings file in the data directory (Qt's AppDataLocation unless given), and
    the store's one-line notice if it was opened read-only or started afresh. A database that cannot be used
    leaves chats in memory for this session, with a message saying so."""
    if data_dir is None:
        data_dir = Path(QStandardPaths.writableLocation(QStandardPaths.StandardLocation.AppDataLocation))
    preferences = QSettings(str(data_dir / "settings.ini"), QSettings.Format.IniFormat)
    try:
        store = ChatStore(data_dir / "chats.sqlite3")
    except (ChatStoreError, OSError) as exc:
        return ChatStore(":memory:"), preferences, f"Chats will not be saved in this session: {exc}"
    return store, preferences, store.notice


def quit_on_interrupt(window) -> QTimer:
    """Ctrl+C in the terminal (or SIGTERM) is Stop then Quit: it closes the window, as its close button would (a
    reply in flight is stopped and saved as stopped, the settings and layout are kept), and the timer's
    `interrupted` property holds the signal's exit status. Python runs signal handlers only when the main
    thread runs Python code, and Qt's event loop is C++: the timer gives it that chance five times a second."""
    timer = QTimer(window)
    timer.setProperty("interrupted", 0)

    def on_interrupt(number, _frame) -> None:
        timer.setProperty("interrupted", 128 + number)
        window.close()

    for number in QUIT_SIGNALS:
        signal.signal(number, on_interrupt)
    timer.timeout.connect(lambda: None)
    timer.start(200)
    return timer


class GuiThreadCollector(QObject):
    """Python's garbage collection, on the GUI thread only. Automatic collection runs in whichever thread happens to
    allocate, often the decoding worker's; a window's widget caught in a reference cycle (a closed dialog, its
    menus) would then be destroyed there, and Qt's destructor waiting for Python's lock there deadlocked the app
    (seen in the tests: the worker in attention, the GUI thread in a collection). While it runs, automatic
    collection is off and this timer collects as Python's own thresholds say, a few times a second.
    A loaded pair leaves ~420,000 objects (the models, torch's and transformers' own), and a full collection that
    walks them all holds Python's lock for 260-280 ms, a stall in a streaming reply's decoding and drawing: once a
    pair is loaded they are frozen out of the generations collected, and thawed before another pair replaces them
    so that the old pair's cycles can still be freed."""

    INTERVAL_MS = 250

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        gc.disable()
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.collect_due)
        self.timer.start(self.INTERVAL_MS)

    def collect_due(self) -> None:
        """The oldest generation whose count has passed its threshold, as the automatic collector would pick."""
        due = [generation for generation, (count, threshold) in enumerate(zip(gc.get_count(), gc.get_threshold()))
               if count > threshold]
        if due:
            gc.collect(due[-1])

    def freeze_survivors(self, *_loaded) -> None:
        gc.collect()
        gc.freeze()

    def thaw(self, *_requested) -> None:
        gc.unfreeze()

    def stop(self) -> None:
        self.timer.stop()
        gc.enable()


class AfterFirstPaint(QObject):
    """Runs `action` once `window` has painted for the first time. Loading the models holds Python's lock for long
    stretches on the worker's thread, and the window's Python side (its event handlers, its slots) waits for that
    lock at every turn: a window shown as the load began could stay unpainted (black) for most of the load."""

    def __init__(self, window: QWidget, action: Callable[[], None]):
        super().__init__(window)
        self.window, self.action = window, action
        window.installEventFilter(self)
        QTimer.singleShot(FIRST_PAINT_WAIT_MS, self.run)

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
        if watched is self.window and event.type() == QEvent.Type.Paint:
            QTimer.singleShot(0, self.run)  # after this paint, which draws the whole window, reaches the screen
        return False

    def run(self) -> None:
        if self.action is not None:
            action, self.action = self.action, None
            self.window.removeEventFilter(self)
            action()


class Automation(QObject):
    """The --prompt hook: send once loaded, then screenshot and quit when the turn is complete."""

    def __init__(self, studio: Studio, args: argparse.Namespace):
        super().__init__(studio.window)
        self.window, self.args = studio.window, args
        self.exit_code = 0
        studio.worker.models_loaded.connect(self.on_models_loaded, Qt.ConnectionType.QueuedConnection)
        studio.worker.failed.connect(self.on_failed)
        studio.chat.remote_connected.connect(self.on_models_loaded, Qt.ConnectionType.QueuedConnection)
        studio.chat.remote_failed.connect(self.on_failed)
        self.window.turn_completed.connect(self.on_turn_completed)

    def on_models_loaded(self, _info) -> None:
        self.window.message_box.setPlainText(self.args.prompt)
        self.window.message_box.submit()

    def on_turn_completed(self) -> None:
        if self.args.screenshot:
            self.window.charts.refresh()
            self.args.screenshot.parent.mkdir(parents=True, exist_ok=True)
            if not self.window.grab().save(str(self.args.screenshot)):
                print(f"specdec-studio: could not write {self.args.screenshot}", file=sys.stderr)
                self.exit_code = 1
        if self.args.quit_after_reply:
            QTimer.singleShot(0, self.window.close)

    def on_failed(self, message: str) -> None:
        print(f"specdec-studio: {message}", file=sys.stderr)
        if self.args.quit_after_reply:
            self.exit_code = 1
            QTimer.singleShot(0, self.window.close)


def main(argv: list[str] | None = None, splash: QSplashScreen | None = None) -> int:
    """`splash`: studio.launch's, shown while the app imported; it closes once the window is on screen."""
    args = parse_args(argv)
    # The window shows its own progress while models load; tqdm bars in the terminal behind it are noise.
    transformers_logging.disable_progress_bar()
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("SpecDec Studio")
    default_target, default_draft = machine.default_pair()
    target = args.target or default_target
    draft = args.draft or (default_draft if args.target is None else "embedded-draft")
    draft = None if draft.lower() == "none" else draft
    settings = DecodeSettings(gamma=args.gamma, max_new_tokens=args.max_new_tokens, seed=args.seed,
                              greedy=not args.sampling, temperature=args.temperature,
                              stop_repeating=APP_DEFAULTS.stop_repeating, **length_rule(args.stop_below))
    store, preferences, problem = open_data_dir(args.data_dir)
    if is_url(target):  # the draft's place names the served model
        draft = args.model_name
    studio = build(target=target, draft=draft, device=args.device, dtype=args.dtype, defaults=settings,
                   store=store, preferences=preferences, timeout_s=args.timeout)
    # The window came up as it was left; options given on the command line still win.
    if settings != APP_DEFAULTS:
        apply_settings(studio.window.controls, settings)
    if args.compare_ar:
        studio.window.controls.compare_ar.setChecked(True)
    pair = (target, draft, args.device, args.dtype, args.target_weights)
    if pair != (default_target, default_draft, "auto", "auto", "auto"):
        apply_pair(studio.window.picker, *pair)
    if problem:
        studio.window.on_failed(problem)
    automation = Automation(studio, args) if args.prompt else None
    collector = GuiThreadCollector(app)
    app.aboutToQuit.connect(collector.stop)
    studio.chat.load_requested.connect(collector.thaw)
    studio.worker.models_loaded.connect(collector.freeze_survivors)
    app.aboutToQuit.connect(studio.shutdown)
    interrupt = quit_on_interrupt(studio.window)
    studio.start()
    # A pair will load once the window has painted: its first paint says so already, as the load, which holds
    # Python's lock for long stretches, can hold back the status bar's later updates by seconds.
    studio.window.status_bar.open_progress()
    studio.window.show()
    if splash is not None:
        splash.finish(studio.window)
    AfterFirstPaint(studio.window, studio.window.picker.request_load)
    code = app.exec()
    if interrupt.property("interrupted"):
        return interrupt.property("interrupted")
    return automation.exit_code if automation and code == 0 else code


if __name__ == "__main__":
    sys.exit(main())
