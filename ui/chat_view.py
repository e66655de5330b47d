"""The conversation pane: renders the transcript (ui/transcript.py: user turns, and replies that can be read two
ways without re-running anything) into a QTextDocument, and reports clicks as signals with indices.

The clean view (the default) is what a chat shows: rendered Markdown, code in a monospace font, each token in
its fate's colour, rejected drafts and chat-template tokens absent. The speculative trace shows every draft on
its tinted background, rejected ones struck. Both keep every token hoverable for the inspector, and copying
always gives the clean text. Under each reply, links act on it (copy, edit its message, regenerate, continue). An
empty pane shows a short guide with example prompts.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from PySide6.QtCore import QMimeData, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import (QColor, QFont, QFontDatabase, QTextBlockFormat, QTextCharFormat, QTextCursor, QTextFormat,
                           QTextLength, QTextTableFormat)
from PySide6.QtWidgets import QTextBrowser, QTextEdit, QToolTip

from engine.events import DecodeSettings, Fate, RoundEvent
from ui.markdown import Block, inline_runs, parse_blocks
from ui.palette import (CODE_BACKGROUND, DIFFERENCE_BACKGROUND, LEGEND_FATES, LINK, NOTE_COLOUR, STYLES, WARNING_COLOUR,
                        paper)
from ui.tokens import SPECIAL_TOKEN, TokenSpan
from ui.transcript import ComparisonView, Note, ReplyItem, Transcript, UserItem
from ui.wording import part_label

TOKEN_SCHEME = "token"
EXAMPLE_SCHEME = "example"
ACTION_SCHEME = "action"
CODE_SCHEME = "code"  # a code block's Copy link: code:<index into ChatView._code_texts>
FOLD_SCHEME = "fold"  # a long user message's Show all / Fold link: fold:<item index>
CLEAN, TRACE = "clean", "trace"
TRACE_CODE = "trace-code"  # a trace token inside code: the trace's tint, the clean view's monospace font
# New tokens reach the document at most this often: one relayout per batch, not per round. Drawing competes with
# the decoding for the CPU; at 50 ms (and charts at 100) a drawn reply ran 0.78-0.91x as fast as the same decoding
# undrawn on 2 cores, at 120 (charts 250) 0.91-1.01x.
FLUSH_MS = 120
RETURN_MARK = "↵"  # a newline token in the trace, so it can be seen and hovered
NBSP = "\u00a0"
PINNED_OUTLINE = "#37474f"  # the pinned token's underline
BOTTOM_SLACK = 4  # pixels from the bottom that still count as "at the bottom"
CODE_LINK_GAP = 3  # pixels above and below a code block's Copy link


def continue_reach(max_new_tokens: int) -> str:
    """How far a Continue goes: it asks for max tokens again, so the joined reply can run past them."""
    return f"up to {max_new_tokens} more tokens"


def continue_link(max_new_tokens: int) -> tuple[str, str]:
    """The Continue link's text and tooltip."""
    reach = continue_reach(max_new_tokens)
    return f"Continue ({reach})", f"Let the model carry on this reply where it stopped, for {reach} (Ctrl+Shift+Enter)"


# The links under a reply (name: text, tooltip), in this order; the window's menus have the same actions. Continue's
# names the default max tokens until the window says its own (ChatView.set_continue_reach).
ACTIONS = {
    "copy": ("Copy", "Copy this reply's text (Ctrl+Shift+C for the last reply)"),
    "edit": ("Edit message", "Put the message this reply answers back in the box; sending it replaces this turn and "
                             "what followed (Ctrl+Shift+E for the last message)"),
    "regenerate": ("Regenerate", "Decode this reply again with the current settings (Ctrl+R)"),
    "continue": continue_link(DecodeSettings().max_new_tokens),
}
LAST_REPLY_ONLY = ("regenerate", "continue")
ACTION_ROW = QTextFormat.Property.UserProperty + 1  # block property of a reply's links: never copied with the text

# The guide's examples: one the draft can copy from the prompt (the target writes the list out again whole), one
# code answer, one where the small draft guesses badly (free invention): rejected drafts, in rounds that draft.
EXAMPLES = (
    ("copying", "Write this list again in the same order: apple, banana, cherry, date, elderberry, fig, grape, "
                "kiwi."),
    ("a code answer", "Write a Python function that checks whether a word is a palindrome."),
    ("hard for the draft to guess", "Invent a strange name for a dragon and describe its cave in three sentences."),
)


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


