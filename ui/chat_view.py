"""The conversation pane: user turns as plain text, replies as coloured tokens that can be hovered and clicked."""
from __future__ import annotations

from PySide6.QtCore import QTimer, QUrl, Signal
from PySide6.QtGui import QColor, QFont, QTextBlockFormat, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QTextBrowser

from engine.events import Fate, RoundEvent
from ui.palette import STYLES
from ui.tokens import TokenSpan, round_spans

ANCHOR_SCHEME = "token"
FLUSH_MS = 50  # new tokens reach the document at most this often: one relayout per batch, not per round


def token_format(fate: Fate, index: int) -> QTextCharFormat:
    """The look of one token; the anchor href carries its index into the pane's span list."""
    style = STYLES[fate]
    fmt = QTextCharFormat()
    if style.foreground:
        fmt.setForeground(QColor(style.foreground))
    if style.background:
        fmt.setBackground(QColor(style.background))
    fmt.setFontStrikeOut(style.strike)
    fmt.setAnchor(True)
    fmt.setAnchorHref(f"{ANCHOR_SCHEME}:{index}")
    return fmt


class ChatView(QTextBrowser):
    token_hovered = Signal(int)  # index into `spans`
    token_clicked = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setOpenLinks(False)
        self.setPlaceholderText("Load a model pair, type a message and press Enter.")
        self.spans: list[TokenSpan] = []
        # The transcript as items, so the pane can be redrawn when rejected drafts are shown or hidden.
        # ("user", text) | ("reply", header) | ("note", text) | ("token", index into spans)
        self._items: list[tuple[str, object]] = []
        self.hide_rejected = False
        self._pending: list[int] = []  # span indices not yet in the document
        self._flush_timer = QTimer(self)
        self._flush_timer.setInterval(FLUSH_MS)
        self._flush_timer.setSingleShot(True)
        self._flush_timer.timeout.connect(self.flush)
        self.highlighted.connect(self._on_link)
        self.anchorClicked.connect(lambda url: self._on_link(url, clicked=True))

    def clear_chat(self) -> None:
        self._pending.clear()
        self.spans.clear()
        self._items.clear()
        self.clear()

    def add_user_message(self, text: str) -> None:
        self.flush()
        self._items.append(("user", text))
        self._draw_user(text)

    def begin_reply(self, header: str) -> None:
        self.flush()
        self._items.append(("reply", header))
        self._draw_header(header)

    def add_note(self, text: str) -> None:
        """A grey line under a reply (its statistics, the AR comparison)."""
        self.flush()
        self._items.append(("note", text))
        self._draw_note(text)

    def add_round(self, event: RoundEvent) -> None:
        for span in round_spans(event):
            index = len(self.spans)
            self.spans.append(span)
            self._items.append(("token", index))
            self._pending.append(index)
        if not self._flush_timer.isActive():
            self._flush_timer.start()

    def flush(self) -> None:
        """Draw the tokens that arrived since the last flush, in one edit."""
        if not self._pending:
            return
        bottom = self._at_bottom()
        cursor = self._end()
        cursor.beginEditBlock()
        for index in self._pending:
            self._draw_token(cursor, index)
        cursor.endEditBlock()
        self._pending.clear()
        if bottom:
            self.verticalScrollBar().setValue(self.verticalScrollBar().maximum())

    def set_hide_rejected(self, hide: bool) -> None:
        self.hide_rejected = hide
        self._pending.clear()  # the redraw below covers them
        self.clear()
        cursor = self._end()
        for kind, value in self._items:
            if kind == "user":
                self._draw_user(value)
            elif kind == "reply":
                self._draw_header(value)
            elif kind == "note":
                self._draw_note(value)
            else:
                self._draw_token(cursor, value)
            cursor = self._end()

    def _draw_user(self, text: str) -> None:
        cursor = self._new_block(top_margin=14)
        cursor.insertText("You\n", self._label_format("#555555"))
        cursor.insertText(text, QTextCharFormat())

    def _draw_header(self, header: str) -> None:
        cursor = self._new_block(top_margin=10)
        cursor.insertText(header + "\n", self._label_format("#555555"))

    def _draw_note(self, text: str) -> None:
        cursor = self._new_block(top_margin=4)
        fmt = QTextCharFormat()
        fmt.setForeground(QColor("#777777"))
        fmt.setFontPointSize(max(6.0, self.font().pointSizeF() - 1))
        cursor.insertText(text, fmt)

    def _draw_token(self, cursor: QTextCursor, index: int) -> None:
        span = self.spans[index]
        if span.fate is Fate.REJECTED and self.hide_rejected:
            return
        cursor.insertText(span.text, token_format(span.fate, index))

    def _new_block(self, top_margin: int) -> QTextCursor:
        cursor = self._end()
        block = QTextBlockFormat()
        block.setTopMargin(top_margin)
        if self.document().isEmpty():
            cursor.setBlockFormat(block)
        else:
            cursor.insertBlock(block, QTextCharFormat())
        return cursor

    def _end(self) -> QTextCursor:
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    @staticmethod
    def _label_format(colour: str) -> QTextCharFormat:
        fmt = QTextCharFormat()
        fmt.setFontWeight(QFont.Weight.Bold)
        fmt.setForeground(QColor(colour))
        return fmt

    def _at_bottom(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - 4

    def _on_link(self, url: QUrl, clicked: bool = False) -> None:
        if url.scheme() != ANCHOR_SCHEME:
            return
        index = int(url.path())
        (self.token_clicked if clicked else self.token_hovered).emit(index)
