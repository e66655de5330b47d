"""Find the best draft: the Model pair pane's button (the kind of prompts measured in its menu), which turns into Stop with
the measurement's progress while it runs, and the ranking it ends with, in a dialog that stays open beside the
chat. The measuring itself is app/pair/library.py's, on its own thread."""
from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QActionGroup
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QHeaderView, QLabel, QMenu, QSizePolicy, QTableWidget,
                               QTableWidgetItem, QToolButton, QVBoxLayout)

from engine.benchmark.ranking import KINDS, LOOKUP, NONE, Ranking, clearly_best, sureness

RANKING_COLUMNS = ("draft", "measured", "predicted", "α", "tokens/round", "draft step ms", "target step ms",
                   "how sure")
NAMES = {LOOKUP: "lookup only (copying)", NONE: "none (plain AR)"}
FIND = "Find best draft"
FASTER = 1.005  # a measured speedup that reads as more than 1.00x


def same_model(a: str, b: str) -> bool:
    """Whether two names are one model: the same file (links and ~ followed), or the same LOOKUP / NONE."""
    return a == b or os.path.realpath(os.path.expanduser(a)) == os.path.realpath(os.path.expanduser(b))


def draft_name(draft: str) -> str:
    """A candidate as the ranking names it: a model's file or folder name, or what copying and none are."""
    return NAMES.get(draft) or Path(draft).name


class DraftFinder(QToolButton):
    """Find the best draft, with the kind of prompts measured in its menu; `stop_requested` while a pick runs,
    `find_requested` else."""

    find_requested = Signal(str)  # the kind of prompts
    stop_requested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setText(FIND)
        self.setToolTip("Measure each draft that fits the target, copying only and no draft on a few short prompts "
                        "(code, or chat from the arrow's menu), on this machine, and rank them by their speed over "
                        "plain AR. It takes a minute at most, loading the models included, and less where one draft "
                        "is soon clearly best. Send waits meanwhile: a reply beside it would slow both and skew "
                        "what it measures")
        self.setPopupMode(QToolButton.ToolButtonPopupMode.MenuButtonPopup)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        # its text's margins may go first: beside Load pair it fits the side pane's least width
        self.setMinimumWidth(self.fontMetrics().horizontalAdvance(FIND + "  ") + 14)
        menu = QMenu(self)
        kinds = QActionGroup(self)
        for kind in KINDS:
            action = menu.addAction(f"on {kind} prompts")
            action.setCheckable(True)
            action.setData(kind)
            kinds.addAction(action)
        kinds.actions()[0].setChecked(True)
        # choosing a kind measures it at once (the button then measures the kind last chosen)
        kinds.triggered.connect(lambda action: self.running or self.find_requested.emit(action.data()))
        self.kinds = kinds
        self.setMenu(menu)
        self.running = False
        self.clicked.connect(self._on_clicked)

    @property
    def kind(self) -> str:
        return self.kinds.checkedAction().data()

    def _on_clicked(self) -> None:
        if self.running:
            self.setText("Stopping…")
            self.setEnabled(False)
            self.stop_requested.emit()
        else:
            self.find_requested.emit(self.kind)

    def on_pick_started(self) -> None:
        self.running = True
        self.menu().setEnabled(False)
        self.setText("Stop")

    def on_pick_progressed(self, done: int, total: int) -> None:
        if self.isEnabled():
            self.setText(f"Stop {done}/{total}")

    def on_pick_ended(self) -> None:
        self.running = False
        self.menu().setEnabled(True)
        self.setEnabled(True)
        self.setText(FIND)


