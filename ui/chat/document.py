"""Where things are in the chat pane's QTextDocument: its end, the fragments a token was drawn in, the blocks
that hold links rather than text, and what a selection copies (only the clean text). ui/chat/view.py draws into
the document with these; nothing here is a widget."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QTextBlockFormat, QTextCharFormat, QTextCursor, QTextDocument, QTextFormat

from words.links import token_href, token_index
from words.tokens import TokenSpan

ACTION_ROW = QTextFormat.Property.UserProperty + 1  # block property of a reply's links: never copied with the text
RETURN_MARK = "↵"  # a newline token in the trace, so it can be seen and hovered
CODE_LINK_GAP = 3  # pixels above and below a code block's Copy link


def end_cursor(document: QTextDocument) -> QTextCursor:
    cursor = QTextCursor(document)
    cursor.movePosition(QTextCursor.MoveOperation.End)
    return cursor


def end_position(document: QTextDocument) -> int:
    return document.characterCount() - 1


def remove_from(document: QTextDocument, position: int) -> None:
    cursor = QTextCursor(document)
    cursor.setPosition(position)
    cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
    cursor.removeSelectedText()


def insert_block(document: QTextDocument, top_margin: int, left_margin: int = 0, background: str = "") -> QTextCursor:
    """A new block at the document's end (its first, where it is empty), and a cursor in it."""
    cursor = end_cursor(document)
    block = QTextBlockFormat()
    block.setTopMargin(top_margin)
    block.setLeftMargin(left_margin)
    if background:
        block.setBackground(QColor(background))
    if document.isEmpty():
        cursor.setBlockFormat(block)
    else:
        cursor.insertBlock(block, QTextCharFormat())
    return cursor


def action_row() -> QTextBlockFormat:
    row = QTextBlockFormat()
    row.setProperty(ACTION_ROW, True)  # never copied with the text
    return row


def code_link_row() -> QTextBlockFormat:
    """A code block's Copy link on its own line at the box's right edge, a little below it: a link glued under the
    code reads as code."""
    row = action_row()
    row.setAlignment(Qt.AlignmentFlag.AlignRight)
    row.setRightMargin(4)
    row.setBottomMargin(CODE_LINK_GAP)
    return row


def token_cursor(document: QTextDocument, index: int) -> QTextCursor | None:
    """A selection over every fragment of token `index` (a token can span Markdown styles); None where it is not
    drawn."""
    href = token_href(index)
    first = last = None
    block = document.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.charFormat().anchorHref() == href:
                first = fragment.position() if first is None else first
                last = fragment.position() + fragment.length()
            it += 1
        block = block.next()
    if first is None:
        return None
    cursor = QTextCursor(document)
    cursor.setPosition(first)
    cursor.setPosition(last, QTextCursor.MoveMode.KeepAnchor)
    return cursor


def clean_selection(document: QTextDocument, start: int, end: int, spans: list[TokenSpan]) -> str:
    """The document's text from `start` to `end` without rejected drafts, chat-template tokens and the rows of
    links (what copy copies)."""
    text = []
    block = document.findBlock(start)
    while block.isValid() and block.position() <= end:
        if block.blockFormat().hasProperty(ACTION_ROW):
            block = block.next()
            continue
        newline = True
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            low = max(start, fragment.position())
            high = min(end, fragment.position() + fragment.length())
            if low < high:
                index = token_index(fragment.charFormat().anchorHref())
                if index is None or spans[index].clean:
                    piece = fragment.text()[low - fragment.position():high - fragment.position()]
                    text.append(piece.replace(RETURN_MARK, ""))
                    newline = True
                else:  # the line break a hidden token (a rejected "\n" draft) ends with is not copied either
                    newline = not spans[index].text.endswith("\n")
            it += 1
        if block.next().isValid() and block.next().position() < end and newline:
            text.append("\n")
        block = block.next()
    return "".join(text)
