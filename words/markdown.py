"""The Markdown reader for chat replies: markdown-it-py reads the text (CommonMark), and this module turns what it
read into line blocks (text, headings, lists, quotes, rules, fenced code) and inline bold / italic / code runs, as
offsets into the source.

Offsets instead of HTML because the chat pane draws each character in its token's colour: it needs to know
which source characters are shown and in which style, not a rendered string. markdown-it's tokens give line ranges
(`map`) but no columns, so the offsets are found here: its paragraph rule is wrapped to note where each line's text
starts past the markers of the quotes and list items it is in, and an inline token's offset follows from the
markup and content of the tokens before it. Lines stay lines (a chat reply's single newline is a line break, as in
other chat apps): each line of a paragraph is a block of its own.

A reply still streaming parses as far as it goes: an unclosed fence is a code block up to the end (of its list
item or quote). Rules whose reading a later line would change are off, as the pane draws a line once it is
followed by another: setext headings and tables (a later underline turns drawn lines into a heading or a table),
reference definitions (a line that vanishes once complete) and indented code (models indent code without a fence:
it stays text with its indentation). Links, entities and HTML are shown as written: a link has no style here and an
entity's character is in no source position to colour; a backslash escape hides its backslash. A run has one
style, its innermost (the italic part of a bold line reads italic). An unclosed `**` is literal text, except in a reply's last
line (`cut`: still streaming, or stopped or cut at max tokens part-way), which reads as if its closer had come.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.rules_block import fence, paragraph
from markdown_it.rules_block.state_block import StateBlock
from markdown_it.token import Token

# The exporter's test for a fence line, a line at a time (app/chat/export.py); the chat's reading is markdown-it's.
FENCE = re.compile(r"\s*(```|~~~)\s*([\w+#.-]*)")
CLOSERS = ("`", "**", "__", "*", "_")
OPENER_AT_END = re.compile(r"(?:(?<=\s)|^)(?:`|\*{1,2}|_{1,2})$")
STYLE_OF_TOKEN = {"em_open": "italic", "strong_open": "bold"}


@dataclass(frozen=True)
class Block:
    """One line-level block; `start`/`end` delimit its shown content in the source (markers excluded)."""

    kind: str  # "text", "heading", "bullet", "number", "quote", "rule" or "code"
    start: int
    end: int
    gap: bool = False  # a blank line (or the start of a code block) before it: drawn with space above
    level: int = 0  # heading level, list nesting, or a text line's leading spaces
    marker: str = ""  # what a list item shows in front: "•" or "3."
    closed: bool = True  # code blocks: whether the closing fence has arrived


def _paragraph(state: StateBlock, start_line: int, end_line: int, silent: bool) -> bool:
    """markdown-it's paragraph, noting where each of its lines' text starts: a quote or a list item moves a line's
    start past its markers only while it is read (a lazy line keeps its own)."""
    found = paragraph(state, start_line, end_line, silent)
    for line in range(start_line, state.line):
        state.env["text_at"][line] = state.bMarks[line] + state.tShift[line]
    return found


def _fence(state: StateBlock, start_line: int, end_line: int, silent: bool) -> bool:
    """markdown-it's fence, noting whether its closing fence came, which its token does not say: the lines it took
    hold more than its code only when the last of them was that fence."""
    found = fence(state, start_line, end_line, silent)
    if found and not silent:
        token = state.tokens[-1]
        token.meta["closed"] = token.content != state.getLines(start_line + 1, state.line, state.sCount[start_line],
                                                               True)
    return found


_MD = MarkdownIt("zero").enable(["fence", "blockquote", "hr", "list", "heading", "escape", "backticks", "emphasis"])
_MD.block.ruler.at("paragraph", _paragraph)
_MD.block.ruler.at("fence", _fence, {"alt": ["paragraph", "reference", "blockquote", "list"]})  # as markdown-it's


def _lines(source: str) -> list[tuple[int, str]]:
    """(offset, text) of every line, without the newline."""
    lines, offset = [], 0
    for line in source.split("\n"):
        lines.append((offset, line))
        offset += len(line) + 1
    return lines


def parse_blocks(source: str) -> list[Block]:
    # The block parser alone, on the source itself: the core's normalising would turn a lone "\r" into a line.
    env: dict = {"text_at": {}}
    tokens: list[Token] = []
    _MD.block.parse(source, _MD, env, tokens)
    text_at: dict[int, int] = env["text_at"]
    leaves: dict[int, tuple[Token, str]] = {}  # first line -> fence, hr or heading, and a heading's text
    items: dict[int, tuple[Token, int]] = {}  # first line -> list item, its list nesting
    quoted: set[int] = set()
    lists = 0
    for n, token in enumerate(tokens):
        if token.type in ("bullet_list_open", "ordered_list_open", "bullet_list_close", "ordered_list_close"):
            lists += token.nesting
        elif token.type == "list_item_open":
            items[token.map[0]] = (token, lists - 1)  # an item nested on the same line comes later and wins
        elif token.type == "blockquote_open":
            quoted.update(range(*token.map))
        elif token.type in ("fence", "hr", "heading_open"):
            leaves[token.map[0]] = (token, tokens[n + 1].content if token.type == "heading_open" else "")

    blocks: list[Block] = []
    lines = _lines(source)
    gap = False
    n = 0
    while n < len(lines):
        start, line = lines[n]
        end = start + len(line)
        leaf, heading = leaves.get(n, (None, ""))
        if leaf is not None and leaf.type == "fence":
            # The code runs to the closing fence, or to the end of what has streamed so far.
            closed = leaf.meta["closed"]
            last = leaf.map[1] - 1 - closed  # its last line of code
            content_start = lines[n + 1][0] if n + 1 < len(lines) else len(source)
            content_end = lines[last][0] + len(lines[last][1]) if last > n else content_start
            blocks.append(Block("code", content_start, content_end, gap=True, closed=closed))
            gap = True
            n = leaf.map[1]
            continue
        if leaf is not None and leaf.type == "hr":
            blocks.append(Block("rule", start, start, gap=gap))
        elif leaf is not None:  # its marker is the line's first "#": quotes and lists have none
            level = len(leaf.markup)
            shown = source.index(heading, source.index("#", start) + level, end)
            blocks.append(Block("heading", shown, shown + len(heading), gap=True, level=level))
        elif n in items:
            item, nesting = items[n]
            bullet = item.markup in "-*+"
            blocks.append(Block("bullet" if bullet else "number", text_at.get(n, end), end, gap=gap, level=nesting,
                                marker="•" if bullet else item.info + item.markup))
        elif n in quoted and n in text_at:
            blocks.append(Block("quote", text_at[n], end, gap=gap))
        elif n in text_at:
            # Kept as the line's indentation: models often write code without a fence, and Python needs it.
            blocks.append(Block("text", text_at[n], end, gap=gap, level=len(source[start:text_at[n]].expandtabs(4))))
        else:  # a blank line, or one with only a quote's marker
            gap = bool(blocks)
            n += 1
            continue
        gap = False
        n += 1
    return blocks


def inline_runs(source: str, start: int, end: int, cut: bool = False) -> list[tuple[int, int, str]]:
    """(start, end, style) of the shown characters in source[start:end]; style is '', 'bold', 'italic' or
    'code'. The characters between runs are Markdown markers and are not shown. `cut`: the text stops part-way
    (a reply's last line), so a marker left open is read as closed at its end; the source itself is unchanged."""
    text = source[start:end]
    runs = _read(text)[0]
    if cut:
        stem = text.rstrip()
        bare = OPENER_AT_END.search(stem)
        if bare is not None:  # the reply stopped just after an opening marker: nothing to style, marker hidden
            runs = _clipped(runs, bare.start()) + [(len(stem), len(text), "")]
            stem = stem[:bare.start()].rstrip()
        left_open = _left_open(stem)
        if left_open is not None:  # its text in its style, the marker hidden
            runs = _clipped(left_open, len(stem)) + [(max(a, len(stem)), b, style) for a, b, style in runs
                                                     if b > len(stem)]
    return [(start + a, start + b, style) for a, b, style in runs if a < b]


def _read(text: str) -> tuple[list[tuple[int, int, str]], list[tuple[int, int, int]]]:
    """markdown-it's reading of one line: the runs it shows, and where each styled span's opener starts and its
    closer starts and ends. Its tokens have no offsets; each follows from the markup and content of those before it."""
    runs, spans, opened = [], [], []  # opened: (offset, style) of the spans open at `at`
    at = 0
    for token in _MD.inline.parse(text, _MD, {}, []):
        style = opened[-1][1] if opened else ""
        if token.type == "text":
            runs.append((at, at + len(token.content), style))
            at += len(token.content)
        elif token.type == "text_special":  # an escape: "\*" shows "*"; one of a letter ("\a") shows both
            at += len(token.markup)
            runs.append((at - len(token.content), at, style))
        elif token.type == "code_inline":
            # One space inside each backtick is dropped from the content when both are there.
            shown = text.index(token.content, at + len(token.markup))
            closer = shown + len(token.content) + (shown - at - len(token.markup))
            runs.append((shown, shown + len(token.content), "code"))
            spans.append((at, closer, closer + len(token.markup)))
            at = closer + len(token.markup)
        elif token.nesting == 1:  # em_open, strong_open
            opened.append((at, STYLE_OF_TOKEN[token.type]))
            at += len(token.markup)
        else:  # em_close, strong_close
            spans.append((opened.pop()[0], at, at + len(token.markup)))
            at += len(token.markup)
    return runs, spans


def _left_open(text: str) -> list[tuple[int, int, str]] | None:
    """The runs of text as if the closers of the bold / italic / code spans it leaves open had followed it, the
    innermost first (**bold *and it), if it leaves one open. All of a closer must close its span (a "*" of "**"
    closing an italic is no bold's closer), and the span's opener must start a word: 2*3 is no italic waiting for
    its star. A closer leaves the spans before it as they were, so each one closes one more of text's openers."""
    closers, runs = "", None
    while True:
        readings = []  # (where the span opened, its closer, the runs)
        for closer in CLOSERS:
            read, spans = _read(text + closers + closer)
            readings += [(opened, closer, read) for opened, closing, closed in spans
                         if opened < len(text) and closing <= len(text) + len(closers)
                         and closed == len(text) + len(closers) + len(closer) and not text[opened - 1:opened].isalnum()]
        if not readings:
            return runs
        _, closer, runs = max(readings, key=lambda reading: reading[0])
        closers += closer


def _clipped(runs: list[tuple[int, int, str]], end: int) -> list[tuple[int, int, str]]:
    return [(a, min(b, end), style) for a, b, style in runs if a < end]
