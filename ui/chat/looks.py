"""How the chat pane's text looks: each token's character format in either view (its fate's colours, the
Markdown style it sits in) and its text in the trace, the pinned token's outline, a comparison column's format, a
note's, a label's and a link's, and how far a Markdown block is indented. ui/chat/view.py draws with them; each
look is built once per pane and copied.

Built once because PySide6 6.12.0 loses a reference to None on every call of a method returning void (a crash once
None's count reaches zero), and a reply is drawn token by token."""
from __future__ import annotations

from PySide6.QtGui import QColor, QFont, QTextCharFormat
from PySide6.QtWidgets import QWidget

from engine.events import Fate
from ui.chat.document import RETURN_MARK
from ui.window.palette import CODE_BACKGROUND, DIFFERENCE_BACKGROUND, NOTE_COLOUR, STYLES, WARNING_COLOUR
from words.links import token_href
from words.markdown import Block
from words.tokens import TokenSpan

CLEAN, TRACE = "clean", "trace"
TRACE_CODE = "trace-code"  # a trace token inside code: the trace's tint, the clean view's monospace font
NBSP = "\u00a0"
PINNED_OUTLINE = "#37474f"  # the pinned token's underline


class ChatLooks:
    """The formats of one chat pane's text, following its font and palette as they are now; `mono`: its monospace
    family."""

    def __init__(self, view: QWidget, mono: str):
        self._view = view
        self.mono = mono
        # (fate, style, size step) -> a token's look, unanchored; ("column", style, relation) -> a comparison's
        self._formats: dict[tuple, QTextCharFormat] = {}

    def token(self, index: int, fate: Fate, style: str, size_step: int = 0) -> QTextCharFormat:
        """A token's look in the trace (style TRACE, or TRACE_CODE inside code) or the clean view (a Markdown
        style); the anchor href carries its index into the pane's span list."""
        key = (fate, style, size_step)
        if key not in self._formats:
            self._formats[key] = self._look(fate, style, size_step)
        fmt = QTextCharFormat(self._formats[key])
        fmt.setAnchorHref(token_href(index))
        return fmt

    def trace_token(self, index: int, span: TokenSpan, code: bool) -> tuple[str, QTextCharFormat]:
        """Token `index` as the trace draws it, its text and format; `code`: it is in code (TRACE_CODE)."""
        fmt = self.token(index, span.fate, TRACE_CODE if code else TRACE)
        text = span.text.replace("\n", RETURN_MARK + "\n") if span.text.strip() == "" else span.text
        if span.byte_wording:  # hex alone does not say what it is; one token, never broken at a line's end
            fmt.setToolTip(f"{span.byte_wording}. A token can hold only some of a character's UTF-8 bytes.")
            text = text.replace(" ", NBSP)
        return text, fmt

    @staticmethod
    def pin(fmt: QTextCharFormat) -> None:
        """The pinned token's outline on `fmt` (its extra selection's): an underline in the outline colour, over the
        token's own tint and text colour, as a dark background does not show over a tinted token and white text on
        its pale tint cannot be read."""
        fmt.setFontUnderline(True)
        fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.SingleUnderline)
        fmt.setUnderlineColor(QColor(PINNED_OUTLINE))

    def _look(self, fate: Fate, style: str, size_step: int) -> QTextCharFormat:
        look = STYLES[fate]
        fmt = QTextCharFormat()
        fmt.setAnchor(True)
        trace = style in (TRACE, TRACE_CODE)
        colour = look.foreground if trace else look.reading
        if colour:
            fmt.setForeground(QColor(colour))
        if trace:
            if look.background:
                fmt.setBackground(QColor(look.background))
            fmt.setFontStrikeOut(look.strike)
            if style == TRACE_CODE:
                fmt.setFontFamilies([self.mono])
        else:
            self._inline_style(fmt, style)
        if size_step:
            fmt.setFontPointSize(self._point_size() + size_step)
        return fmt

    def column(self, style: str, relation: str) -> QTextCharFormat:
        """A comparison column's text in a Markdown style, by where it stands to the token where the two sides part:
        "same" before it, "first" on it, "after" it."""
        key = ("column", style, relation)
        if key not in self._formats:
            fmt = QTextCharFormat()
            self._inline_style(fmt, style)
            if relation == "first":
                fmt.setFontWeight(QFont.Weight.Bold)
                fmt.setBackground(QColor(DIFFERENCE_BACKGROUND))
            elif relation == "after":
                fmt.setForeground(QColor(NOTE_COLOUR))
            self._formats[key] = fmt
        return QTextCharFormat(self._formats[key])

    def _inline_style(self, fmt: QTextCharFormat, style: str) -> None:
        """A clean-view Markdown style (bold, italic, code) on `fmt`: the chat's tokens and the comparison's columns
        read alike."""
        if style == "bold":
            fmt.setFontWeight(QFont.Weight.Bold)
        elif style == "italic":
            fmt.setFontItalic(True)
        elif style == "code":
            fmt.setFontFamilies([self.mono])
            fmt.setBackground(QColor(CODE_BACKGROUND))

    def indent(self, block: Block) -> int:
        """A Markdown block's left margin, in pixels: a list's by its level, a text line's by its leading spaces."""
        return {"bullet": 16 * (block.level + 1), "number": 16 * (block.level + 1), "quote": 12,
                "text": block.level * self._view.fontMetrics().horizontalAdvance(" ")}.get(block.kind, 0)

    def link(self, href: str, smaller: int, tooltip: str = "") -> QTextCharFormat:
        """A link in the link colour, `smaller` points below the pane's text (no smaller than 6 points)."""
        fmt = QTextCharFormat()
        fmt.setAnchor(True)
        fmt.setAnchorHref(href)
        fmt.setForeground(self._view.palette().link())
        fmt.setFontPointSize(max(6.0, self._point_size() - smaller))
        if tooltip:
            fmt.setToolTip(tooltip)
        return fmt

    def note(self, warning: bool) -> QTextCharFormat:
        """A line under a reply, a point below the pane's text: in the warning colour, or the notes'."""
        fmt = self.plain(WARNING_COLOUR if warning else NOTE_COLOUR)
        fmt.setFontPointSize(max(6.0, self._point_size() - 1))
        return fmt

    def _point_size(self) -> float:
        return self._view.font().pointSizeF()

    @staticmethod
    def plain(colour: str) -> QTextCharFormat:
        fmt = QTextCharFormat()
        fmt.setForeground(QColor(colour))
        return fmt

    @staticmethod
    def label(colour: str) -> QTextCharFormat:
        fmt = QTextCharFormat()
        fmt.setFontWeight(QFont.Weight.Bold)
        fmt.setForeground(QColor(colour))
        return fmt
