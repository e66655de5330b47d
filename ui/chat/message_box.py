"""The message box: Enter (or Ctrl+Enter) sends, Shift+Enter starts a new line; empty, Ctrl+Home / Ctrl+End scroll the
chat."""
from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QPlainTextEdit

# Keys an empty box has no use for: they go to the window's shortcuts (Ctrl+Home / Ctrl+End scroll the chat)
PASSED_ON_WHEN_EMPTY = (QKeySequence.StandardKey.MoveToStartOfDocument, QKeySequence.StandardKey.MoveToEndOfDocument)


class MessageBox(QPlainTextEdit):
    submitted = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setPlaceholderText("Message (Enter sends, Shift+Enter for a new line)")
        self.setMaximumHeight(90)
        self.setTabChangesFocus(True)

    def event(self, event) -> bool:
        """A text field claims its editing keys before the window's shortcuts see them; an empty one lets these go."""
        if (event.type() == QEvent.Type.ShortcutOverride and not self.toPlainText()
                and any(event.matches(key) for key in PASSED_ON_WHEN_EMPTY)):
            event.ignore()
            return True
        return super().event(event)

    def keyPressEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submit()
            return
        super().keyPressEvent(event)

    def submit(self) -> None:
        text = self.toPlainText().strip()
        if text:
            self.submitted.emit(text)
