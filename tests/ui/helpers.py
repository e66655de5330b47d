"""Small helpers shared by the UI tests: send a message like a user, read the token formats and the inspector back."""
from __future__ import annotations

import re
from html import unescape

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextFormat

from engine.events import Fate, RoundEvent
from ui.chat.inspector import WORD_JOINER
from ui.window.palette import STYLES

REPLY_TIMEOUT_MS = 60_000  # tiny models, but the CI machine may be busy


def shown_window(qtbot, width: int, height: int, **machine):
    """A bare MainWindow (the presets' pair picker, no models) shown and resized to width x height."""
    from PySide6.QtWidgets import QApplication

    from engine.models.pairing import PRESETS
    from ui.window.main_window import MainWindow

    window = MainWindow(PRESETS, **machine)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    window.resize(width, height)
    QApplication.processEvents()
    return window


def send(qtbot, studio, text: str = "w3 w7 w11 w5"):
    """Type a message, press Enter, and wait until the whole turn is on screen; returns the Reply."""
    replies = len(studio.chat.replies)
    with qtbot.waitSignal(studio.window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClicks(studio.window.message_box, text)
        qtbot.keyClick(studio.window.message_box, Qt.Key.Key_Return)
    assert len(studio.chat.replies) == replies + 1, "the turn ended without a reply"
    return studio.chat.replies[-1]


def token_fragments_with_blocks(chat) -> list:
    """(fragment, its block) for every fragment of the chat pane's document that belongs to a token."""
    found = []
    block = chat.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            if fmt.isAnchor() and fmt.anchorHref().startswith("token:"):
                found.append((it.fragment(), block))
            it += 1
        block = block.next()
    return found


def token_fragments(chat) -> list[tuple[str, str, bool]]:
    """(text, background colour, struck out) of every token fragment in the chat pane's document."""
    found = []
    for fragment, _ in token_fragments_with_blocks(chat):
        fmt = fragment.charFormat()
        has_background = fmt.hasProperty(QTextFormat.Property.BackgroundBrush)
        colour = fmt.background().color().name() if has_background else ""
        found.append((fragment.text(), colour, fmt.fontStrikeOut()))
    return found


def expected_colours(events: list[RoundEvent]) -> set[tuple[str, bool]]:
    """The (background, strike) pairs the pane must show for these events' fates."""
    fates = {t.fate for e in events for t in e.emitted}
    if any(not d.accepted for e in events for d in e.drafted if len(e.emitted) > e.n_accepted):
        fates.add(Fate.REJECTED)
    return {(STYLES[f].background, STYLES[f].strike) for f in fates}


def text_of(html: str) -> str:
    """What the inspector's HTML reads as: a line per paragraph or <br>, non-breaking spaces as spaces and the
    invisible word joiners gone (no Qt: the tests of its words run without an application)."""
    lines = re.sub(r"<br>|</p>", "\n", html)
    return unescape(re.sub(r"<[^>]+>", "", lines)).replace("\u00a0", " ").replace(WORD_JOINER, "")
