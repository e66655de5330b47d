"""A reply's notes as the chat pane draws them under it: plain lines (their details a tooltip), Compare with AR's
lines with both texts side by side where they part (or behind a link where they agree), and fold links. ui/chat/view.py
draws with these; nothing here is a widget."""
from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtGui import QTextCharFormat, QTextDocument

from ui.chat.document import action_row, insert_block
from ui.chat.looks import ChatLooks
from ui.compare.table import draw_comparison_table
from words.links import fold_href
from words.transcript import ComparisonView, Note


def draw_fold_link(document: QTextDocument, looks: ChatLooks, text: str, href: str) -> None:
    row = insert_block(document, top_margin=2)
    row.mergeBlockFormat(action_row())
    row.insertText(text, looks.link(href, smaller=1))


def draw_notes(document: QTextDocument, looks: ChatLooks, notes: Sequence[Note | ComparisonView], reply: int,
               start: int = 0) -> None:
    """The notes of item `reply` from `start` on; a comparison's fold link names it by its place among them."""
    for number in range(start, len(notes)):
        note = notes[number]
        if isinstance(note, ComparisonView):
            draw_comparison(document, looks, note, fold_href(reply, number))
        else:
            draw_note(document, looks, note)


def draw_note(document: QTextDocument, looks: ChatLooks, note: Note) -> None:
    look = looks.note(note.warning)
    if note.details:  # underlined with dots, as an abbreviation is: hovering the line tells the rest
        look.setToolTip(note.details)
        look.setUnderlineStyle(QTextCharFormat.UnderlineStyle.DotLine)
    insert_block(document, top_margin=4).insertText(note.text, look)


def draw_comparison(document: QTextDocument, looks: ChatLooks, comparison: ComparisonView, fold: str) -> None:
    """Its lines, then both texts side by side where they part; where they agree, a link (to `fold`) that shows
    them so."""
    draw_note(document, looks, Note(comparison.label + comparison.summary, details=comparison.details))
    if comparison.explanation:
        draw_note(document, looks, Note(comparison.explanation))
    if comparison.foldable:
        draw_fold_link(document, looks, comparison.fold_link, fold)
    if comparison.first_difference is not None or comparison.ar_shown:
        draw_comparison_table(insert_block(document, top_margin=4), comparison, looks)
