"""The main window's menu bar: File, Chat, Model, View and Help, their entries' shortcuts, and the Help menu's
windows (ui/window/guide.py) opened beside the window. The entries call the window's commands and the panes' own."""
from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu, QMessageBox

from ui.window.guide import GuideDialog, about_box, menu_shortcuts, shortcuts_box, user_guide


class WindowMenus(QObject):
    """Builds `window`'s menus (ui.window.main_window.MainWindow's, which this module does not import: it imports
    this one); keeps the entries the window enables and disables, and the Help menu's windows."""

    def __init__(self, window: QMainWindow):
        super().__init__(window)
        self.window = window
        self.help_box: QMessageBox | None = None
        self.guide: GuideDialog | None = None
        bar = window.menuBar()
        file_menu = bar.addMenu("&File")
        picker = window.picker
        self._action(file_menu, "&Open model…", QKeySequence.StandardKey.Open, picker.ask_model_file).setStatusTip(
            "A GGUF file or a model folder, as the target")
        self._action(file_menu, "Add models &folder…", "", picker.ask_folder).setStatusTip(
            "A folder of models, kept and listed in the Model pair pane from now on")
        file_menu.addSeparator()
        self._action(file_menu, "&Export chat…", "Ctrl+E", window.export_dialog)
        file_menu.addSeparator()
        self._action(file_menu, "&Quit", "Ctrl+Q", window.close)
        chat_menu = bar.addMenu("&Chat")
        self._action(chat_menu, "&Send", "Ctrl+Return", window.message_box.submit)
        self._action(chat_menu, "S&top", "Esc", window.stop)
        self._action(chat_menu, "&New chat", "Ctrl+N", window.new_chat)
        chat_menu.addSeparator()
        pane = window.chat_pane
        chat_menu.addActions([pane.copy_action, pane.regenerate_action, pane.edit_action, pane.continue_action])
        self._action(chat_menu, "S&ystem prompt…", "", pane.ask_system_prompt)
        chat_menu.addSeparator()
        self.compare_drafters_action = self._action(chat_menu, "Compare &drafters…", "Ctrl+Shift+D",
                                                    window.compare_drafters)
        self.compare_drafters_action.setToolTip("Run the last prompt with the draft model, copying only, both, and "
                                                "plain AR on this target and settings; a table of tokens/s, α and "
                                                "tokens per round")
        self._model_menu(bar.addMenu("&Model"))
        view_menu = bar.addMenu("&View")
        history = window.history_dock.toggleViewAction()
        history.setShortcut(QKeySequence("Ctrl+H"))
        view_menu.addAction(history)
        view_menu.addAction(window.legend.trace_action)
        # A text field with the focus keeps these keys for its own text (the message box only while it has some)
        self._action(view_menu, "Scroll the chat to the to&p", "Ctrl+Home", window.chat.scroll_to_top)
        self._action(view_menu, "Scroll the chat to the &bottom", "Ctrl+End", window.chat.scroll_to_bottom)
        self._action(view_menu, "&Why this γ", "Ctrl+G", self.show_why)
        view_menu.addSeparator()
        view_menu.addActions(list(window.splitter.pane_actions.values()))
        help_menu = bar.addMenu("&Help")
        self._action(help_menu, "&User guide", "Shift+F1", self.show_guide).setEnabled(bool(user_guide()))
        self._action(help_menu, "&Keyboard shortcuts", "F1", self.show_shortcuts)
        self._action(help_menu, "&About SpecDec Studio", "", self.show_about)

    def _action(self, menu: QMenu, text: str, shortcut: str | QKeySequence.StandardKey, slot) -> QAction:
        act = QAction(text, self.window)
        act.setShortcut(QKeySequence(shortcut))
        act.triggered.connect(slot)
        menu.addAction(act)
        return act

    def _model_menu(self, menu: QMenu) -> None:
        missing = self.window.vllm_missing
        # a disabled item shows no tooltip in every style: the menu's text itself says why it is disabled
        self.serve_action = self._action(menu, "Serve the embedded pair on &vLLM…"
                                         + (" (vLLM not installed)" if missing else ""), "",
                                         self.window.serve_requested.emit)
        self.serve_action.setStatusTip(missing or "Start vLLM with the embedded pair and this session's tuned "
                                       "speculative config, then chat with it (ready in about 100 s)")
        self.serve_action.setToolTip(self.serve_action.statusTip())
        self.local_action = self._action(menu, "&Back to the local pair", "", self.window.local_requested.emit)
        self.local_action.setStatusTip("Chat with the local model pair again (a vLLM server started here stops)")
        menu.setToolTipsVisible(True)

    def shortcuts(self) -> list[tuple[str, str]]:
        return menu_shortcuts(self.window.menuBar())

    def show_why(self) -> None:
        """The "why this γ" tab, its pane brought back if it was hidden."""
        self.window.splitter.pane_actions["right"].setChecked(True)
        self.window.analysis.chart_tabs.setCurrentIndex(self.window.analysis.why_tab)

    def show_shortcuts(self) -> None:
        self.help_box = shortcuts_box(self.shortcuts(), self.window)

    def show_guide(self) -> None:
        """The README in a window of its own beside the chat: what each colour, chart and number means."""
        self.guide = GuideDialog(user_guide(), self.window)
        self.guide.resize(min(900, self.window.width()), min(800, self.window.height()))
        self.guide.show()

    def show_about(self) -> None:
        self.help_box = about_box(self.window)