def ranking_table(ranking: Ranking) -> QTableWidget:
    table = QTableWidget(len(ranking.picks), len(RANKING_COLUMNS))
    table.setHorizontalHeaderLabels(list(RANKING_COLUMNS))
    table.verticalHeader().setVisible(False)
    table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
    for r, pick in enumerate(ranking.picks):
        figures = (pick.measured_speedup, pick.predicted_speedup, pick.alpha, pick.tokens_per_round,
                   pick.draft_step_ms, pick.target_step_ms)
        formats = ("{:.2f}x", "{:.2f}x", "{:.2f}", "{:.2f}", "{:.1f}", "{:.1f}")
        cells = [draft_name(pick.draft)] + ["" if value is None else spec.format(value)
                                            for value, spec in zip(figures, formats)] + [sureness(pick)]
        tips = [pick.draft] + cells[1:]
        if pick.problem:
            cells[1] = tips[1] = pick.problem
        elif pick.note:  # a figure that is not fair is not shown, nor ranked: the row says why
            cells[1], tips[1] = pick.note, f"{pick.note} (measured {pick.measured_speedup:.2f}x)"
        for c, text in enumerate(cells):
            item = QTableWidgetItem(text)
            item.setToolTip(tips[c])
            if c:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            table.setItem(r, c, item)
    table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    table.setWordWrap(False)
    return table


class RankingDialog(QDialog):
    """The drafts for a target, best measured speedup first; its Use button asks for the winner in the draft box
    (`use_requested`: a draft's path, pick_draft.LOOKUP, or NONE), which Load pair then loads."""

    use_requested = Signal(str)

    def __init__(self, ranking: Ranking, parent=None, loaded: tuple[str, str] | None = None):
        """`loaded`: the pair loaded now, (its target's path, its draft: a path, LOOKUP or NONE)."""
        super().__init__(parent)
        self.setWindowTitle("The best draft")
        best = ranking.best
        pays = best.draft != NONE and best.measured_speedup >= FASTER
        winner = best.draft if pays else NONE
        verdict = (f"{draft_name(best.draft)} pays most: {best.measured_speedup:.2f}x plain AR's speed here "
                   f"({sureness(best)})." if pays
                   else "Nothing was measured faster than plain AR here: load the target with no draft.")
        if ranking.seconds is not None and not clearly_best(ranking.picks):  # its time ran out first
            verdict += (" Not clearly ahead of the next yet: the time ran out first; measure again for a surer "
                        "ranking.")
        took = f" in {ranking.seconds:.0f} s (loading the models included)" if ranking.seconds else ""
        self.note = note = QLabel(f"Drafts for {Path(ranking.target).name}, measured on {ranking.kind} prompts on "
                      f"{ranking.machine}, {ranking.measured_on}{took}. {verdict} Measured: over plain AR on the same "
                      f"prompts, turn by turn; how sure: the replies measured and the band the speedup lies in "
                      f"(about 95 % sure); predicted: the cost model's figure for the same rounds. Kept, and shown "
                      f"in the draft list.")
        note.setWordWrap(True)
        self.table = ranking_table(ranking)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        self.use_button = buttons.addButton(f"Use {draft_name(winner)}", QDialogButtonBox.ButtonRole.AcceptRole)
        self.use_button.setToolTip("Put it in the draft box; Load pair then loads it")
        self.use_button.clicked.connect(lambda: (self.use_requested.emit(winner), self.close()))
        if loaded is not None and same_model(loaded[0], ranking.target) and same_model(loaded[1], winner):
            self.use_button.setText(f"{draft_name(winner)} is loaded")
            self.use_button.setToolTip("The pair loaded now already drafts so")
            self.use_button.setEnabled(False)
        layout = QVBoxLayout(self)
        layout.addWidget(note)
        layout.addWidget(self.table)
        layout.addWidget(buttons)
        # the table whole, each name on one line, no empty rows below it
        table = self.table
        table.resizeColumnsToContents()
        width = sum(table.horizontalHeader().sectionSize(c) for c in range(len(RANKING_COLUMNS)))
        height = table.horizontalHeader().height() + sum(table.rowHeight(r) for r in range(table.rowCount()))
        table.setFixedHeight(height + 2 * table.frameWidth())
        self.resize(width + 2 * table.frameWidth() + 24, self.sizeHint().height())

    def rows(self) -> list[list[str]]:
        return [[self.table.item(r, c).text() for c in range(self.table.columnCount())]
                for r in range(self.table.rowCount())]
