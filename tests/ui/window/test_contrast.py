"""Every text of the chat pane and the inspector reads on the background drawn behind it, under a light and a dark
desktop palette: a contrast ratio of at least 4.5, WCAG's AA level for body text."""
from __future__ import annotations

import pytest
from PySide6.QtGui import QColor, QPalette, QTextDocument, QTextFormat
from PySide6.QtWidgets import QApplication

from engine.events import Fate
from tests.ui.synthetic import accepted_round, markdown_reply, rejected_round
from ui.chat.inspector import TokenInspector
from ui.chat.view import CLEAN, TRACE, ChatView, ComparisonView
from words.tokens import round_spans

READABLE = 4.5
# What GTK's Adwaita:dark gives Qt (QT_QPA_PLATFORMTHEME=gtk3 GTK_THEME=Adwaita:dark)
DARK = {QPalette.ColorRole.Window: "#353535", QPalette.ColorRole.WindowText: "#eeeeec",
        QPalette.ColorRole.Base: "#2d2d2d", QPalette.ColorRole.Text: "#eeeeec", QPalette.ColorRole.Button: "#353535",
        QPalette.ColorRole.ButtonText: "#eeeeec", QPalette.ColorRole.Link: "#8ab4f8",
        QPalette.ColorRole.PlaceholderText: "#8f8f8f"}


def dark_palette() -> QPalette:
    palette = QPalette()
    for role, colour in DARK.items():
        palette.setColor(role, QColor(colour))
    return palette


def luminance(colour: QColor) -> float:
    def linear(channel: float) -> float:
        return channel / 12.92 if channel <= 0.04045 else ((channel + 0.055) / 1.055) ** 2.4
    return 0.2126 * linear(colour.redF()) + 0.7152 * linear(colour.greenF()) + 0.0722 * linear(colour.blueF())


def contrast(one: QColor, other: QColor) -> float:
    light, dark = sorted((luminance(one), luminance(other)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


@pytest.fixture(params=["light", "dark"])
def desktop(request, qapp):
    """The application's palette for the test: the style's own, or a dark theme's."""
    before = QApplication.palette()
    if request.param == "dark":
        QApplication.setPalette(dark_palette())
    yield request.param
    QApplication.setPalette(before)


def drawn_background(widget) -> QColor:
    """The colour the widget actually paints where no text is: its bottom right corner, below a short document."""
    image = widget.grab().toImage()
    return image.pixelColor(image.width() - 6, image.height() - 6)


def text_colours(document: QTextDocument, default_text: QColor, page: QColor) -> dict[tuple[str, str], str]:
    """(text colour, background colour) → a text drawn so, for every fragment with text: its own colours where its
    format has them, else its block's background, else the page the widget drew."""
    pairs = {}
    block = document.begin()
    while block.isValid():
        block_format = block.blockFormat()
        behind = (block_format.background().color() if block_format.hasProperty(QTextFormat.Property.BackgroundBrush)
                  else page)
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            it += 1
            fmt = fragment.charFormat()
            if not fragment.text().strip():
                continue
            ink = (fmt.foreground().color() if fmt.hasProperty(QTextFormat.Property.ForegroundBrush)
                   else default_text)
            ground = fmt.background().color() if fmt.hasProperty(QTextFormat.Property.BackgroundBrush) else behind
            pairs.setdefault((ink.name(), ground.name()), fragment.text())
        block = block.next()
    return pairs


def unreadable(pairs: dict[tuple[str, str], str]) -> list[tuple[str, str, str, float]]:
    return [(ink, ground, text, round(contrast(QColor(ink), QColor(ground)), 2))
            for (ink, ground), text in pairs.items() if contrast(QColor(ink), QColor(ground)) < READABLE]


def chat_with_everything(qtbot) -> ChatView:
    """A user message and a reply with every fate, code, notes (a warning too), an AR comparison that parts from it
    and the links under it."""
    chat = ChatView()
    qtbot.addWidget(chat)
    chat.resize(700, 1000)
    chat.show()
    qtbot.waitExposed(chat)
    chat.add_user_message("Show me code")
    chat.begin_reply("Assistant · speculative, greedy, γ ≤ 6, cost-aware")
    for event in [rejected_round(0, ["A"], " b", " c"), accepted_round(1, [" d"], " e"), *markdown_reply()[1:]]:
        chat.add_round(event)
    chat.add_note("56 tokens in 28 rounds · 117.4 tok/s")
    chat.add_note("The machine was busy during this reply", warning=True)
    chat.add_comparison(ComparisonView("plain AR: 56 tokens", "The texts part at token 2", ("A", " c", " e"),
                                       ("A", " x", " y"), first_difference=1))
    chat.set_reply_actions(0, ("copy", "edit", "regenerate", "continue"), text="A c e")
    return chat


def chat_pairs(chat: ChatView) -> dict[tuple[str, str], str]:
    return text_colours(chat.document(), chat.palette().text().color(), drawn_background(chat.viewport()))


@pytest.mark.parametrize("view", [CLEAN, TRACE])
def test_every_text_of_a_reply_reads_on_the_chats_background(qtbot, desktop, view):
    chat = chat_with_everything(qtbot)
    chat.set_view(view)
    pairs = chat_pairs(chat)
    assert len(pairs) >= 8  # the fates, the labels, the notes and the links were all seen
    assert unreadable(pairs) == []


def test_the_guides_text_and_example_links_read_on_the_chats_background(qtbot, desktop):
    chat = ChatView()  # an empty chat shows the guide
    qtbot.addWidget(chat)
    chat.resize(700, 1000)
    chat.show()
    qtbot.waitExposed(chat)
    assert unreadable(chat_pairs(chat)) == []


def test_the_check_finds_the_chat_unreadable_on_a_dark_page(qtbot, qapp):
    chat = chat_with_everything(qtbot)
    chat.setPalette(dark_palette())  # the pane drawn in the dark theme's colours: the grey labels vanish
    found = {text for *_, text, _ in unreadable(chat_pairs(chat))}
    assert "You" in found


@pytest.mark.parametrize("fate", [Fate.REJECTED, Fate.CORRECTED, Fate.ACCEPTED, Fate.BONUS])
def test_every_text_of_the_inspector_reads_on_its_background(qtbot, desktop, fate):
    spans = round_spans(rejected_round(0, ["a"], "b", "c", greedy=False)) + round_spans(accepted_round(1, ["d"], "e"))
    span = next(s for s in spans if s.fate is fate or (fate is Fate.CORRECTED and s.fate is Fate.RESAMPLED))
    inspector = TokenInspector()
    qtbot.addWidget(inspector)
    inspector.resize(300, 700)
    inspector.show()
    qtbot.waitExposed(inspector)
    inspector.show_span(span)
    document = QTextDocument()
    document.setHtml(inspector.label.text())
    label = inspector.label
    pairs = text_colours(document, label.palette().windowText().color(), drawn_background(inspector.viewport()))
    assert len(pairs) >= 3
    assert unreadable(pairs) == []
