"""The history sidebar: past chats from the chats database, newest first; click to reopen, right-click to rename,
export or delete."""
from __future__ import annotations

from datetime import datetime
from pathlib import Path

from PySide6.QtCore import QRect, QSettings, QSize, Qt, Signal
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import (QFileDialog, QInputDialog, QLabel, QListWidget, QListWidgetItem, QMenu, QMessageBox,
                               QStyle, QStyledItemDelegate, QStyleOptionViewItem, QVBoxLayout, QWidget)

from app.chat.export import ExportError, file_stem, written_said
from ui.window.preferences import export_folder, remember_export_folder

CHAT_ID = Qt.ItemDataRole.UserRole
SUBTITLE = Qt.ItemDataRole.UserRole + 1  # when the chat was last used and how many replies it holds
PADDING = 6
EMPTY = "No saved chats yet: each chat is kept here as you go."


def when(stamp: datetime, today: datetime | None = None) -> str:
    """A chat's last use, as short as it can be: a time today, a date this year, a full date before."""
    local = stamp.astimezone()
    today = today or datetime.now().astimezone()
    if local.date() == today.date():
        return local.strftime("today %H:%M")
    return local.strftime("%d %b" if local.year == today.year else "%d %b %Y")


class ChatDelegate(QStyledItemDelegate):
    """Two lines per chat: its title (elided to the panel's width) and, in grey, when it was last used."""

    def paint(self, painter, option, index) -> None:
        option = QStyleOptionViewItem(option)
        self.initStyleOption(option, index)
        title, option.text = option.text, ""
        option.widget.style().drawControl(QStyle.ControlElement.CE_ItemViewItem, option, painter, option.widget)
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        title_font, small_font = self._fonts(option.font)
        rect = option.rect.adjusted(PADDING, PADDING // 2, -PADDING, -PADDING // 2)
        title_height = QFontMetrics(title_font).height()
        painter.save()
        painter.setPen(option.palette.highlightedText().color() if selected else option.palette.text().color())
        painter.setFont(title_font)
        painter.drawText(QRect(rect.left(), rect.top(), rect.width(), title_height), Qt.AlignmentFlag.AlignLeft,
                         QFontMetrics(title_font).elidedText(title, Qt.TextElideMode.ElideRight, rect.width()))
        if not selected:
            painter.setPen(option.palette.placeholderText().color())
        painter.setFont(small_font)
        painter.drawText(QRect(rect.left(), rect.top() + title_height, rect.width(), rect.height() - title_height),
                         Qt.AlignmentFlag.AlignLeft, QFontMetrics(small_font).elidedText(
                             index.data(SUBTITLE) or "", Qt.TextElideMode.ElideRight, rect.width()))
        painter.restore()

    def sizeHint(self, option, index) -> QSize:  # noqa: N802 (Qt's name)
        title_font, small_font = self._fonts(option.font)
        height = QFontMetrics(title_font).height() + QFontMetrics(small_font).height() + PADDING
        return QSize(option.rect.width(), height)

    @staticmethod
    def _fonts(base: QFont) -> tuple[QFont, QFont]:
        title, small = QFont(base), QFont(base)
        title.setWeight(QFont.Weight.DemiBold)
        small.setPointSizeF(max(6.0, base.pointSizeF() - 1))
        return title, small


class ChatList(QListWidget):
    """The list of chats; its highlight is the chat on screen, so a right-click (a menu for another chat) leaves it."""

    def mousePressEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        if event.button() == Qt.MouseButton.RightButton:
            event.accept()  # the context menu still opens: Qt sends it as its own event
            return
        super().mousePressEvent(event)


class HistoryPanel(QWidget):
    chat_chosen = Signal(int)  # chat id: the user clicked a chat to reopen it
    status_posted = Signal(str)  # a one-line result for the status bar (an export written or failed)

    def __init__(self, preferences: QSettings | None = None, parent=None):
        """`preferences` keeps the folder of the last export (as the window's Export does). The chats come from
        a library (`set_library`: the chat controller) that lists, renames, deletes and exports them."""
        super().__init__(parent)
        self.library = None
        self.preferences = preferences
        self.current_id: int | None = None
        self.list = ChatList()
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.setItemDelegate(ChatDelegate(self.list))
        self.list.setUniformItemSizes(True)
        self.list.setToolTip("Click a chat to reopen it; right-click to rename, export or delete it")
        self.empty = QLabel(EMPTY)  # a wrapped label: as a list item the text was cut at the dock's width
        self.empty.setWordWrap(True)
        self.empty.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.empty.setMargin(PADDING)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.list)
        layout.addWidget(self.empty)
        self.setMinimumWidth(140)
        self.list.itemClicked.connect(self.on_item_clicked)
        self.list.customContextMenuRequested.connect(self.on_context_menu_requested)
        self.refresh()

    def set_library(self, library) -> None:
        self.library = library
        self.refresh()

    def refresh(self, current_id: int | None = None) -> None:
        """Reload the list from the database and highlight the chat on screen (if it is saved yet)."""
        self.current_id = current_id
        chats = self.library.list_chats() if self.library is not None else []
        if chats is None:  # unreadable: the list stays as it was (the library said why)
            return
        self.list.clear()
        for chat in chats:
            self.list.addItem(self._item(chat))
            if chat.id == current_id:
                self.list.setCurrentRow(self.list.count() - 1)
        empty = self.list.count() == 0  # first run, or everything deleted: say what will appear here
        self.list.setHidden(empty)
        self.empty.setHidden(not empty)

    def rename_chat(self, chat_id: int, title: str) -> None:
        self.library.rename_chat(chat_id, title)

    def delete_chat(self, chat_id: int) -> None:
        self.library.delete_chat(chat_id)

    def export_chat(self, chat_id: int, base: Path) -> list[Path]:
        """Export a saved chat as the window exports the one on screen (JSON and CSV; no chart image)."""
        return self.library.export_chat(chat_id, base)

    # -- user actions --------------------------------------------------------------------------------------

    def _item(self, chat) -> QListWidgetItem:
        """`chat`: a ChatSummary (app/chat/store.py)."""
        replies = f"{chat.n_replies or 'no'} repl{'y' if chat.n_replies == 1 else 'ies'}"
        item = QListWidgetItem(chat.title or "Untitled chat")
        item.setData(CHAT_ID, chat.id)
        item.setData(SUBTITLE, f"{when(chat.updated_at)} · {replies}")
        item.setToolTip(f"{chat.title}\nstarted {chat.created_at.astimezone():%Y-%m-%d %H:%M}")
        return item

    def on_item_clicked(self, item: QListWidgetItem) -> None:
        self.chat_chosen.emit(item.data(CHAT_ID))

    def on_context_menu_requested(self, pos) -> None:
        item = self.list.itemAt(pos)
        if item is not None:
            self.chat_menu(item).exec(self.list.viewport().mapToGlobal(pos))

    def chat_menu(self, item: QListWidgetItem) -> QMenu:
        chat_id = item.data(CHAT_ID)
        menu = QMenu(self)
        menu.addAction("Open", lambda: self.chat_chosen.emit(chat_id))
        menu.addAction("Rename…", lambda: self._ask_rename(chat_id, item.text()))
        menu.addAction("Export…", lambda: self._ask_export(chat_id, item.text()))
        menu.addSeparator()
        menu.addAction("Delete…", lambda: self._ask_delete(chat_id, item.text()))
        return menu

    def _ask_rename(self, chat_id: int, title: str) -> None:
        dialog = QInputDialog(self)
        dialog.setWindowTitle("Rename chat")
        dialog.setLabelText("Title:")
        dialog.setTextValue(title)
        # QInputDialog's own width leaves most of a chat's title out of view; the dialog grows with the title up to
        # a reasonable width, and a longer title scrolls in it.
        width = dialog.fontMetrics().horizontalAdvance(title) + 80
        dialog.resize(min(640, max(360, width)), dialog.sizeHint().height())
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.textValueSelected.connect(lambda new_title: self.rename_chat(chat_id, new_title))
        dialog.open()

    def _ask_export(self, chat_id: int, title: str = "") -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export chat", str(export_folder(self.preferences) /
                                                                       f"{file_stem(title)}.json"),
                                              "Chat: NAME.json and NAME.csv (every round), NAME-positions.csv "
                                              "(acceptance by draft position) and NAME.md (transcript) (*.json)")
        if not path:
            return
        try:
            written = self.export_chat(chat_id, Path(path))
        except ExportError as exc:
            self.status_posted.emit(f"Export failed, nothing written: {exc}")
            QMessageBox.warning(self, "Export failed", f"Nothing was written: {exc}")
            return
        remember_export_folder(self.preferences, written[0])
        self.status_posted.emit(written_said(written))

    def _ask_delete(self, chat_id: int, title: str) -> None:
        # No is the default: Enter after a click that missed its menu item (Export… sits beside it) keeps the chat
        answer = QMessageBox.question(self, "Delete chat", f"Delete “{title}” and all its replies?",
                                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                                      QMessageBox.StandardButton.No)
        if answer == QMessageBox.StandardButton.Yes:
            self.delete_chat(chat_id)
