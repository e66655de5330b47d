"""Compare drafters' dialog: the last prompt's runs with each drafting choice in a table, and a note on what to read
it by (how many runs each row is the fastest of, how far apart they were, the machine's speed since the last table)."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QTableWidget, QTableWidgetItem, QVBoxLayout

from engine.events import Drafting
from words.records import DrafterComparison

# A Compare drafters whose plain AR ran this much slower undrawn than the chat's drawn plain AR reply says so
AR_SLOWER = 0.95
DRAFTER_COLUMNS = ("drafters", "tokens", "tokens/s", "α", "tokens/round", "vs plain AR", "runs apart")


def drafters_table(comparison: DrafterComparison) -> QTableWidget:
    rows = comparison.rows()
    table = QTableWidget(len(rows), len(DRAFTER_COLUMNS))
    table.setHorizontalHeaderLabels(list(DRAFTER_COLUMNS))
    table.verticalHeader().hide()
    table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
    for r, row in enumerate(rows):
        if row["skipped"] or (row["stopped"] and not row["tokens"]):
            cells = [row["skipped"] or "stopped", "", "", "", "", ""]
        else:
            # a drafting that drafted nothing ran plain target steps, plain AR's work: its ratio to the AR row is
            # one run's spread (0.72-1.14× seen), no speedup; its tokens/s stands
            idle = row["drafting"] != Drafting.NONE.value and not row["drafted"]
            vs_ar = ("plain AR's work (drafted nothing)" if idle else "" if row["vs_ar"] is None
                     else f"{row['vs_ar']:.2f}×" + (" (not fair: above its tok/round)" if row["beyond_rounds"] else ""))
            cells = [str(row["tokens"]), f"{row['tokens_per_s']:.1f}",
                     "—" if row["alpha"] is None else f"{row['alpha']:.2f}", f"{row['tokens_per_round']:.2f}", vs_ar,
                     # how much faster the kept run was than the slowest: a difference between rows under it is noise
                     f"{row['spread']:.0%}" if row["runs"] > 1 else "—"]
        name = Drafting(row["drafting"]).label + (" (stopped)" if row["stopped"] and row["tokens"] else "")
        for c, text in enumerate([name, *cells]):
            item = QTableWidgetItem(text)
            if c:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            table.setItem(r, c, item)
    table.resizeColumnsToContents()
    table.resizeRowsToContents()
    # every row in view: the table is as tall as its rows (four at most), the dialog as tall as it and the note
    table.setMinimumHeight(table.horizontalHeader().sizeHint().height() + 2 * table.frameWidth()
                           + sum(table.rowHeight(r) for r in range(table.rowCount())))
    return table


def _passes_said(comparison: DrafterComparison) -> str:
    """How many runs each row is the fastest of, and how far apart runs of the same work were."""
    rows = comparison.rows()
    passes = max((row["runs"] for row in rows), default=1)
    if passes == 1:
        return "One run each: on a machine with few cores runs of the same work differ by tens of per cent."
    spread = max(row["spread"] for row in rows)
    return (f"Each drafting ran {passes} times, all of them in turn, and its row is its fastest run, the one the "
            f"machine slowed least; runs of the same work here were up to {spread:.0%} apart.")


def nothing_drafted_said(comparison: DrafterComparison) -> str:
    """Where no drafting drafted anything, that the table ranks nothing: every row did plain AR's work ("" else)."""
    rows = [row for row in comparison.rows() if row["drafting"] != Drafting.NONE.value and not row["skipped"]]
    if not rows or any(row["drafted"] for row in rows):
        return ""
    return ("On this prompt no drafting drafted anything: every row did plain AR's work, so the table ranks none of "
            "them, and its tokens/s differ only as runs of the same work do (runs apart). A prompt the reply can copy "
            "from, or a longer reply, gives the drafts something to win. ")


