"""Where a copied token came from: prompt lookup copies what followed an earlier occurrence of the last few tokens,
and the inspector names that place in words (your message and its line, earlier in this reply, or the conversation
at large: a system prompt, an earlier turn)."""
from __future__ import annotations

FROM_CONVERSATION = "copied from the conversation"
FROM_THIS_REPLY = "copied from earlier in this reply"
# A short run ("y", "    ") is found almost anywhere: it is looked for after the reply's text before it, up to this
# many characters or line breaks in all, since the tokens before a copy matched where it was copied from (the lookup
# found them there).
CONTEXT_CHARS = 40
CONTEXT_LINES = 2


def from_message(line: int) -> str:
    return f"copied from your message, line {line}"


def context_start(run: str, before: str) -> int:
    """Where in `before` the context of `run` begins: as far back as makes the two CONTEXT_CHARS long or
    CONTEXT_LINES line breaks deep, or `before`'s start."""
    start = len(before)
    while start > 0 and len(before) - start + len(run) < CONTEXT_CHARS \
            and (before[start:] + run).count("\n") < CONTEXT_LINES:
        start -= 1
    return start


def line_of(text: str, found: int, needle: str) -> int:
    """The line (from 1) of `needle`'s last character that is not a line break, where it is found at `found`: the
    token asked about ends the run, so that is where the reader looks."""
    last = found + max(0, len(needle.rstrip("\r\n")) - 1)
    return text.count("\n", 0, last) + 1


def copy_origin(run: str, message: str, before: str) -> str:
    """Where a copied run's text is found: earlier in the reply (`before`, the reply's text before the run), else
    the latest place in the user's message that the reply answers (`message`), named by the line of the run's end,
    else neither (FROM_CONVERSATION). `run` is the run's text up to and including the token asked about.

    The run is looked for after as much of the reply's text before it as is found with it (up to CONTEXT_CHARS or
    CONTEXT_LINES), as the model's own words before a copy are not in its source. Text of spaces and line breaks
    alone is found anywhere and names no place."""
    for start in range(context_start(run, before), len(before) + 1):
        needle = before[start:] + run
        if not needle.strip():
            break  # less context leaves only spaces too
        if needle in before[:start]:  # the reply came after the message: its own text is the latest
            return FROM_THIS_REPLY
        found = message.rfind(needle)
        if found >= 0:
            return from_message(line_of(message, found, needle))
    return FROM_CONVERSATION