def _owner_runs(owners: list[int], start: int, end: int):
    """(start, end, owner) of the stretches of [start, end) whose characters come from one token."""
    run = start
    while run < end:
        stop = run + 1
        while stop < end and owners[stop] == owners[run]:
            stop += 1
        yield run, stop, owners[run]
        run = stop


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
        self._code_texts: list[str] = []  # what each code block's Copy link copies, in the document drawn
        self._user_starts: dict[int, int] = {}  # item index -> where a user message's label begins in the document
        self._actions = dict(ACTIONS)  # the links' (text, tooltip) as drawn now: Continue names how far it goes
        self.following = True  # keep the bottom in view; off once the user scrolls up
        self._pinned: int | None = None  # the span outlined as pinned, outlined again when its reply is redrawn
        self._live: _Live | None = None
        self._links_at = 0  # where the last reply's links begin: they end the document while it is the last item
        self._pending = False  # tokens arrived since the last flush
        self._mono = monospace_family()
        # (fate, style, size step) -> a token's look, unanchored; ("column", style, relation) -> a comparison's
        self._formats: dict[tuple, QTextCharFormat] = {}
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
        self._pending = False
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
        self._live = _Live(item, self._end_position())
        self._draw_reply(self._live)

    def continue_reply(self, header: str, lookup: bool = False) -> None:
        """The last reply goes on streaming where it stopped (a Continue): its notes and links go until it ends."""
        self._end_live()
        item = self.transcript.last_reply()
        if item is None or item is not self.items[-1]:
            self.begin_reply(header, lookup)
            return
        # each part's comparison stays, named by its part as the continuation's will be
        item.notes = [replace(note, label=note.label or part_label(1, continued=True)) for note in item.notes
                      if isinstance(note, ComparisonView)]
        item.actions = ()
        item.lookup = lookup
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
        self._remove_from(start)
        self._live = _Live(self._live.item, start, reading=reading)
        self._draw_reply(self._live)

    def add_round(self, event: RoundEvent) -> None:
        self.transcript.add_round(event)
        self._pending = True
        if not self._flush_timer.isActive():
            self._flush_timer.start()

    def add_text(self, text: str) -> None:
        """A remote engine's piece of the reply: plain text, as it reports no fates."""
        self.transcript.add_text(text)
        self._pending = True
        if not self._flush_timer.isActive():
            self._flush_timer.start()

    def flush(self) -> None:
        """Draw what arrived since the last flush, in one edit."""
        if not self._pending or self._live is None:
            return
        self._pending = False
        cursor = self._end()
        cursor.beginEditBlock()
        self._draw_body(self._live, final=False)
        cursor.endEditBlock()

    def add_note(self, text: str, warning: bool = False) -> None:
        """A line under the last reply (its statistics, a warning)."""
        self._add_to_reply(Note(text, warning))

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

    def last_reply(self) -> ReplyItem | None:
        return self.transcript.last_reply()

    def turn_at(self, pos) -> int | None:
        """The finished reply a point of the pane is on: the one its token belongs to; beside the tokens, the last
        reply (None when there is none, or the token's reply is still streaming)."""
        index = self._token_index(self.anchorAt(pos))
        replies = [item for item in self.transcript.replies() if item.turn is not None]
        if index is None:
            return replies[-1].turn if replies else None
        item = self.transcript.reply_of_span(index)
        return item.turn if item is not None else None

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
        cursor = self._token_cursor(index) if index is not None else None
        if cursor is not None:
            selection = QTextEdit.ExtraSelection()
            selection.cursor = cursor
            # an underline in the outline colour, over the token's own tint and text colour: a dark background
            # does not show over a tinted token, and white text on its pale tint cannot be read
            selection.format.setFontUnderline(True)
            selection.format.setUnderlineStyle(QTextCharFormat.UnderlineStyle.SingleUnderline)
            selection.format.setUnderlineColor(QColor(PINNED_OUTLINE))
            selections.append(selection)
        self.setExtraSelections(selections)

    def selected_clean_text(self) -> str:
        """The selection as plain text, without rejected drafts and chat-template tokens (what copy copies)."""
        cursor = self.textCursor()
        start, end = cursor.selectionStart(), cursor.selectionEnd()
        text = []
        block = self.document().findBlock(start)
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
                    href = fragment.charFormat().anchorHref()
                    if self._copied(href):
                        piece = fragment.text()[low - fragment.position():high - fragment.position()]
                        text.append(piece.replace(RETURN_MARK, ""))
                        newline = True
                    else:  # the line break a hidden token (a rejected "\n" draft) ends with is not copied either
                        newline = not self.spans[self._token_index(href)].text.endswith("\n")
                it += 1
            if block.next().isValid() and block.next().position() < end and newline:
                text.append("\n")
            block = block.next()
        return "".join(text)

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
            self.toggle_fold(int(url.path()))
        elif url.scheme() == CODE_SCHEME:
            self.code_copied.emit(self._code_texts[int(url.path())])

    def toggle_fold(self, index: int) -> None:
        """Show a long user message whole, or fold it back to its opening lines, its top staying where it was in
        the pane; the pane follows the conversation again only if that leaves it at the bottom."""
        item = self.items[index]
        item.folded = not item.folded
        bar = self.verticalScrollBar()
        offset = self._top_of(index) - bar.value()
        self.following = False
        self._draw_all()
        bar.setValue(round(self._top_of(index) - offset))
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
        self._code_texts.clear()
        self._user_starts.clear()
        self.clear()
        live_item = self._live.item if self._live is not None else None
        self._live = None
        if not self.items:
            self._draw_guide()
        for index, item in enumerate(self.items):
            if isinstance(item, UserItem):
                self._draw_user(item, index)
                continue
            state = _Live(item, self._end_position())
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
            for note in state.item.notes:
                self._draw_note(note)
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
            self._remove_from(state.marks[state.stable])
            del state.marks[state.stable:]
        cut = self.transcript.cut(state.item)  # its last line may end inside **bold**: drawn as if it closed
        for i in range(state.stable, len(blocks)):
            state.marks.append(self._end_position())
            last = i == len(blocks) - 1
            self._draw_block(source, owners, blocks[i], first=i == 0, whole=final or not last, cut=cut and last)
        # The last block may still grow (a line, an open code fence): it is redrawn by the next flush.
        state.stable = len(blocks) if final else max(0, len(blocks) - 1)

    def _draw_trace(self, state: _Live) -> None:
        if not state.marks:
            state.marks.append(self._end_position())
            self._insert_block(top_margin=2)
        cursor = self._end()
        code = self.transcript.code_spans(state.item)
        for index in range(state.item.first + state.stable, state.item.end):
            span = self.spans[index]
            fmt = self._token_format(index, span.fate, TRACE_CODE if index in code else TRACE)
            text = span.text.replace("\n", RETURN_MARK + "\n") if span.text.strip() == "" else span.text
            if span.byte_wording:  # hex alone does not say what it is; one token, never broken at a line's end
                fmt.setToolTip(f"{span.byte_wording}. A token can hold only some of a character's UTF-8 bytes.")
                text = text.replace(" ", NBSP)
            cursor.insertText(text, fmt)
        state.stable = state.item.end - state.item.first

    def _draw_block(self, source: str, owners: list[int], block: Block, first: bool, whole: bool = True,
                    cut: bool = False) -> None:
        """`whole`: the block is complete (a code block then gets its Copy link); `cut`: the reply stops part-way
        through it (markdown.inline_runs)."""
        top = 2 if first else (8 if block.gap else 1)
        if block.kind == "code":
            self._draw_code(source, owners, block, top)
            if whole:
                self._draw_code_link(source[block.start:block.end])
            return
        cursor = self._insert_block(top_margin=top, left_margin=self._indent(block))
        if block.kind == "rule":
            cursor.insertText("—" * 16, self._plain_format(NOTE_COLOUR))
            return
        if block.marker:
            cursor.insertText(block.marker + " ", self._plain_format(NOTE_COLOUR))
        for start, end, style in inline_runs(source, block.start, block.end, cut):
            heading = block.kind == "heading"
            self._insert_owned(cursor, source, owners, start, end, "bold" if heading and not style else style,
                               size_step=max(0, 4 - block.level) if heading else 0)

    def _indent(self, block: Block) -> int:
        return {"bullet": 16 * (block.level + 1), "number": 16 * (block.level + 1), "quote": 12,
                "text": block.level * self.fontMetrics().horizontalAdvance(" ")}.get(block.kind, 0)

    def _draw_code(self, source: str, owners: list[int], block: Block, top: int) -> None:
        """One document block per code line, so the grey box has no gaps and leading spaces are kept."""
        offset = block.start
        for n, line in enumerate(source[block.start:block.end].split("\n")):
            cursor = self._insert_block(top_margin=top if n == 0 else 0, left_margin=4, background=CODE_BACKGROUND)
            self._insert_owned(cursor, source, owners, offset, offset + len(line), "code")
            offset += len(line) + 1

    def _draw_code_link(self, code: str) -> None:
        """A Copy link under a code block: its text without the fences, as a reader pastes it."""
        self._code_texts.append(code)
        link = QTextCharFormat()
        link.setAnchor(True)
        link.setAnchorHref(f"{CODE_SCHEME}:{len(self._code_texts) - 1}")
        link.setForeground(self.palette().link())
        link.setFontPointSize(max(6.0, self.font().pointSizeF() - 2))
        link.setToolTip("Copy this code block")
        # On its own line at the box's right edge, a little below it: a link glued under the code reads as code
        row = self._insert_block(top_margin=CODE_LINK_GAP)
        row_format = self._action_row()
        row_format.setAlignment(Qt.AlignmentFlag.AlignRight)
        row_format.setRightMargin(4)
        row_format.setBottomMargin(CODE_LINK_GAP)
        row.mergeBlockFormat(row_format)
        row.insertText("Copy code", link)

    def _insert_owned(self, cursor: QTextCursor, source: str, owners: list[int], start: int, end: int, style: str,
                      size_step: int = 0) -> None:
        """Insert source[start:end], one run per token, each in its fate's reading colour and the given style."""
        for run, stop, owner in _owner_runs(owners, start, end):
            cursor.insertText(source[run:stop], self._token_format(owner, self.spans[owner].fate, style, size_step))

    def _draw_user(self, item: UserItem, index: int) -> None:
        self._draw_label("You", top_margin=14)
        self._user_starts[index] = self._end().block().position()
        cursor = self._insert_block(top_margin=2)
        cursor.insertText(item.opening if item.folded else item.text, QTextCharFormat())
        if item.foldable:
            words = len(item.text.split())
            link = QTextCharFormat()
            link.setAnchor(True)
            link.setAnchorHref(f"{FOLD_SCHEME}:{index}")
            link.setForeground(self.palette().link())
            link.setFontPointSize(max(6.0, self.font().pointSizeF() - 1))
            row = self._insert_block(top_margin=2)
            row.mergeBlockFormat(self._action_row())
            row.insertText(f"Show all ({words} words)" if item.folded else "Fold", link)

    @staticmethod
    def _action_row() -> QTextBlockFormat:
        row = QTextBlockFormat()
        row.setProperty(ACTION_ROW, True)  # never copied with the text
        return row

    def _draw_note(self, note: Note | ComparisonView) -> None:
        if isinstance(note, ComparisonView):
            self._draw_comparison(note)
            return
        cursor = self._insert_block(top_margin=4)
        fmt = self._plain_format(WARNING_COLOUR if note.warning else NOTE_COLOUR)
        fmt.setFontPointSize(max(6.0, self.font().pointSizeF() - 1))
        cursor.insertText(note.text, fmt)

    def _draw_comparison(self, comparison: ComparisonView) -> None:
        self._draw_note(Note(comparison.label + comparison.summary))
        if comparison.explanation:
            self._draw_note(Note(comparison.explanation))
        if comparison.first_difference is None:
            return
        self._insert_block(top_margin=4)
        table_format = QTextTableFormat()
        table_format.setCellPadding(4)
        table_format.setCellSpacing(0)
        table_format.setBorder(0.5)
        table_format.setWidth(QTextLength(QTextLength.Type.PercentageLength, 100))
        table = self._end().insertTable(2, 2, table_format)
        ar_title = "plain AR (its timed run: another sample)" if comparison.sampled else "plain AR"
        for column, (title, tokens) in enumerate((("this reply (speculative)", comparison.reply_tokens),
                                                  (ar_title, comparison.ar_tokens))):
            title_cursor = table.cellAt(0, column).firstCursorPosition()
            title_cursor.insertText(title, self._label_format(NOTE_COLOUR))
            self._draw_column(table.cellAt(1, column).firstCursorPosition(), tokens, comparison.first_difference)

    def _draw_column(self, cursor: QTextCursor, tokens: tuple[str, ...], first_difference: int) -> None:
        """One side of a comparison as the clean view reads (Markdown, code in monospace, no chat-template
        tokens), with the token where the two sides part highlighted and what follows it greyed."""
        source, owners = "", []
        for index, token in enumerate(tokens):
            if not SPECIAL_TOKEN.fullmatch(token):
                source += token
                owners += [index] * len(token)
        for n, block in enumerate(parse_blocks(source)):
            block_format = QTextBlockFormat()
            if block.kind == "code":
                block_format.setBackground(QColor(CODE_BACKGROUND))
            block_format.setTopMargin(6 if n and block.gap else 0)
            block_format.setLeftMargin(self._indent(block))
            if n:
                cursor.insertBlock(block_format, QTextCharFormat())
            else:
                cursor.setBlockFormat(block_format)
            if block.marker:
                cursor.insertText(block.marker + " ", self._plain_format(NOTE_COLOUR))
            runs = ([(block.start, block.end, "code")] if block.kind == "code"
                    else inline_runs(source, block.start, block.end))
            for start, end, style in runs:
                style = "bold" if block.kind == "heading" and not style else style
                for run_start, run_end, owner in _owner_runs(owners, start, end):
                    relation = ("same" if owner < first_difference else
                                "first" if owner == first_difference else "after")
                    fmt = self._column_format(style, relation)
                    # A block per code line, as in the reply: a newline typed into a block leaves a gap in the box.
                    for k, line in enumerate(source[run_start:run_end].split("\n")):
                        if k:
                            block_format.setTopMargin(0)
                            cursor.insertBlock(block_format, QTextCharFormat())
                        cursor.insertText(line, fmt)

    def _column_format(self, style: str, relation: str) -> QTextCharFormat:
        """Built once per look, as token formats are (see _token_format)."""
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

    def _draw_actions(self, item: ReplyItem) -> None:
        if not item.actions:
            return
        self._links_at = self._end_position()
        cursor = self._insert_block(top_margin=3)
        row = QTextBlockFormat()
        row.setProperty(ACTION_ROW, True)
        cursor.mergeBlockFormat(row)
        size = max(6.0, self.font().pointSizeF() - 1)
        separator = self._plain_format(NOTE_COLOUR)
        for n, name in enumerate(item.actions):
            if n:
                cursor.insertText("  ·  ", separator)
            text, tooltip = self._actions[name]
            link = QTextCharFormat()
            link.setAnchor(True)
            link.setAnchorHref(f"{ACTION_SCHEME}:{name}:{item.turn}")
            link.setForeground(self.palette().link())
            link.setFontPointSize(size)
            link.setToolTip(tooltip)
            cursor.insertText(text, link)

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
            self._remove_from(self._links_at)

    def _retire_actions(self) -> None:
        """Regenerate and Continue act on the last reply: the next turn takes them off this one."""
        item = self.items[-1] if self.items else None
        if isinstance(item, ReplyItem) and set(item.actions) & set(LAST_REPLY_ONLY):
            self._redraw_actions(item, item.turn, tuple(a for a in item.actions if a not in LAST_REPLY_ONLY))

    def _draw_guide(self) -> None:
        chips = " ".join(f"<span style='background:{STYLES[f].background};color:{STYLES[f].foreground}'>"
                         f"&nbsp;{STYLES[f].label}&nbsp;</span>" for f in LEGEND_FATES)
        examples = "".join(f"<li><a href='{EXAMPLE_SCHEME}:{i}'>{text}</a> <span style='color:{NOTE_COLOUR}'>"
                           f"({what})</span></li>" for i, (what, text) in enumerate(EXAMPLES))
        self._end().insertHtml(
            "<h3>Watch speculative decoding work</h3>"
            "<p>A small draft model guesses the next few tokens; the large target model checks all of them in one "
            "pass and keeps the longest prefix it agrees with. Each reply is coloured by what happened to its "
            f"tokens:</p><p>{chips}</p>"
            "<p>Uncoloured tokens are the target's alone: by default (draft length: cost-aware) a round drafts "
            "only where this machine's measured costs say a draft pays, which beside a fast target is rare; "
            "draft length: confidence drafts in every round.</p>"
            "<p>Replies read as a clean answer by default; <b>View → Speculative trace</b> (Ctrl+T) shows every "
            "draft, rejected ones struck through. Hover a token to inspect p, q and the acceptance test; click to "
            "pin it.</p>"
            "<p>The charts on the right follow the last reply: α (the share of drafts kept), tokens per round against "
            "the seed's E, and the estimated speedup over plain autoregressive decoding.</p>"
            f"<p>Try one:</p><ul>{examples}</ul>")

    # -- document helpers --------------------------------------------------------------------------------------

    def _draw_label(self, text: str, top_margin: int) -> None:
        self._insert_block(top_margin=top_margin).insertText(text, self._label_format("#555555"))

    def _insert_block(self, top_margin: int, left_margin: int = 0, background: str = "") -> QTextCursor:
        cursor = self._end()
        block = QTextBlockFormat()
        block.setTopMargin(top_margin)
        block.setLeftMargin(left_margin)
        if background:
            block.setBackground(QColor(background))
        if self.document().isEmpty():
            cursor.setBlockFormat(block)
        else:
            cursor.insertBlock(block, QTextCharFormat())
        return cursor

    def _add_to_reply(self, note: Note | ComparisonView) -> None:
        self._end_live()
        item = self.transcript.last_reply()
        if item is None:
            return
        item.notes.append(note)
        if item is self.items[-1]:
            self._remove_actions(item)  # the links stay under the notes
            self._draw_note(note)
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
            for note in self._live.item.notes:  # a continued reply's earlier parts' comparisons
                self._draw_note(note)
            self._live = None

    @staticmethod
    def _token_index(href: str) -> int | None:
        """The span a token's anchor stands for (the renderer's own links; None for any other)."""
        scheme, _, index = href.partition(":")
        return int(index) if scheme == TOKEN_SCHEME else None

    def _copied(self, href: str) -> bool:
        index = self._token_index(href)
        return index is None or self.spans[index].clean

    def _token_cursor(self, index: int) -> QTextCursor | None:
        """A selection over every fragment of the token (a token can span Markdown styles)."""
        href = f"{TOKEN_SCHEME}:{index}"
        first = last = None
        block = self.document().begin()
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
        cursor = QTextCursor(self.document())
        cursor.setPosition(first)
        cursor.setPosition(last, QTextCursor.MoveMode.KeepAnchor)
        return cursor

    def _remove_from(self, position: int) -> None:
        cursor = QTextCursor(self.document())
        cursor.setPosition(position)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()

    def _end(self) -> QTextCursor:
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    def _end_position(self) -> int:
        return self.document().characterCount() - 1

    def _token_format(self, index: int, fate: Fate, style: str, size_step: int = 0) -> QTextCharFormat:
        """A token's look in the trace (style TRACE, or TRACE_CODE inside code) or the clean view (a Markdown
        style); the anchor href carries its index into the pane's span list.

        Each look is built once and copied: PySide6 6.12.0 loses a reference to None on every call of a method
        returning void (a crash once None's count reaches zero), and a reply is drawn token by token."""
        key = (fate, style, size_step)
        if key not in self._formats:
            self._formats[key] = self._look(fate, style, size_step)
        fmt = QTextCharFormat(self._formats[key])
        fmt.setAnchorHref(f"{TOKEN_SCHEME}:{index}")
        return fmt

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
                fmt.setFontFamilies([self._mono])
        else:
            self._inline_style(fmt, style)
        if size_step:
            fmt.setFontPointSize(self.font().pointSizeF() + size_step)
        return fmt

    def _inline_style(self, fmt: QTextCharFormat, style: str) -> None:
        """A clean-view Markdown style (bold, italic, code) on `fmt`: the chat's tokens and the comparison's columns
        read alike."""
        if style == "bold":
            fmt.setFontWeight(QFont.Weight.Bold)
        elif style == "italic":
            fmt.setFontItalic(True)
        elif style == "code":
            fmt.setFontFamilies([self._mono])
            fmt.setBackground(QColor(CODE_BACKGROUND))

    @staticmethod
    def _plain_format(colour: str) -> QTextCharFormat:
        fmt = QTextCharFormat()
        fmt.setForeground(QColor(colour))
        return fmt

    @staticmethod
    def _label_format(colour: str) -> QTextCharFormat:
        fmt = QTextCharFormat()
        fmt.setFontWeight(QFont.Weight.Bold)
        fmt.setForeground(QColor(colour))
        return fmt
