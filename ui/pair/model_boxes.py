"""The Model pair pane's target and draft boxes: editable lists of the models on this machine (engine.models.library's
records, read by app/pair/library.py off the GUI thread). A typed hub id or path still works; a model the studio
cannot use is listed greyed with its reason on hover, and for a known target the draft box holds only the models
that can draft for it (smallest first), then copying only and no draft, then the others greyed with why not."""
from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox

from engine.benchmark.ranking import LOOKUP, NONE
from engine.models.library import DraftChoice, ModelRecord, compatible_drafts, find, row

# What the draft box's text is for each special choice: the load request's draft (app/chat/worker.py reads LOOKUP;
# an empty draft is None, plain AR only)
SPECIAL_DRAFTS = {LOOKUP: ("lookup only: copying from the conversation", LOOKUP),
                  NONE: ("none: plain AR only", "")}
PATH_ROLE = Qt.ItemDataRole.UserRole
NAME_MARGIN = 6  # px a line edit keeps beside its text, and its cursor's width


def entry_text(record: ModelRecord) -> str:
    """One line of the list: name, then architecture, parameters, quantisation, size and context length."""
    columns = row(record)
    facts = " ".join(v for v in (columns["architecture"], columns["parameters"], columns["quantisation"]) if v)
    context = f"{columns['context']} ctx" if columns["context"] else ""
    return " · ".join(part for part in (record.name, facts, columns["size"], context) if part)


def entry_tooltip(record: ModelRecord, reason: str = "") -> str:
    """The entry's details and where it lives; first, why it cannot be chosen where it cannot."""
    columns = row(record)
    lines = [reason] if reason else []
    lines += [f"{record.name} ({record.store})", record.path,
              ", ".join(f"{key} {columns[key]}" for key in ("architecture", "parameters", "quantisation", "size",
                                                          "context") if columns[key])]
    return "\n".join(lines)


def listed_names(records: Sequence[ModelRecord]) -> dict[str, str]:
    """The name each model's store lists it by, by path, where no other model has that name (two LM Studio
    folders may hold files of one name: those stay known by their paths)."""
    counts = Counter(r.name for r in records)
    return {r.path: r.name for r in records if counts[r.name] == 1}


