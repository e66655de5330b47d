"""Compare with AR's runs wait for the GUI thread's event loop to be quiet, not merely to wait once: the window's
paints come a few milliseconds after the layout that asked for them. (qtbot.waitSignal runs a real event loop, one
that waits in its dispatcher; qtbot.wait does not.)"""
from PySide6.QtCore import QAbstractEventDispatcher, QTimer

from app.chat.timing import QuietLoop


def idle_for(qtbot, seconds: float) -> None:
    """Run the event loop, waiting in its dispatcher, for `seconds`."""
    timer = QTimer()
    timer.setSingleShot(True)
    with qtbot.waitSignal(timer.timeout, timeout=5000):
        timer.start(round(seconds * 1000))


def test_quiet_comes_after_work_that_arrives_between_the_loops_waits(qtbot):
    loop = QuietLoop()
    ran, quiet_at, first_wait_at = [], [], []

    def step(i: int) -> None:  # work posted a few ms apart, as a paint after its layout is
        ran.append(i)
        if i < 10:
            QTimer.singleShot(2, lambda: step(i + 1))

    def first_wait() -> None:
        if not first_wait_at:
            first_wait_at.append(len(ran))

    dispatcher = QAbstractEventDispatcher.instance()
    dispatcher.aboutToBlock.connect(first_wait)
    loop.quiet.connect(lambda: quiet_at.append(len(ran)))
    with qtbot.waitSignal(loop.quiet, timeout=5000):
        loop.watch()
        QTimer.singleShot(0, lambda: step(0))
    dispatcher.aboutToBlock.disconnect(first_wait)
    assert quiet_at == [11]
    assert first_wait_at[0] < 11  # the control: the loop's first wait came with the work still to run


def test_quiet_is_emitted_once_for_each_watch(qtbot):
    loop = QuietLoop()
    quiet = []
    loop.quiet.connect(lambda: quiet.append(1))
    with qtbot.waitSignal(loop.quiet, timeout=5000):
        loop.watch()
    idle_for(qtbot, 3 * QuietLoop.QUIET_S)
    assert quiet == [1]
    with qtbot.waitSignal(loop.quiet, timeout=5000):
        loop.watch()
    assert quiet == [1, 1]
