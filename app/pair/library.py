"""The models on this machine for the window: the library scanned (engine.models.library) and the best draft found
(engine.benchmark.pick_draft), each on a thread of its own so that neither blocks the window, and the folders the
user added kept in the settings.

`ModelLibrary` lives on the GUI thread: it takes the pane's commands and reports plain records (ModelRecord,
Ranking, progress counts); its workers never see a widget.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, QSettings, QThread, Signal, Slot

from engine.benchmark import pick_draft as picking
from engine.benchmark import ranking as ranked
from engine.models import library

FOLDERS_KEY = "library/folders"


@dataclass(frozen=True)
class PickRequest:
    target: str
    candidates: tuple[str, ...]  # model paths, ranked.LOOKUP, ranked.NONE
    kind: str
    device: str
    dtype: str
    weights: str


def kept_summaries(target: str, device: str, dtype: str) -> dict[str, str]:
    """Each candidate's kept measurement for `target` on this machine (summary_line), by its real path (LOOKUP and
    NONE as they are); of two kinds of prompts, the later measurement."""
    source = picking.ranking_source(target)
    rankings = [r for kind in ranked.KINDS
                if source is not None and (r := ranked.kept_ranking(picking.ranking_file(source, kind, device, dtype)))]
    lines = {}
    for ranking in sorted(rankings, key=lambda r: r.measured_on):
        for pick in ranking.picks:
            key = pick.draft if pick.draft in (ranked.LOOKUP, ranked.NONE) else os.path.realpath(pick.draft)
            lines[key] = ranked.summary_line(pick, ranking)
    return lines


class LibraryScanner(QObject):
    """Scans the stores and reads kept measurements, on its own thread."""

    scanned = Signal(object)  # tuple[ModelRecord, ...]
    summaries_read = Signal(str, object)  # target, {draft: summary line}

    @Slot(object)
    def on_scan_requested(self, folders: tuple[str, ...]) -> None:
        self.scanned.emit(tuple(library.scan(folders)))

    @Slot(str, str, str)
    def on_summaries_requested(self, target: str, device: str, dtype: str) -> None:
        try:
            lines = kept_summaries(target, device, dtype)
        except (OSError, ValueError):  # a target that is no model here: nothing measured for it
            lines = {}
        self.summaries_read.emit(target, lines)


class DraftPicker(QObject):
    """Runs a pick on its own thread, within pick_draft's time budget; `request_stop` (called from the GUI thread)
    ends it between two rounds of the reply in progress, so Stop and quitting are heard within a round."""

    progressed = Signal(int, int, str)  # replies done, about how many in all (pick_draft.Progress), what ran
    picked = Signal(object)  # Ranking, kept
    stopped = Signal()
    failed = Signal(str)

    def __init__(self):
        super().__init__()
        self._stop = threading.Event()

    def request_stop(self) -> None:
        self._stop.set()

    def rearm(self) -> None:
        """Before a new pick is queued (on the GUI thread: a quit that comes before the pick starts still stops it)."""
        self._stop.clear()

    def _progress(self, done: int, total: int, what: str) -> None:
        self.progressed.emit(done, total, what)
        if self._stop.is_set():
            raise picking.PickStopped

    @Slot(object)
    def on_pick_requested(self, request: PickRequest) -> None:
        from app.chat.worker import user_message

        try:
            started = time.monotonic()
            picks = picking.pick_draft(request.target, list(request.candidates), picking.prompts_of(request.kind),
                                       device=request.device, dtype=request.dtype, weights=request.weights,
                                       progress=self._progress, stop=self._stop)
            ranking = picking.new_ranking(request.target, request.kind, picks, time.monotonic() - started)
            source = picking.ranking_source(request.target)
            if source is not None:
                ranked.keep(ranking, picking.ranking_file(source, request.kind, request.device, request.dtype))
        except picking.PickStopped:
            self.stopped.emit()
            return
        except Exception as exc:  # noqa: BLE001 - a failed pick is one line in the window, never a traceback
            self.failed.emit(user_message(exc))
            return
        self.picked.emit(ranking)


class ModelLibrary(QObject):
    """The library's controller: which folders are scanned besides the stores, the records last scanned, and the
    pick in progress."""

    scan_requested = Signal(object)  # folders
    summaries_requested = Signal(str, str, str)  # target, device, dtype
    pick_requested = Signal(object)  # PickRequest
    library_changed = Signal(object)  # tuple[ModelRecord, ...]
    summaries_changed = Signal(str, object)  # target, {draft: line}
    pick_started = Signal()
    pick_progressed = Signal(int, int, str)
    pick_finished = Signal(object)  # Ranking
    pick_stopped = Signal()
    pick_failed = Signal(str)
    model_opened = Signal(object)  # ModelRecord: File ▸ Open model…'s, usable
    notice_posted = Signal(str)  # one line for the status bar

    def __init__(self, preferences: QSettings | None = None, parent: QObject | None = None):
        super().__init__(parent)
        self.preferences = preferences
        self.records: tuple[library.ModelRecord, ...] = ()
        self.picking = False
        self._scanning = self._rescan = False
        self._added: list[str] = []  # folders added since the last scan ended: its end says what each holds
        self.scanner, self.picker = LibraryScanner(), DraftPicker()
        self.threads = (QThread(), QThread())
        for worker, thread, name in zip((self.scanner, self.picker), self.threads, ("library-scan", "draft-pick")):
            thread.setObjectName(name)
            worker.moveToThread(thread)
        self.scan_requested.connect(self.scanner.on_scan_requested)
        self.summaries_requested.connect(self.scanner.on_summaries_requested)
        self.pick_requested.connect(self.picker.on_pick_requested)
        self.scanner.scanned.connect(self.on_scanned)
        self.scanner.summaries_read.connect(self.summaries_changed)
        self.picker.progressed.connect(self.pick_progressed)
        self.picker.picked.connect(self.on_picked)
        self.picker.stopped.connect(self.on_pick_stopped)
        self.picker.failed.connect(self.on_pick_failed)

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def shutdown(self) -> None:
        """Stop a pick (within a round: the app's exit waits for its thread) and join the threads."""
        self.picker.request_stop()
        for thread in self.threads:
            thread.quit()
            thread.wait()

    @property
    def folders(self) -> tuple[str, ...]:
        if self.preferences is None:
            return ()
        value = self.preferences.value(FOLDERS_KEY, [])
        return tuple([value] if isinstance(value, str) else value or [])

    # -- commands -----------------------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Scan again; a request while a scan runs is one more scan after it."""
        if self._scanning:
            self._rescan = True
            return
        self._scanning = True
        self.scan_requested.emit(self.folders)

    def add_folder(self, folder: str) -> None:
        if self.preferences is not None and folder not in self.folders:
            self.preferences.setValue(FOLDERS_KEY, [*self.folders, folder])
        self.notice_posted.emit(f"Models folder added: {folder}; scanning it")
        self._added.append(folder)
        self.refresh()

    def open_model(self, path: str) -> library.ModelRecord | None:
        """File ▸ Open model…: the record of one file or folder, listed with the others; None, with its problem in
        one line, where it cannot be used."""
        try:
            record = library.read(path)
        except OSError as exc:
            self.notice_posted.emit(f"Cannot open {path}: {exc.strerror or exc}")
            return None
        if record.problem:
            self.notice_posted.emit(f"{record.name} cannot be used: {record.problem}")
            return None
        if all(os.path.realpath(r.path) != os.path.realpath(record.path) for r in self.records):
            self.records = (*self.records, record)
            self.library_changed.emit(self.records)
        self.model_opened.emit(record)
        return record

    def read_summaries(self, target: str, device: str, dtype: str) -> None:
        self.summaries_requested.emit(target, device, dtype)

    def pick(self, request: PickRequest) -> None:
        if self.picking:
            return
        self.picking = True
        self.picker.rearm()
        self.pick_started.emit()
        self.pick_requested.emit(request)

    def stop_pick(self) -> None:
        self.picker.request_stop()

    # -- the workers' reports -----------------------------------------------------------------------------------

    @Slot(object)
    def on_scanned(self, records: tuple) -> None:
        self._scanning = False
        self.records = records
        self.library_changed.emit(records)
        if self._rescan:
            self._rescan = False
            self.refresh()
            return
        for folder in self._added:  # the models listed from it, as the scan found their paths
            inside = [r for r in records if Path(os.path.abspath(r.path)).is_relative_to(os.path.abspath(folder))]
            unusable = sum(1 for r in inside if r.problem)
            self.notice_posted.emit(f"Models folder {folder}: {len(inside)} model{'s' * (len(inside) != 1)} "
                                    f"listed from it" + (f", {unusable} of them greyed: it cannot be used "
                                                         f"(hover for why)" if unusable else ""))
        self._added = []

    @Slot(object)
    def on_picked(self, ranking: ranked.Ranking) -> None:
        self.picking = False
        self.pick_finished.emit(ranking)

    @Slot()
    def on_pick_stopped(self) -> None:
        self.picking = False
        self.pick_stopped.emit()

    @Slot(str)
    def on_pick_failed(self, message: str) -> None:
        self.picking = False
        self.pick_failed.emit(message)

