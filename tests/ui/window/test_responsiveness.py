"""The GUI event loop keeps running while a reply streams (decoding never blocks it), and the window paints before
the models start loading.

The 50 ms stall bar itself is a timing figure, so it is measured by the benchmark `python -m tests.ui.stall_real`
on a quiet machine rather than asserted here, where a loaded CI machine would make it flaky.
"""
from PySide6.QtWidgets import QWidget

from studio import window as studio
from studio.window import AfterFirstPaint
from tests.ui.helpers import send
from ui.window.stall_probe import StallProbe


def test_event_loop_keeps_ticking_while_a_reply_streams(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, greedy=False, max_new_tokens=160)
    probe = StallProbe(10)
    studio.chat.prompt_requested.connect(probe.start)
    studio.window.turn_completed.connect(probe.stop)
    reply = send(qtbot, studio)
    assert len(reply.events) > 5
    assert len(probe.gaps) > 5  # a GUI thread busy decoding would not run its timers until the reply ended
    print(f"worst stall {probe.worst_stall_s * 1000:.1f} ms over {len(probe.gaps)} ticks, {len(reply.events)} rounds")


class PaintCounter(QWidget):
    def __init__(self):
        super().__init__()
        self.paints = 0

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        self.paints += 1
        super().paintEvent(event)


def test_the_models_load_once_the_window_has_painted(qtbot, monkeypatch):
    monkeypatch.setattr(studio, "FIRST_PAINT_WAIT_MS", 60_000)  # the paint, not the wait, starts it
    window = PaintCounter()
    qtbot.addWidget(window)
    paints_at_load = []
    AfterFirstPaint(window, lambda: paints_at_load.append(window.paints))
    window.show()
    assert paints_at_load == []  # show() alone has drawn nothing yet
    qtbot.waitUntil(lambda: bool(paints_at_load), timeout=5000)
    assert paints_at_load[0] >= 1


def test_a_window_never_painted_loads_the_models_all_the_same(qtbot, monkeypatch):
    monkeypatch.setattr(studio, "FIRST_PAINT_WAIT_MS", 50)
    window = PaintCounter()  # never shown
    qtbot.addWidget(window)
    loads = []
    AfterFirstPaint(window, lambda: loads.append(window.paints))
    qtbot.waitUntil(lambda: bool(loads), timeout=2000)
    assert loads == [0]


def test_a_window_that_will_load_at_start_says_so_from_its_first_paint(qtbot):
    """The load, holding Python's lock, can hold back the status bar by seconds (the twenty-fifth walk saw "no model
    loaded" 7 s in): the window says it is loading before it shows. The control: one not told says no model."""
    from tests.ui.helpers import shown_window

    window = shown_window(qtbot, 1600, 1000)
    assert window.pair_label.text() == "no model loaded" and window.load_progress.isHidden()
    window.status_bar.open_progress()
    assert window.pair_label.text() == "Loading models…" and not window.load_progress.isHidden()
