"""The Help menu's windows: the user guide (the README, its pictures fitted to the window and its links to docs/
followed inside it), the list of keyboard shortcuts and About."""
from __future__ import annotations

from importlib import metadata
from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices, QKeySequence, QTextBlockFormat, QTextCursor, QTextDocument
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QMenu, QMenuBar, QMessageBox, QTextBrowser, QVBoxLayout,
                               QWidget)

ABOUT = ("<h3>SpecDec Studio {version}</h3><p>A chat app that makes speculative decoding visible: a small draft "
         "model guesses up to γ tokens, the target checks them in one pass, and rejection sampling keeps the output "
         "exactly the target's (Leviathan et al., 2023; Chen et al., 2023). Every token is coloured by its fate; the "
         "charts show α, tokens per round and the speedup over plain autoregressive decoding.</p><p>Chats are saved "
         "as they happen (History, Ctrl+H); F1 lists the shortcuts.</p>")


def user_guide() -> Path | str:
    """The README: the checkout's own file beside the package (its screenshots and docs/ links resolve from it), else
    the installed package's description as Markdown (text only), else ""."""
    beside = Path(__file__).resolve().parents[2] / "README.md"
    if beside.is_file():
        return beside
    try:
        return metadata.metadata("specdec-studio").get_payload() or ""
    except metadata.PackageNotFoundError:
        return ""


def fit_to_width(browser: QTextBrowser) -> None:
    """Draws each picture wider than the browser at its width, keeping its shape (at its own 1,600 px the README's
    screenshot was cut by the guide's edge and looked like a second window inside it), and lets code lines wrap (a
    README command line and its comment scrolled the guide sideways). The changes are one edit: made one by one, the
    layout left a third of the README's paragraphs unlaid, drawn as blank space."""
    document = browser.document()
    width = browser.viewport().width() - 2 * document.documentMargin()
    edit = QTextCursor(document)
    edit.beginEditBlock()
    block = document.begin()
    while block.isValid():
        if block.blockFormat().nonBreakableLines():
            wrapping = QTextBlockFormat()
            wrapping.setNonBreakableLines(False)
            QTextCursor(block).mergeBlockFormat(wrapping)
        for piece in block:
            fragment = piece.fragment()
            picture = fragment.charFormat().toImageFormat()
            if not picture.isValid():
                continue
            size = document.resource(QTextDocument.ResourceType.ImageResource, picture.name()).size()
            if size.width() > width:
                picture.setWidth(width)
                picture.setHeight(width * size.height() / size.width())
                cursor = QTextCursor(document)
                cursor.setPosition(fragment.position())
                cursor.setPosition(fragment.position() + fragment.length(), QTextCursor.MoveMode.KeepAnchor)
                cursor.setCharFormat(picture)
        block = block.next()
    edit.endEditBlock()


def follow_guide_link(browser: QTextBrowser, url: QUrl) -> None:
    """A Markdown page opens in the guide (Back returns); anything else, a web page or a folder of screenshots,
    opens in the desktop's own program for it: the guide would draw a folder as a blank page."""
    url = browser.source().resolved(url)
    if url.isLocalFile() and url.path().endswith(".md"):
        browser.setSource(url)
    else:
        QDesktopServices.openUrl(url)


def app_version() -> str:
    try:
        return metadata.version("specdec-studio")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return ""


class GuideDialog(QDialog):
    """The README in a window of its own beside the chat: what each colour, chart and number means. `guide` is
    what user_guide() found."""

    def __init__(self, guide: Path | str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("SpecDec Studio: user guide")
        layout = QVBoxLayout(self)
        self.browser = browser = QTextBrowser(self)
        browser.setOpenLinks(False)
        browser.anchorClicked.connect(lambda url: follow_guide_link(browser, url))
        if isinstance(guide, Path):  # loaded from its file, so its links to docs/ open with a history to go back by
            browser.setSource(QUrl.fromLocalFile(str(guide)))
        else:
            browser.setMarkdown(guide)
        layout.addWidget(browser)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        # after a link to docs/
        self.back = buttons.addButton("Back to the guide", QDialogButtonBox.ButtonRole.ActionRole)
        self.back.setEnabled(False)
        self.back.clicked.connect(browser.backward)
        browser.backwardAvailable.connect(self.back.setEnabled)
        layout.addWidget(buttons)
        browser.sourceChanged.connect(lambda: fit_to_width(browser))

    def showEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        """Fitted once shown, when the browser has its width."""
        super().showEvent(event)
        fit_to_width(self.browser)


def menu_shortcuts(menu_bar: QMenuBar) -> list[tuple[str, str]]:
    """(keys, what they do) for every menu entry with a shortcut, and the keys of the message box and pane."""
    rows = [("Enter", "Send the message"), ("Shift+Enter", "A new line in the message")]
    for menu in menu_bar.findChildren(QMenu):
        for act in menu.actions():
            if not act.shortcut().isEmpty():
                keys = act.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
                rows.append((keys, act.text().replace("&", "").removesuffix("…")))
    rows.append(("Esc", "While a message is back in the box for editing: leave the edit (Cancel edit)"))
    rows.append(("Click a token", "Pin it in the inspector (click again to release)"))
    return rows


def shortcuts_box(rows: list[tuple[str, str]], parent: QWidget) -> QMessageBox:
    """(keys, what they do) in a table, open beside the window."""
    table = "".join(f"<tr><td><b>{keys}</b>&nbsp;&nbsp;</td><td>{what}</td></tr>" for keys, what in rows)
    box = QMessageBox(QMessageBox.Icon.NoIcon, "Keyboard shortcuts", f"<table>{table}</table>",
                      QMessageBox.StandardButton.Close, parent)
    box.setTextFormat(Qt.TextFormat.RichText)
    box.open()
    box.activateWindow()  # Esc and Enter go to the list, not the chat behind it
    return box


def about_box(parent: QWidget) -> QMessageBox:
    box = QMessageBox(QMessageBox.Icon.Information, "About SpecDec Studio", ABOUT.format(version=app_version()),
                      QMessageBox.StandardButton.Close, parent)
    box.setTextFormat(Qt.TextFormat.RichText)
    box.open()
    return box
