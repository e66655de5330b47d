"""The window's status bar: the pair's name, the last reply's figures, and the progress of what takes a while (a
pair loading and its costs being timed, vLLM starting, a long prompt read in, Compare with AR's runs)."""
from __future__ import annotations

import math

from PySide6.QtCore import QElapsedTimer, QEvent, QTimer
from PySide6.QtGui import QFontMetricsF
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QWidget

from engine.events import PairInfo, PrefillProgress
from engine.remote_records import is_url
from ui.window.status_bar import PartsLabel, StatusBar
from words.records import Comparison, EngineTarget, Reply
from words.wording import (SEPARATOR, measured_figures, model_said, pair_said, read_in_said, remote_line,
                           stats_figures)

STATUS_RIGHT_MARGIN = 8  # between the status bar's last widget and the window's right edge
# The most of the status bar's width that the pair's models' names keep whole beside the last reply's figures (long
# hub ids are elided, whole in the tooltip)
PAIR_NAMES_SHARE = 1 / 3
UNLIMITED_WIDTH = 16777215  # Qt's QWIDGETSIZE_MAX, which PySide6 does not export
# Compare with AR's progress bar: its runs' tokens, or a run reading a long prompt in again (read_in_said)
COMPARISON_DECODING = "Compare with AR, undrawn: %v of ~%m tokens"
COMPARISON_READING = "Compare with AR reading: {}"
# The reply's own read-in, said in full after its header where the eye is: the bar's shorter form leaves a notice
# beside it (INT4_NOTE) whole at 1000×700
READING = "reading: {}"
# read_in_said's widest: a prompt's positions run to five digits, its time left to minutes
WIDEST_READ_IN = "00,000 of 00,000 tokens, about 00 min left"
LAST_REPLY = "last reply: "  # the status bar's summary of the last reply begins so
SERVING_READY_S = 100  # about how long vLLM takes to answer here (engine.benchmark.vllm_peer.READY_TIMEOUT_S bounds it)
# A few seconds on a quiet machine; many times that beside another busy program, which the timing must not mistake
# for this machine's speed (every cost is the fastest of several timings).
TIMING_TEXT = "Timing this machine's speed{} (a few seconds; longer while other programs are busy)…"


