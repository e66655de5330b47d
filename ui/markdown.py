"""A small Markdown reader for chat replies: line blocks (text, headings, lists, quotes, rules, fenced code) and
inline bold / italic / code, as offsets into the source.

Offsets instead of HTML because the chat pane draws each character in its token's colour: it needs to know
which source characters are shown and in which style, not a rendered string. Lines stay lines (a chat reply's
single newline is a line break, as in other chat apps), and a reply still streaming parses as far as it goes:
an unclosed fence is a code block up to the end. An unclosed `**` is literal text, except in a reply's last line
(`cut`: still streaming, or stopped or cut at max tokens part-way), which reads as if its closer had come.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

FENCE = re.compile(r"\s*(```|~~~)\s*([\w+#.-]*)")
HEADING = re.compile(r"(#{1,6})\s+")
BULLET = re.compile(r"(\s*)[-*+]\s+")
NUMBER = re.compile(r"(\s*)(\d{1,3}[.)])\s+")
QUOTE = re.compile(r">\s?")
RULE = re.compile(r"\s*([-*_])(\s*\1){2,}\s*")
INLINE = re.compile(
    r"`(?P<code>[^`\n]+)`"
    r"|\*\*(?P<bold>\S(?:.*?\S)?)\*\*"
    r"|(?<!\w)__(?P<bold2>\S(?:.*?\S)?)__(?!\w)"
    r"|\*(?P<italic>[^*\s](?:[^*\n]*?[^*\s])?)\*"
    r"|(?<!\w)_(?P<italic2>[^_\s](?:[^_\n]*?[^_\s])?)_(?!\w)"
)
STYLE_OF_GROUP = {"code": "code", "bold": "bold", "bold2": "bold", "italic": "italic", "italic2": "italic"}
CLOSERS = ("`", "**", "__", "*", "_")
OPENER_AT_END = re.compile(r"(?:(?<=\s)|^)(?:`|\*{1,2}|_{1,2})$")


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


def _lines(source: str) -> list[tuple[int, str]]:
    """(offset, text) of every line, without the newline."""
    lines, offset = [], 0
    for line in source.split("\n"):
        lines.append((offset, line))
        offset += len(line) + 1
    return lines


def parse_blocks(source: str) -> list[Block]:
    blocks: list[Block] = []
    lines = _lines(source)
    gap = False
    i = 0
    while i < len(lines):
        start, line = lines[i]
        fence = FENCE.fullmatch(line)
        if fence:
            # The code runs to the closing fence, or to the end of what has streamed so far.
            j = next((k for k in range(i + 1, len(lines)) if lines[k][1].strip().startswith(fence.group(1))),
                     len(lines))
            content_start = lines[i + 1][0] if i + 1 < len(lines) else len(source)
            content_end = lines[j][0] - 1 if j < len(lines) else len(source)
            if j == len(lines) and source.endswith("\n"):
                content_end -= 1  # the newline that will precede the closing fence
            blocks.append(Block("code", content_start, max(content_start, content_end), gap=True,
                                closed=j < len(lines)))
            gap = True
            i = j + 1
            continue
        i += 1
        if not line.strip():
            gap = bool(blocks)
            continue
        if RULE.fullmatch(line):
            blocks.append(Block("rule", start, start, gap=gap))
        elif m := HEADING.match(line):
            blocks.append(Block("heading", start + m.end(), start + len(line), gap=True, level=len(m.group(1))))
        elif m := BULLET.match(line):
            blocks.append(Block("bullet", start + m.end(), start + len(line), gap=gap,
                                level=len(m.group(1).expandtabs(4)) // 2, marker="•"))
        elif m := NUMBER.match(line):
            blocks.append(Block("number", start + m.end(), start + len(line), gap=gap,
                                level=len(m.group(1).expandtabs(4)) // 2, marker=m.group(2)))
        elif m := QUOTE.match(line):
            blocks.append(Block("quote", start + m.end(), start + len(line), gap=gap))
        else:
            # Kept as the line's indentation: models often write code without a fence, and Python needs it.
            indent = len(line) - len(line.lstrip())
            blocks.append(Block("text", start + indent, start + len(line), gap=gap,
                                level=len(line[:indent].expandtabs(4))))
        gap = False
    return blocks


def inline_runs(source: str, start: int, end: int, cut: bool = False) -> list[tuple[int, int, str]]:
    """(start, end, style) of the shown characters in source[start:end]; style is '', 'bold', 'italic' or
    'code'. The characters between runs are Markdown markers and are not shown. `cut`: the text stops part-way
    (a reply's last line), so a marker left open is read as closed at its end; the source itself is unchanged."""
    runs, position = [], start
    for match in INLINE.finditer(source, start, end):
        group = match.lastgroup
        if match.start() > position:
            runs.append((position, match.start(), ""))
        runs.append((match.start(group), match.end(group), STYLE_OF_GROUP[group]))
        position = match.end()
    if cut and position < end:
        text = source[:end].rstrip()
        bare = OPENER_AT_END.search(text, position)
        left_open = _left_open(text, position)
        if left_open is not None:  # its text in its style, the marker hidden
            group = left_open.lastgroup
            runs.append((position, left_open.start(), ""))
            runs.append((left_open.start(group), left_open.end(group), STYLE_OF_GROUP[group]))
            position = left_open.end(group)
        elif bare is not None:  # the reply stopped just after an opening marker: nothing to style, marker hidden
            runs.append((position, bare.start(), ""))
            position = len(text)
    if position < end:
        runs.append((position, end, ""))
    return [run for run in runs if run[0] < run[1]]


def _left_open(text: str, start: int) -> re.Match | None:
    """The first bold / italic / code span in text[start:] whose closing marker never came, matched as if it
    followed the text. Its opener must start a word: 2*3 is no italic waiting for its star."""
    found = [match for closer in CLOSERS for match in INLINE.finditer(text + closer, start)
             if match.end() == len(text) + len(closer) and not text[match.start() - 1:match.start()].isalnum()]
    return min(found, key=lambda match: match.start(), default=None)