class ModelBox(QComboBox):
    """An editable list whose text is what a load is given (a path, hub id or short name), as the line edit it
    replaces: `text`, `setText`, `clear` and the text signals act on that text; choosing an entry puts its path
    there. A listed model's path is shown by its store's name (`set_names`): an Ollama blob reads
    `qwen2.5-coder:0.5b`, not `sha256-…`, while `text` still gives the path and the hover shows it."""

    textEdited = Signal(str)  # noqa: N815 (QLineEdit's names, which the picker and its callers use)
    textChanged = Signal(str)  # noqa: N815

    def __init__(self, text: str = ""):
        super().__init__()
        self._help = ""  # what setToolTip was given: the hover shows the box's whole text above it
        self._names: dict[str, str] = {}  # path -> the name shown for it
        self._paths: dict[str, str] = {}  # the name shown -> its path
        self.setEditable(True)
        self.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        # narrower than its entries (shown whole in the open list), so the side pane fits a 1000 px window
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.setMinimumContentsLength(5)  # beside its … button, no wider than the other boxes
        self.lineEdit().textEdited.connect(lambda shown: self.textEdited.emit(self._paths.get(shown, shown)))
        self.lineEdit().textChanged.connect(lambda shown: self.textChanged.emit(self._paths.get(shown, shown)))
        self.lineEdit().textChanged.connect(self._show_tip)
        self.activated.connect(self._on_activated)
        self.setText(text)

    def text(self) -> str:
        shown = self.currentText()
        return self._paths.get(shown, shown)

    def setText(self, text: str) -> None:  # noqa: N802 (QLineEdit's name)
        self.setEditText(self._names.get(text, text))
        self.show_name()

    def set_names(self, names: dict[str, str]) -> None:
        """Show these paths by these names (listed_names); the text stays the path it was and no text signal is
        sent, though a path shown by name now reads as its name."""
        text = self.text()
        self._names, self._paths = dict(names), {name: path for path, name in names.items()}
        self.lineEdit().blockSignals(True)
        self.setText(text)
        self.lineEdit().blockSignals(False)

    def setToolTip(self, tip: str) -> None:  # noqa: N802 (Qt's name)
        self._help = tip
        self._show_tip()

    def _show_tip(self) -> None:
        """A narrow box shows the start of a file name: its hover gives the whole text, then what the box is for."""
        text = self.text()
        super().setToolTip(f"{text}\n\n{self._help}" if text and self._help else text or self._help)

    def show_name(self) -> None:
        """Scroll a path's text to its file or folder name: a narrow box shows which model, not where it is. A line
        edit scrolls as it paints, the cursor at its right edge where it was out of view: the cursor goes as far
        into the name as fits the box."""
        line, text = self.lineEdit(), self.currentText()
        start = end = text.rfind(os.sep) + 1
        room = line.contentsRect().width() - NAME_MARGIN
        while end < len(text) and line.fontMetrics().horizontalAdvance(text[start:end + 1]) <= room:
            end += 1
        line.setCursorPosition(end)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        if not self.lineEdit().hasFocus():
            self.show_name()

    def clear(self) -> None:
        """The text, as QLineEdit.clear; the entries stay."""
        self.setEditText("")

    def setPlaceholderText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        self.lineEdit().setPlaceholderText(text)

    def placeholderText(self) -> str:  # noqa: N802 (Qt's name)
        return self.lineEdit().placeholderText()

    def set_entries(self, entries: Sequence[tuple[str, str, str, bool]]) -> None:
        """(text, path, tooltip, enabled) for each entry; the box's text is kept and no text signal is sent."""
        text = self.text()
        self.lineEdit().blockSignals(True)
        super().clear()
        for label, path, tooltip, enabled in entries:
            self.addItem(label, path)
            index = self.count() - 1
            self.setItemData(index, tooltip, Qt.ItemDataRole.ToolTipRole)
            if not enabled:  # greyed and not choosable, its reason on hover
                self.model().item(index).setEnabled(False)
        self.setCurrentIndex(-1)
        self.setText(text)
        self.lineEdit().blockSignals(False)
        self.view().setMinimumWidth(self.view().sizeHintForColumn(0) + 24)  # the open list shows entries whole

    def entries(self) -> list[tuple[str, str, bool]]:
        """(text, path, enabled) of each entry, as listed."""
        return [(self.itemText(i), self.itemData(i, PATH_ROLE), self.model().item(i).isEnabled())
                for i in range(self.count())]

    def _on_activated(self, index: int) -> None:
        path = self.itemData(index, PATH_ROLE)
        self.setText(path)
        self.textEdited.emit(path)


def target_entries(records: Sequence[ModelRecord]) -> list[tuple[str, str, str, bool]]:
    """Every model found, the usable ones first."""
    ordered = sorted(records, key=lambda r: bool(r.problem))
    return [(entry_text(r), r.path, entry_tooltip(r, r.problem), not r.problem) for r in ordered]


def known_target(text: str, records: Sequence[ModelRecord]) -> ModelRecord | None:
    """The record a target box's text means (a listed model, its path, or a short name the studio knows)."""
    if not text.strip() or not records:
        return None
    try:
        return find(text.strip(), records)
    except (ValueError, OSError):
        return None


def draft_entries(target: ModelRecord | None, records: Sequence[ModelRecord],
                  summaries: dict[str, str]) -> list[tuple[str, str, str, bool]]:
    """For a known target: the models that can draft for it, smallest first, copying only and no draft, then the
    others greyed with why not; for another target (a hub id) every usable model, as its tokenizer is not known
    here. `summaries`: each candidate's kept measurement (pick_draft.summary_line), by path, LOOKUP or NONE."""
    def measured(label: str, key: str) -> str:
        line = summaries.get(os.path.realpath(key) if key not in SPECIAL_DRAFTS else key)
        return f"{label} — {line}" if line else label

    if target is not None:
        choices = compatible_drafts(target, records)
        unknown = ""
    else:
        others = sorted(records, key=lambda r: (bool(r.problem), r.parameters))
        choices = [DraftChoice(r, r.problem) for r in others]
        unknown = "The target is not in the library: whether this model can draft for it is checked at load\n"
    usable = [c for c in choices if not c.reason]
    entries = [(measured(entry_text(c.model), c.model.path), c.model.path, unknown + entry_tooltip(c.model), True)
               for c in usable]
    entries += [(measured(label, key), value, label, True) for key, (label, value) in SPECIAL_DRAFTS.items()]
    entries += [(entry_text(c.model), c.model.path, entry_tooltip(c.model, c.reason), False)
                for c in choices if c.reason]
    return entries
