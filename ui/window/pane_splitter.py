"""The window's three panes side by side (the controls, the chat, the inspector and charts): their first and least
widths, and hiding a side pane or bringing it back (View ▸ Controls pane, Inspector and charts)."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QSplitter, QWidget

# With the history dock, still under the window's least width. The side pane's leaves room for a scroll bar beside
# the controls, which a window under about 665 px tall scrolls; more where the controls need it.
PANE_MIN_WIDTH = {"side": 245, "chat": 315, "right": 200}
# The splitter's first sizes. QSplitter shares a window's width in proportion to its panes' widths, never below a
# pane's minimum, so at the smallest width the side panes sit at their minimums and the chat gets the rest; a hidden
# pane comes back with its share.
PANE_WIDTH = {"side": 280, "chat": 770, "right": 350}


class PaneSplitter(QSplitter):
    """`panes` by name ("side", "chat", "right"), left to right; the side pane sets its own least width (the
    controls' own, when a font needs more)."""

    def __init__(self, panes: dict[str, QWidget]):
        super().__init__(Qt.Orientation.Horizontal)
        self.panes = panes
        panes["chat"].setMinimumWidth(PANE_MIN_WIDTH["chat"])
        panes["right"].setMinimumWidth(PANE_MIN_WIDTH["right"])
        # Minimum widths sum to less than the window's with the history dock open, so the handles always move.
        for widget in panes.values():
            self.addWidget(widget)
        self.setChildrenCollapsible(False)
        self.setSizes([PANE_WIDTH[name] for name in panes])
        self.pane_actions = {}  # View's entries that hide a side pane or bring it back
        for name, text, shortcut in (("side", "&Controls pane", "Ctrl+1"), ("right", "&Inspector and charts", "Ctrl+2")):
            act = QAction(text, self, checkable=True, checked=True)
            act.setShortcut(QKeySequence(shortcut))
            act.toggled.connect(lambda shown, pane=name: self.show_pane(pane, shown))
            self.pane_actions[name] = act

    def show_pane(self, name: str, shown: bool) -> None:
        """Hide a side pane, or bring it back, taking its width from the chat: the share a fresh window of this
        width gives it, so a small window's chat stays the widest pane."""
        pane = self.panes[name]
        if shown == pane.isVisible():
            return
        sizes = dict(zip(self.panes, self.sizes()))
        if not shown:  # all of its width to the chat (the splitter would share it with the other pane)
            sizes["chat"], sizes[name] = sizes["chat"] + sizes[name], 0
            pane.hide()
            self.setSizes(list(sizes.values()))
            return
        # The sizes' sum is the splitter's width even before a hide has been laid out; only visible panes keep one.
        total = sum(sizes.values())
        for other in self.panes:
            if other not in (name, "chat") and not self.panes[other].isVisible():
                sizes[other] = 0
        others = sum(size for other, size in sizes.items() if other not in (name, "chat"))
        share = total * PANE_WIDTH[name] // sum(PANE_WIDTH.values())
        sizes[name] = max(pane.minimumWidth(), min(share, total - others - PANE_MIN_WIDTH["chat"]))
        sizes["chat"] = total - others - sizes[name]
        pane.show()
        self.setSizes(list(sizes.values()))
