"""A reply beside its plain AR run in the chat pane: a two-column table under the reply's notes, each side read as
the clean view reads (Markdown, code in monospace, no chat-template tokens), the token where the two sides part
highlighted and what follows it greyed. ui/chat/view.py draws it in its own looks."""
from __future__ import annotations

from PySide6.QtGui import QColor, QTextBlockFormat, QTextCharFormat, QTextCursor, QTextLength, QTextTableFormat

from ui.chat.looks import ChatLooks
from ui.window.palette import CODE_BACKGROUND, NOTE_COLOUR
from words.markdown import inline_runs, parse_blocks
from words.transcript import ComparisonView, clean_tokens, owner_runs


def draw_comparison_table(cursor: QTextCursor, comparison: ComparisonView, looks: ChatLooks) -> None:
    """The table at `cursor`, for a comparison whose texts part, or whose plain AR text is asked for (ar_shown)."""
    table_format = QTextTableFormat()
    table_format.setCellPadding(4)
    table_format.setCellSpacing(0)
    table_format.setBorder(0.5)
    table_format.setWidth(QTextLength(QTextLength.Type.PercentageLength, 100))
    table = cursor.insertTable(2, 2, table_format)
    ar_title = "plain AR (its timed run: another sample)" if comparison.sampled else "plain AR"
    for column, (title, tokens) in enumerate((("this reply (speculative)", comparison.reply_tokens),
                                              (ar_title, comparison.ar_tokens))):
        title_cursor = table.cellAt(0, column).firstCursorPosition()
        title_cursor.insertText(title, looks.label(NOTE_COLOUR))
        _draw_column(table.cellAt(1, column).firstCursorPosition(), tokens, comparison.first_difference, looks)


def _draw_column(cursor: QTextCursor, tokens: tuple[str, ...], first_difference: int | None, looks: ChatLooks) -> None:
    """One side of the comparison; where the texts agree (first_difference None), all of it reads as the same."""
    source, owners = clean_tokens(tokens)
    parting = len(tokens) if first_difference is None else first_difference
    for n, block in enumerate(parse_blocks(source)):
        block_format = QTextBlockFormat()
        if block.kind == "code":
            block_format.setBackground(QColor(CODE_BACKGROUND))
        block_format.setTopMargin(6 if n and block.gap else 0)
        block_format.setLeftMargin(looks.indent(block))
        if n:
            cursor.insertBlock(block_format, QTextCharFormat())
        else:
            cursor.setBlockFormat(block_format)
        if block.marker:
            cursor.insertText(block.marker + " ", looks.plain(NOTE_COLOUR))
        runs = ([(block.start, block.end, "code")] if block.kind == "code"
                else inline_runs(source, block.start, block.end))
        for start, end, style in runs:
            style = "bold" if block.kind == "heading" and not style else style
            for run_start, run_end, owner in owner_runs(owners, start, end):
                relation = "same" if owner < parting else "first" if owner == parting else "after"
                fmt = looks.column(style, relation)
                # A block per code line, as in the reply: a newline typed into a block leaves a gap in the box.
                for k, line in enumerate(source[run_start:run_end].split("\n")):
                    if k:
                        block_format.setTopMargin(0)
                        cursor.insertBlock(block_format, QTextCharFormat())
                    cursor.insertText(line, fmt)
