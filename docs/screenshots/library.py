"""Retakes library-*.png and draft-ranking-*.png: the real app on an X server (Xvfb + openbox, as take.sh), its window
maximised on a screen of the size named, the Model pair pane's lists opened and Find the best draft run (about a
minute), each captured whole with ImageMagick's `import`.

    docs/screenshots/library.sh 1600x1000     # starts Xvfb and openbox, runs this with the studio's python
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from PySide6.QtCore import QPoint, Qt, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QToolTip

from engine.models import packaged
from studio import window as studio
from ui.window.main_window import MainWindow

OUT = Path(__file__).resolve().parent
SIZE = sys.argv[1]
TARGET = str(packaged.MODELS["qwen2.5-coder-1.5b"].path)
STEP_MS = 1500


def window() -> MainWindow:
    return next(w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow))


def shot(name: str) -> None:
    QApplication.processEvents()
    subprocess.run(["import", "-window", "root", str(OUT / f"{name}-{SIZE}.png")], check=True)
    print("took", name, SIZE, flush=True)


def when(ready, then, every_ms: int = 500) -> None:
    """`then()` once `ready()` holds, polled on the event loop."""
    QTimer.singleShot(every_ms, lambda: then() if ready() else when(ready, then, every_ms))


def hover(box, row: int) -> None:
    """The tooltip of an open list's entry, where a hover shows it."""
    view = box.view()
    rect = view.visualRect(view.model().index(row, 0))
    QToolTip.showText(view.viewport().mapToGlobal(rect.center() + QPoint(40, 0)),
                      box.itemData(row, Qt.ItemDataRole.ToolTipRole), view)


def start() -> None:
    win = window()
    win.showMaximized()
    when(lambda: win.status.ready and win.picker.target.count() > 0, lambda: targets(win))


def targets(win) -> None:
    picker = win.picker
    picker.target.setText(TARGET)
    picker.target.showPopup()
    row = next(i for i, (_, path, _) in enumerate(picker.target.entries()) if path == TARGET)
    QTimer.singleShot(STEP_MS, lambda: (hover(picker.target, row), QTimer.singleShot(STEP_MS, lambda: drafts(win))))


def drafts(win) -> None:
    shot("library-targets")
    picker = win.picker
    picker.target.hidePopup()
    picker.draft.showPopup()
    greyed = next(i for i, (_, _, enabled) in enumerate(picker.draft.entries()) if not enabled)
    QTimer.singleShot(STEP_MS, lambda: (hover(picker.draft, greyed), QTimer.singleShot(STEP_MS, lambda: find(win))))


def find(win) -> None:
    shot("library-drafts")
    picker = win.picker
    picker.draft.hidePopup()
    QToolTip.hideText()
    QTest.mouseClick(picker.finder, Qt.MouseButton.LeftButton, pos=QPoint(20, picker.finder.height() // 2))
    QTimer.singleShot(8000, lambda: shot("draft-measuring"))
    when(lambda: win.pair_pane.ranking_dialog is not None and win.pair_pane.ranking_dialog.isVisible(),
         lambda: QTimer.singleShot(STEP_MS, lambda: ranked(win)), 1000)


def ranked(win) -> None:
    shot("draft-ranking")
    win.pair_pane.ranking_dialog.close()
    win.picker.draft.showPopup()
    QTimer.singleShot(STEP_MS, lambda: (shot("library-drafts-measured"), win.close()))


if __name__ == "__main__":
    app = QApplication(sys.argv[:1])
    QTimer.singleShot(3000, start)
    with tempfile.TemporaryDirectory() as data:
        sys.exit(studio.main(["--data-dir", data]))