class WindowStatusBar(StatusBar):
    """The pair's name and the last reply's figures on the left; on the right, the bars of whatever is in
    progress."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._loading_text = "Loading models…"  # what the pair's label says while a pair loads
        self._pair_parts = [("no model loaded", 0)]  # the pair's name, shown again when a load ends or fails
        self.serving_clock = QElapsedTimer()
        self.serving_timer = QTimer(self)  # the status line's seconds while vLLM starts
        self.serving_timer.setInterval(1000)
        self.serving_timer.timeout.connect(self._show_serving_progress)
        self.pair_label = PartsLabel("no model loaded")
        self.reply_label = PartsLabel("")
        self.pair_label.text_set.connect(self.fit_pair_label)
        self.reply_label.text_set.connect(self.fit_pair_label)
        # The reply's label is resized as the window is and as a progress bar shows or goes: the room changes
        self.reply_label.installEventFilter(self)
        self.addWidget(self.pair_label)
        self.separator = QFrame()  # the pair's name and the last reply's figures read as one line without it
        self.separator.setFrameShape(QFrame.Shape.VLine)
        self.separator.setFrameShadow(QFrame.Shadow.Sunken)
        self.addWidget(self.separator)
        self.addWidget(self.reply_label, 1)
        self.comparison_progress = QProgressBar()
        self.comparison_progress.setFormat(COMPARISON_DECODING)
        self.comparison_progress.setToolTip("Compare with AR: the same messages decoded again, undrawn, with plain "
                                            "AR and then as the reply was, to measure the speedup")
        # The text is drawn over the bar, so the bar is never narrower than it (the labels beside it elide).
        metrics = self.comparison_progress.fontMetrics()  # tokens run to four digits, a prompt's positions to five
        widest = max(metrics.horizontalAdvance(COMPARISON_DECODING.replace("%v", "0000").replace("%m", "0000")),
                     metrics.horizontalAdvance(COMPARISON_READING.format(WIDEST_READ_IN)))
        self.comparison_progress.setMinimumWidth(widest + 24)
        self.comparison_progress.hide()
        holder = QWidget()  # the bar's room, with a margin: at the window's edge it looked cut off
        holder_layout = QHBoxLayout(holder)
        holder_layout.setContentsMargins(0, 0, STATUS_RIGHT_MARGIN, 0)
        holder_layout.addWidget(self.comparison_progress)
        self.load_progress = QProgressBar()
        self.load_progress.setTextVisible(False)
        self.load_progress.setMaximumWidth(120)
        self.load_progress.setToolTip("Loading the model pair; the first load prepares it and can take a while")
        self.load_progress.hide()
        holder_layout.addWidget(self.load_progress)
        self.prefill_progress = QProgressBar()
        self.prefill_progress.setToolTip("The prompt is read in chunks, the time left measured from them; Stop "
                                         "takes effect between them")
        widest = READING.format(WIDEST_READ_IN)
        self.prefill_progress.setMinimumWidth(self.prefill_progress.fontMetrics().horizontalAdvance(widest) + 24)
        self.prefill_progress.hide()
        holder_layout.addWidget(self.prefill_progress)
        # A bar's height whether one is shown or not: a bar appearing would otherwise push the panes up a few pixels
        holder.setMinimumHeight(max(bar.sizeHint().height() for bar in (self.comparison_progress, self.load_progress,
                                                                          self.prefill_progress)))
        self.addPermanentWidget(holder)

    def fit_pair_label(self) -> None:
        """The last reply's figures, which are what changes, have the room they need first; the pair's name takes
        what they leave, giving up its device, dtype and weights before its models' names, which it keeps whole up
        to a share of the bar's width, a progress bar beside them or not (a loading or timing line likewise). With
        no figures beside it, it has all it needs."""
        pair, reply = self.pair_label, self.reply_label
        if not reply.text():
            pair.setMinimumWidth(0)
            pair.setMaximumWidth(UNLIMITED_WIDTH)
            return
        room = pair.width() + reply.width()  # the labels' share of the bar, however it is split between them now
        names = pair.parts[0][0] + (SEPARATOR + "…" if len(pair.parts) > 1 else "")
        least = min(text_width(pair, names), int(PAIR_NAMES_SHARE * self.width()))
        left = room - text_width(reply, reply.text())
        pair.setFixedWidth(max(least, min(text_width(pair, pair.text()), left)))

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
        if watched is self.reply_label and event.type() == QEvent.Type.Resize:
            self.fit_pair_label()
        return False

    # -- the pair and its replies ----------------------------------------------------------------------------

    def show_pair(self, info: PairInfo) -> None:
        self.close_progress()
        names, *details = pair_said(info, short=True).split(SEPARATOR)
        self.pair_label.set_parts([(names, 0), *((detail, 1) for detail in details)])
        self.pair_label.setToolTip(f"{self.pair_label.text()}\ntarget: {info.target.path}\n"
                                   f"draft: {info.draft.path if info.draft else '—'}")

    def show_engine(self, target: EngineTarget) -> None:
        self.close_progress()
        self.pair_label.setText(f"{target.model} at {target.url} (remote engine)")
        self.pair_label.setToolTip(f"model: {target.model}\nengine: {target.url}")

    def show_reply(self, reply: Reply) -> None:
        """The last reply's figures, a remote engine's as one line."""
        if reply.remote is not None:
            self.reply_label.setText(LAST_REPLY + remote_line(reply))
            return
        first, *rest = stats_figures(reply)
        self.reply_label.set_parts([first._replace(text=LAST_REPLY + first.text), *rest])

    def add_measured(self, comparison: Comparison, part: int, chat_measured: tuple[float, ...]) -> None:
        """Compare with AR's measured speedup after the reply's figures."""
        self.reply_label.set_parts(self.reply_label.parts + measured_figures(comparison, part, chat_measured))

    # -- loading a pair -------------------------------------------------------------------------------------

    def on_load_started(self, target: str, draft: str | None) -> None:
        """What is loading, said from now on; also where the load's progress opened before this was heard (the
        controller reports the state first), which would have named the last load's pair or URL."""
        self.clearMessage()  # the last load's outcome ("Could not load the new pair…") is not this one's
        self._loading_text = (f"Connecting to {target}" + (f" ({draft})" if draft else "") + "…" if is_url(target)
                              else f"Loading {model_said(target, short=True)}"
                              + (f" and {model_said(draft, short=True)}" if draft else "") + "…")
        if not self.load_progress.isHidden():
            self.pair_label.setText(self._loading_text)

    def open_progress(self) -> None:
        """Loading shows in the status bar, not in a dialog: the guide and its example prompts stay in view."""
        if self.load_progress.isHidden():
            self._pair_parts = self.pair_label.parts
        self.load_progress.setRange(0, 0)  # busy: a load reports no steps
        self.load_progress.show()
        self.pair_label.setText(self._loading_text)

    def close_progress(self) -> None:
        if not self.load_progress.isHidden():
            self.load_progress.hide()
            self.pair_label.set_parts(self._pair_parts)

    def on_timing_started(self) -> None:
        """The pair is loaded and its costs are being timed: the busy bar gives way to one that moves a step at a
        time, as a busy bar's drawing would take the very cores being timed (on two cores it tripled what a cached
        position seemed to cost)."""
        self.load_progress.setRange(0, 1)
        self.load_progress.setValue(0)
        self.pair_label.setText(TIMING_TEXT.format(""))

    def on_timing_progressed(self, done: int, total: int) -> None:
        self.load_progress.setRange(0, total)
        self.load_progress.setValue(done)
        self.pair_label.setText(TIMING_TEXT.format(f": step {done} of {total}"))

    # -- vLLM starting --------------------------------------------------------------------------------------

    def start_serving(self) -> None:
        """vLLM is starting for the embedded pair: a running count until it answers."""
        self.serving_clock.start()
        self.serving_timer.start()
        self.load_progress.show()
        self._show_serving_progress()

    def stop_serving(self) -> None:
        self.serving_timer.stop()
        self.load_progress.hide()
        self.clearMessage()

    def _show_serving_progress(self) -> None:
        seconds = self.serving_clock.elapsed() // 1000
        self.showMessage(f"Starting vLLM with the embedded pair… {seconds} s (it answers after about "
                         f"{SERVING_READY_S} s here)")

    # -- a turn ---------------------------------------------------------------------------------------------

    def on_comparison_reading(self, progress: PrefillProgress) -> None:
        """One of Compare with AR's runs is reading the prompt in again."""
        self.comparison_progress.setFormat(COMPARISON_READING.format(read_in_said(progress)))
        self.comparison_progress.setRange(0, max(progress.total, 1))
        self.comparison_progress.setValue(progress.done)
        self.comparison_progress.show()

    def on_comparison_progressed(self, tokens: int, expected: int) -> None:
        """The runs behind Compare with AR (plain AR, then a speculative reply again) have produced `tokens` of the
        `expected`."""
        self.comparison_progress.setFormat(COMPARISON_DECODING)
        self.comparison_progress.setRange(0, max(expected, tokens, 1))
        self.comparison_progress.setValue(tokens)
        self.comparison_progress.show()

    def show_prefill(self, progress: PrefillProgress, reading: bool) -> None:
        """How far a long prompt has been read in, and the time left, while it is."""
        self.prefill_progress.setFormat(READING.format(read_in_said(progress)))
        self.prefill_progress.setRange(0, max(progress.total, 1))
        self.prefill_progress.setValue(progress.done)
        self.prefill_progress.setVisible(reading)

    def on_turn_completed(self) -> None:
        self.comparison_progress.hide()
        self.prefill_progress.hide()
        self.clearMessage()

    def on_drafters_progressed(self, drafting: str, tokens: int) -> None:
        self.showMessage(f"Compare drafters: {drafting}, {tokens} rounds…")

    def on_notice_posted(self, message: str) -> None:
        self.showMessage(message, 8000)


def text_width(label: QLabel, text: str) -> int:
    """The width `label` needs to draw `text` unelided: elidedText measures in fractions of a pixel, and a width
    that QFontMetrics rounds down can fall short of it by one, cutting the line's last letters."""
    return math.ceil(QFontMetricsF(label.font()).horizontalAdvance(text))
