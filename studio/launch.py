"""`specdec-studio`: a splash on screen at once, then the app. Importing torch and transformers takes seconds on a
cold start, and until the main window exists nothing would show that the app is starting."""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if {"-h", "--help"} & set(argv):  # help is printed, and no window opens
        from studio.window import main as studio_main
        return studio_main(argv)
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QColor, QPixmap
    from PySide6.QtWidgets import QApplication, QSplashScreen

    app = QApplication.instance() or QApplication(sys.argv[:1])
    pixmap = QPixmap(380, 90)
    pixmap.fill(QColor("white"))
    splash = QSplashScreen(pixmap)
    splash.showMessage("SpecDec Studio\nstarting…", Qt.AlignmentFlag.AlignCenter, QColor("#263238"))
    splash.show()
    app.processEvents()
    from studio.window import main as studio_main
    return studio_main(argv, splash)