def again_said(comparison: DrafterComparison, previous: DrafterComparison | None) -> str:
    """Against the chat's last Compare drafters of the same prompt and settings: how far each drafting's tokens/s
    moved between the two, and whether the rows rank alike by them ("" where there is no such run to read it by)."""
    def speeds(table: DrafterComparison) -> dict[str, float]:
        return {row["drafting"]: row["tokens_per_s"] for row in table.rows()
                if not row["skipped"] and not row["stopped"] and row["tokens"]}

    now, before = speeds(comparison), speeds(previous) if previous is not None else {}
    both = [drafting for drafting in now if before.get(drafting)]
    if len(both) < 2:
        return ""
    moved = max(abs(now[d] / before[d] - 1) for d in both)
    alike = sorted(both, key=now.get) == sorted(both, key=before.get)
    ranking = ("the rows rank alike in both, so their order is what to act on, not the size of their figures"
               if alike else "the rows rank differently in the two, so neither order is sure on this machine")
    return (f" Against this chat's last Compare drafters of the same prompt and settings, a drafting's tokens/s moved "
            f"up to {moved:.0%} (this machine's speed between the two, more than runs within one need show); "
            f"{ranking}.")


def drawn_ar_said(comparison: DrafterComparison, drawn_ar_tokens_per_s: float) -> str:
    """Where the table's plain AR ran slower undrawn than the chat's plain AR reply to the same prompt ran drawn
    (drawing only ever adds work): that the machine was slower, and what to read the rows against."""
    ar = next((row["tokens_per_s"] for row in comparison.rows()
               if row["drafting"] == Drafting.NONE.value and row["tokens"] and not row["stopped"]), 0.0)
    if not ar or not drawn_ar_tokens_per_s or ar >= AR_SLOWER * drawn_ar_tokens_per_s:
        return ""
    return (f" Plain AR ran {ar:.1f} tok/s here, undrawn, against {drawn_ar_tokens_per_s:.1f} tok/s as this chat's "
            "reply to the same prompt, drawn: this machine ran slower during the table than then, so read each row "
            "against the table's own plain AR, run seconds from it, not against that reply.")


class DraftersDialog(QDialog):
    """The table and what to read it by; it stays open beside the chat."""

    def __init__(self, comparison: DrafterComparison, parent=None, previous: DrafterComparison | None = None,
                 drawn_ar_tokens_per_s: float = 0.0):
        """`previous`: the chat's last one of the same prompt and settings; `drawn_ar_tokens_per_s`: the chat's
        plain AR reply to it, drawn (0: none)."""
        super().__init__(parent)
        self.setWindowTitle("Compare drafters")
        layout = QVBoxLayout(self)
        settings = comparison.request.settings
        rule = ("cost-aware draft length" if settings.cost_aware
                else "γ drafts every round" if not settings.stop_below
                else f"draft length by the confidence stop (below {settings.stop_below:.2f})")
        self.note = QLabel(f"{nothing_drafted_said(comparison)}The last prompt on this target, "
                           f"{'greedy' if settings.greedy else 'sampling'}, "
                           f"γ ≤ {settings.gamma}, {rule}, {settings.max_new_tokens} tokens at most; each drafting "
                           "starts from the acceptance this chat's rounds measured, with no cached prompt. "
                           f"{_passes_said(comparison)}{again_said(comparison, previous)}"
                           f"{drawn_ar_said(comparison, drawn_ar_tokens_per_s)} A row that drafted nothing did "
                           "plain AR's work: its rounds judged that no draft would pay for itself at the costs timed "
                           "for it. A speedup above a row's tokens per round is not fair: each round costs a plain "
                           "step at least, so its run and plain AR's met the machine differently; it is not drawn "
                           "in the why tab.")
        self.note.setWordWrap(True)
        layout.addWidget(self.note)
        self.table = table = drafters_table(comparison)
        layout.addWidget(table)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        layout.addWidget(buttons)
        columns = sum(table.columnWidth(c) for c in range(table.columnCount()))
        margins = layout.contentsMargins()
        wide = (table.verticalHeader().sizeHint().width() + columns + 2 * table.frameWidth() + margins.left()
                + margins.right() + table.verticalScrollBar().sizeHint().width())
        width = max(520, wide)  # every column in view, "vs plain AR" the last
        self.resize(width, max(self.heightForWidth(width), self.minimumSizeHint().height()))
