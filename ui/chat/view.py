"""The conversation pane: renders the transcript (words/transcript.py: user turns, and replies that can be read two
ways without re-running anything) into a QTextDocument, and reports clicks as signals with indices.

The clean view (the default) is what a chat shows: rendered Markdown, code in a monospace font, each token in
its fate's colour, rejected drafts and chat-template tokens absent. The speculative trace shows every draft on
its tinted background, rejected ones struck. Both keep every token hoverable for the inspector, and copying
always gives the clean text. Under each reply, links act on it (copy, edit its message, regenerate, continue). An
empty pane shows a short guide with example prompts.

The view draws and handles events; what it draws is known beside it: the turns, their spans, folds and code blocks
in words/transcript.py, what its links name in words/links.py, the guide in ui/chat/guide.py, the formats in
ui/chat/looks.py, where things are in the document in ui/chat/document.py, a reply's notes and Compare with AR's
texts in ui/chat/notes.py.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from PySide6.QtCore import QEvent, QMimeData, QPointF, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QFontDatabase, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QTextBrowser, QTextEdit, QToolTip

from engine.events import RoundEvent
from ui.chat.document import (CODE_LINK_GAP, action_row, clean_selection, code_link_row, end_cursor, end_position,
                              insert_block, remove_from, token_cursor)
from ui.chat.guide import EXAMPLES, guide_html
from ui.chat.looks import CLEAN, TRACE, ChatLooks
from ui.chat.notes import draw_fold_link, draw_notes
from ui.window.palette import CODE_BACKGROUND, LINK, NOTE_COLOUR, paper
from words.links import (ACTION_SCHEME, ACTIONS, CODE_SCHEME, EXAMPLE_SCHEME, FOLD_SCHEME, TOKEN_SCHEME, action_href,
                         code_href, continue_link, fold_href, token_index)
from words.markdown import Block, inline_runs, parse_blocks
from words.tokens import TokenSpan
from words.transcript import ComparisonView, Note, ReplyItem, Transcript, UserItem, owner_runs

# New tokens reach the document at most this often: one relayout per batch, not per round. Drawing competes with
# the decoding for the CPU; at 50 ms (and charts at 100) a drawn reply ran 0.78-0.91x as fast as the same decoding
# undrawn on 2 cores, at 120 (charts 250) 0.91-1.01x.
FLUSH_MS = 120
BOTTOM_SLACK = 4  # pixels from the bottom that still count as "at the bottom"


@dataclass
class _Live:
    """Where the reply still streaming sits in the document, so a flush redraws only what may have changed."""

    item: ReplyItem
    start: int  # document position where the reply's region begins
    marks: list[int] = field(default_factory=list)  # document position before each body block drawn
    stable: int = 0  # clean: Markdown blocks drawn for good; trace: spans drawn
    reading: str = ""  # while its prompt is read in, how far, after its header (drawn, never kept)


def monospace_family() -> str:
    return QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family()


class ChatView(QTextBrowser):
    token_hovered = Signal(int)  # index into `spans`
    token_clicked = Signal(int)
    background_clicked = Signal()  # a click that hit no token: releases a pinned token
    example_chosen = Signal(str)  # the text of a guide example the user clicked
    action_chosen = Signal(str, int)  # a link under a reply: its name in ACTIONS and the reply's turn
    code_copied = Signal(str)  # a code block's Copy link was clicked: its text

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setPalette(paper(self.palette()))
        # HTML links take the application's link colour, a dark theme's light blue, unless told
        self.document().setDefaultStyleSheet(f"a {{ color: {LINK}; }}")
        self.setOpenLinks(False)
        self.view = CLEAN
        self.transcript = Transcript()
        self._user_starts: dict[int, int] = {}  # item index -> where a user message's label begins in the document
        self._actions = dict(ACTIONS)  # the links' (text, tooltip) as drawn now: Continue names how far it goes
        self.following = True  # keep the bottom in view; off once the user scrolls up
        self._pinned: int | None = None  # the span outlined as pinned, outlined again when its reply is redrawn
        self._live: _Live | None = None
        self._links_at = 0  # where the last reply's links begin: they end the document while it is the last item
        self._pending = False  # tokens arrived since the last flush
        self._looks = ChatLooks(self, monospace_family())
        self._flush_timer = QTimer(self)
        self._flush_timer.setInterval(FLUSH_MS)
        self._flush_timer.setSingleShot(True)
        self._flush_timer.timeout.connect(self.flush)
        self.highlighted.connect(self.on_highlighted)
        self.anchorClicked.connect(self.on_anchor_clicked)
        bar = self.verticalScrollBar()
        bar.rangeChanged.connect(self.on_range_changed)
        bar.actionTriggered.connect(self.on_action_triggered)
        self._draw_all()

    # -- what the window calls ----------------------------------------------------------------------------

    def clear_chat(self) -> None:
        self.transcript.clear()
        self._pinned = None
        self._live = None
        self.following = True
        self._draw_all()

    def add_user_message(self, text: str) -> None:
        self._end_live()
        self._retire_actions()
        self._leave_guide()
        self.transcript.add_user(text)
        self._draw_user(self.items[-1], len(self.items) - 1)
        self.scroll_to_bottom()

    def begin_reply(self, header: str, lookup: bool = False) -> None:
        """`lookup`: the reply is drafted with prompt lookup on (its q = 1 drafts are copies)."""
        self._end_live()
        self._retire_actions()
        self._leave_guide()
        item = self.transcript.begin_reply(header, lookup)
        self._live = _Live(item, end_position(self.document()))
        self._draw_reply(self._live)

    def continue_reply(self, header: str, lookup: bool = False) -> None:
        """The last reply goes on streaming where it stopped (a Continue): its notes and links go until it ends."""
        self._end_live()
        item = self.transcript.continue_reply(lookup)
        if item is None:
            self.begin_reply(header, lookup)
            return
        self._live = _Live(item, 0)  # redrawn below as the reply still streaming
        self._draw_all()

    def show_reading(self, text: str) -> None:
        """How far the streaming reply's prompt has been read in, after its header ("": read, or stopped)."""
        if self._live is not None and self._live.reading != text:
            self._redraw_live(reading=text)

    def set_reply_header(self, header: str) -> None:
        """Change the last reply's header (γ moved mid-reply) in place."""
        item = self.transcript.last_reply()
        if item is None or item.header == header:
            return
        item.header = header
        if self._live is not None and self._live.item is item:
            self._redraw_live()
        else:
            self._draw_all()

    def _redraw_live(self, reading: str = "") -> None:
        """The streaming reply drawn again from its header, in place."""
        start = self._live.start
        remove_from(self.document(), start)
        self._live = _Live(self._live.item, start, reading=reading)
        self._draw_reply(self._live)

    def add_round(self, event: RoundEvent) -> None:
        self.transcript.add_round(event)
        self._flush_soon()

    def add_text(self, text: str) -> None:
        """A remote engine's piece of the reply: plain text, as it reports no fates."""
        self.transcript.add_text(text)
        self._flush_soon()

    def _flush_soon(self) -> None:
        self._pending = True
        if not self._flush_timer.isActive():
            self._flush_timer.start()

    def flush(self) -> None:
        """Draw what arrived since the last flush, in one edit."""
        if not self._pending or self._live is None:
            return
        self._pending = False
        cursor = end_cursor(self.document())
        cursor.beginEditBlock()
        self._draw_body(self._live, final=False)
        cursor.endEditBlock()

    def add_note(self, text: str, warning: bool = False, details: str = "") -> None:
        """A line under the last reply (its statistics, a warning); `details`: what hovering it tells besides."""
        self._add_to_reply(Note(text, warning, details))

    def add_comparison(self, comparison: ComparisonView) -> None:
        self._add_to_reply(comparison)

    def set_continue_reach(self, max_new_tokens: int) -> None:
        """The Continue link says how many more tokens it asks for: `max_new_tokens`, the current max tokens."""
        self._actions["continue"] = continue_link(max_new_tokens)
        item = self.transcript.last_reply()
        if item is not None and "continue" in item.actions:
            self._redraw_actions(item, item.turn, item.actions)

    def set_reply_actions(self, turn: int, actions: tuple[str, ...], text: str | None = None) -> None:
        """Links under the last reply (names from ACTIONS) that act on `turn`; `text` is what its Copy copies."""
        self._end_live()
        item = self.transcript.last_reply()
        if item is not None:
            if text is not None:
                item.text = text
            self._redraw_actions(item, turn, actions)

    @property
    def spans(self) -> list[TokenSpan]:
        return self.transcript.spans

    @property
    def items(self) -> list[UserItem | ReplyItem]:
        return self.transcript.items

    def reply_text(self, turn: int) -> str:
        return self.transcript.reply_text(turn)

    def turn_at(self, pos) -> int | None:
        """The finished reply a point of the pane is on: the one its token belongs to; beside the tokens, the last
        reply (None when there is none, or the token's reply is still streaming)."""
        return self.transcript.turn_of(token_index(self.anchorAt(pos)))

    def set_view(self, view: str) -> None:
        if view != self.view:
            QToolTip.hideText()  # a token's tooltip would outlive it: a shortcut's key (Ctrl+T) never reaches the tip
            self.view = view
            self._draw_all()

    def shows(self, span: TokenSpan) -> bool:
        """Whether the current view draws this token (the clean view leaves rejected drafts and special tokens out)."""
        return self.view == TRACE or span.clean

    def scroll_to_bottom(self) -> None:
        self.following = True
        self.verticalScrollBar().setValue(self.verticalScrollBar().maximum())

    def scroll_to_top(self) -> None:
        self.following = False  # a reply still streaming no longer pulls the view down
        self.verticalScrollBar().setValue(self.verticalScrollBar().minimum())

    def mark_pinned(self, index: int | None) -> None:
        """Outline the pinned token (or none), wherever the current view draws it, and again whenever its reply
        is redrawn (another view, a Continue, a message unfolded)."""
        self._pinned = index
        selections = []
        cursor = token_cursor(self.document(), index) if index is not None else None
        if cursor is not None:
            selection = QTextEdit.ExtraSelection()
            selection.cursor = cursor
            self._looks.pin(selection.format)
            selections.append(selection)
        self.setExtraSelections(selections)

    def selected_clean_text(self) -> str:
        """The selection as plain text, without rejected drafts and chat-template tokens (what copy copies)."""
        cursor = self.textCursor()
        return clean_selection(self.document(), cursor.selectionStart(), cursor.selectionEnd(), self.spans)

    # -- slots and Qt overrides ----------------------------------------------------------------------------

    def on_highlighted(self, url: QUrl) -> None:
        if url.scheme() == TOKEN_SCHEME:
            self.token_hovered.emit(int(url.path()))

    def on_anchor_clicked(self, url: QUrl) -> None:
        if url.scheme() == TOKEN_SCHEME:
            self.token_clicked.emit(int(url.path()))
        elif url.scheme() == EXAMPLE_SCHEME:
            self.example_chosen.emit(EXAMPLES[int(url.path())][1])
        elif url.scheme() == ACTION_SCHEME:
            name, _, turn = url.path().partition(":")
            self.action_chosen.emit(name, int(turn))
        elif url.scheme() == FOLD_SCHEME:
            index, _, note = url.path().partition(":")
            self.toggle_fold(int(index), int(note) if note else None)
        elif url.scheme() == CODE_SCHEME:
            first, _, block = url.path().partition(":")
            self.code_copied.emit(self.transcript.code_text(int(first), int(block)))

    def toggle_fold(self, index: int, note: int | None = None) -> None:
        """Show a long user message whole, or fold it back to its opening lines, its top staying where it was in
        the pane; with `note`, show or hide plain AR's text under that comparison of reply `index`."""
        item = self.items[index]
        if note is None:
            item.folded = not item.folded
            self._redraw_holding(lambda: self._top_of(index))
        else:
            item.notes[note] = replace(item.notes[note], ar_shown=not item.notes[note].ar_shown)
            self._redraw_holding(lambda: 0.0)  # what it shows or hides is below its link: nothing above it moves

    def _redraw_holding(self, top: Callable[[], float]) -> None:
        """Redraw the pane with the point of its layout that `top()` gives where it was in the viewport; the pane
        follows the conversation again only if that leaves it at the bottom."""
        bar = self.verticalScrollBar()
        offset = top() - bar.value()
        self.following = False
        self._draw_all()
        bar.setValue(round(top() - offset))
        self.following = bar.value() >= bar.maximum() - BOTTOM_SLACK

    def _top_of(self, index: int) -> float:
        """Where user message `index` (an item index) begins in the document's layout, in pixels."""
        block = self.document().findBlock(self._user_starts[index])
        return self.document().documentLayout().blockBoundingRect(block).top()

    def on_range_changed(self, _minimum: int, maximum: int) -> None:
        if self.following:
            self.verticalScrollBar().setValue(maximum)

    def on_action_triggered(self, _action: int) -> None:
        """The user moved the scroll bar (wheel, drag, keys): follow again only if they went to the bottom."""
        bar = self.verticalScrollBar()
        self.following = bar.sliderPosition() >= bar.maximum() - BOTTOM_SLACK

    def createMimeDataFromSelection(self) -> QMimeData:  # noqa: N802 (Qt's name)
        mime = QMimeData()
        mime.setText(self.selected_clean_text())
        return mime

    def viewportEvent(self, event) -> bool:  # noqa: N802 (Qt's name)
        """A tooltip only over text: Qt's own maps the blank below the last line to the last link's tooltip."""
        if event.type() == QEvent.Type.ToolTip:
            at = QPointF(event.pos()) + QPointF(self.horizontalScrollBar().value(), self.verticalScrollBar().value())
            if self.document().documentLayout().hitTest(at, Qt.HitTestAccuracy.ExactHit) < 0:
                QToolTip.hideText()
                return True
        return super().viewportEvent(event)

    def leaveEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        """A token's or a link's tooltip goes with the mouse (Qt keeps it up over a document it no longer points
        into)."""
        QToolTip.hideText()
        super().leaveEvent(event)

    def mouseReleaseEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        on_anchor = bool(self.anchorAt(event.position().toPoint()))
        super().mouseReleaseEvent(event)
        if event.button() == Qt.MouseButton.LeftButton and not on_anchor and not self.textCursor().hasSelection():
            self.background_clicked.emit()

    # -- drawing -------------------------------------------------------------------------------------------

    def _draw_all(self) -> None:
        self._pending = False
        self._user_starts.clear()
        self.clear()
        live_item = self._live.item if self._live is not None else None
        self._live = None
        if not self.items:
            end_cursor(self.document()).insertHtml(guide_html())
        for index, item in enumerate(self.items):
            if isinstance(item, UserItem):
                self._draw_user(item, index)
                continue
            state = _Live(item, end_position(self.document()))
            self._draw_reply(state, final=item is not live_item)
            if item is live_item:
                self._live = state
        if self.following:
            self.scroll_to_bottom()

    def _draw_reply(self, state: _Live, final: bool = False) -> None:
        self._draw_label(f"{state.item.header} · {state.reading}" if state.reading else state.item.header,
                         top_margin=10)
        self._draw_body(state, final)
        if final:
            self._draw_notes(state.item)
            self._draw_actions(state.item)

    def _draw_body(self, state: _Live, final: bool) -> None:
        if self.view == TRACE:
            self._draw_trace(state)
        else:
            self._draw_clean(state, final)
        if self._pinned is not None and state.item.first <= self._pinned < state.item.end:
            self.mark_pinned(self._pinned)  # its old outline went with the fragments redrawn

    def _draw_clean(self, state: _Live, final: bool) -> None:
        source, owners = self.transcript.clean_source(state.item)
        blocks = parse_blocks(source)
        if len(state.marks) > state.stable:
            remove_from(self.document(), state.marks[state.stable])
            del state.marks[state.stable:]
        cut = self.transcript.cut(state.item)  # its last line may end inside **bold**: drawn as if it closed
        for i in range(state.stable, len(blocks)):
            state.marks.append(end_position(self.document()))
            last = i == len(blocks) - 1
            self._draw_block(source, owners, blocks[i], first=i == 0, whole=final or not last, cut=cut and last,
                             copy=code_href(state.item.first, i))
        # The last block may still grow (a line, an open code fence): it is redrawn by the next flush.
        state.stable = len(blocks) if final else max(0, len(blocks) - 1)

    def _draw_trace(self, state: _Live) -> None:
        if not state.marks:
            state.marks.append(end_position(self.document()))
            insert_block(self.document(), top_margin=2)
        cursor = end_cursor(self.document())
        code = self.transcript.code_spans(state.item)
        for index in range(state.item.first + state.stable, state.item.end):
            cursor.insertText(*self._looks.trace_token(index, self.spans[index], index in code))
        state.stable = state.item.end - state.item.first

    def _draw_block(self, source: str, owners: list[int], block: Block, first: bool, whole: bool, cut: bool,
                    copy: str) -> None:
        """`whole`: the block is complete (a code block then gets its Copy link, to `copy`); `cut`: the reply stops
        part-way through it (markdown.inline_runs)."""
        top = 2 if first else (8 if block.gap else 1)
        if block.kind == "code":
            self._draw_code(source, owners, block, top)
            if whole:  # what it copies: Transcript.code_text
                row = insert_block(self.document(), top_margin=CODE_LINK_GAP)
                row.mergeBlockFormat(code_link_row())
                row.insertText("Copy code", self._looks.link(copy, smaller=2, tooltip="Copy this code block"))
            return
        cursor = insert_block(self.document(), top_margin=top, left_margin=self._looks.indent(block))
        if block.kind == "rule":
            cursor.insertText("—" * 16, self._looks.plain(NOTE_COLOUR))
            return
        if block.marker:
            cursor.insertText(block.marker + " ", self._looks.plain(NOTE_COLOUR))
        for start, end, style in inline_runs(source, block.start, block.end, cut):
            heading = block.kind == "heading"
            self._insert_owned(cursor, source, owners, start, end, "bold" if heading and not style else style,
                               size_step=max(0, 4 - block.level) if heading else 0)

    def _draw_code(self, source: str, owners: list[int], block: Block, top: int) -> None:
        """One document block per code line, so the grey box has no gaps and leading spaces are kept."""
        offset = block.start
        for n, line in enumerate(source[block.start:block.end].split("\n")):
            cursor = insert_block(self.document(), top_margin=top if n == 0 else 0, left_margin=4,
                                  background=CODE_BACKGROUND)
            self._insert_owned(cursor, source, owners, offset, offset + len(line), "code")
            offset += len(line) + 1

    def _insert_owned(self, cursor: QTextCursor, source: str, owners: list[int], start: int, end: int, style: str,
                      size_step: int = 0) -> None:
        """Insert source[start:end], one run per token, each in its fate's reading colour and the given style."""
        for run, stop, owner in owner_runs(owners, start, end):
            cursor.insertText(source[run:stop], self._looks.token(owner, self.spans[owner].fate, style, size_step))

    def _draw_user(self, item: UserItem, index: int) -> None:
        self._draw_label("You", top_margin=14)
        self._user_starts[index] = end_cursor(self.document()).block().position()
        cursor = insert_block(self.document(), top_margin=2)
        cursor.insertText(item.opening if item.folded else item.text, QTextCharFormat())
        if item.foldable:
            draw_fold_link(self.document(), self._looks, item.fold_link, fold_href(index))

    def _draw_notes(self, item: ReplyItem, start: int = 0) -> None:
        index = next(n for n, other in enumerate(self.items) if other is item)
        draw_notes(self.document(), self._looks, item.notes, index, start)

    def _draw_actions(self, item: ReplyItem) -> None:
        if not item.actions:
            return
        self._links_at = end_position(self.document())
        cursor = insert_block(self.document(), top_margin=3)
        cursor.mergeBlockFormat(action_row())
        separator = self._looks.plain(NOTE_COLOUR)
        for n, name in enumerate(item.actions):
            if n:
                cursor.insertText("  ·  ", separator)
            text, tooltip = self._actions[name]
            cursor.insertText(text, self._looks.link(action_href(name, item.turn), smaller=1, tooltip=tooltip))

    def _redraw_actions(self, item: ReplyItem, turn: int | None, actions: tuple[str, ...]) -> None:
        if item is not self.items[-1]:
            item.turn, item.actions = turn, actions
            self._draw_all()
            return
        self._remove_actions(item)
        item.turn, item.actions = turn, actions
        self._draw_actions(item)

    def _remove_actions(self, item: ReplyItem) -> None:
        """Take the last reply's links off the end of the document (to draw a note above them, or new links)."""
        if item.actions:
            QToolTip.hideText()  # a link's tooltip would outlive the link
            remove_from(self.document(), self._links_at)

    def _retire_actions(self) -> None:
        """The next turn takes the links that act on the last reply only off this one."""
        item = self.items[-1] if self.items else None
        if isinstance(item, ReplyItem) and item.lasting_actions != item.actions:
            self._redraw_actions(item, item.turn, item.lasting_actions)

    def _draw_label(self, text: str, top_margin: int) -> None:
        insert_block(self.document(), top_margin=top_margin).insertText(text, self._looks.label("#555555"))

    def _add_to_reply(self, note: Note | ComparisonView) -> None:
        self._end_live()
        item = self.transcript.last_reply()
        if item is None:
            return
        item.notes.append(note)
        if item is self.items[-1]:
            self._remove_actions(item)  # the links stay under the notes
            self._draw_notes(item, len(item.notes) - 1)
            self._draw_actions(item)
        else:
            self._draw_all()

    def _leave_guide(self) -> None:
        if not self.items:
            self.clear()  # the guide goes once the conversation starts

    def _end_live(self) -> None:
        """Draw the streaming reply for good: later notes and turns go below it."""
        if self._live is not None:
            self._pending = False
            self._draw_body(self._live, final=True)
            self._draw_notes(self._live.item)  # a continued reply's earlier parts' comparisons
            self._live = None
