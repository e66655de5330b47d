"""The Model pair pane's library (ui/pair/model_boxes.py, app/pair/library.py): the models of a synthetic machine (small
GGUFs written in tmp_path, HOME pointed there) in the target and draft lists, the unusable greyed with their
reasons, File ▸ Open model…, an added folder, and Find the best draft with a fake measurement: its ranking, its
kept figure in the draft list, Stop, and the chat held while it measures."""
from __future__ import annotations

import threading

import pytest
from PySide6.QtCore import QSettings, QStandardPaths, Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QFileDialog

from engine.benchmark import pick_draft as picking
from engine.benchmark import ranking as ranked
from engine.benchmark.ranking import LOOKUP, NONE, Pick
from tests.engine.models.test_library import (TOKENS, machine, ollama_model,  # noqa: F401 (machine: a fixture)
                                              write_gguf)
from ui.pair.draft_ranking import FIND

SIGNAL_MS = 20_000


@pytest.fixture
def models(machine, tmp_path):  # noqa: F811 (the fixture imported above)
    """LM Studio's folder: a target, a smaller model of its vocabulary, one of another vocabulary, a damaged file."""
    folder = machine / ".lmstudio" / "models" / "someone" / "Tiny-GGUF"
    return {"target": write_gguf(folder / "target.gguf", layers=8),
            "small": write_gguf(folder / "small.gguf", layers=1),
            "other": write_gguf(folder / "other-vocab.gguf", layers=1, tokens=TOKENS[:-1] + ["gh"]),
            "noise": (folder / "noise.gguf", (folder / "noise.gguf").write_bytes(b"GGUF" + bytes(40)))[0]}


@pytest.fixture
def studio(qtbot, models, tmp_path, mixed_decoder):
    """The wired window of a tiny pair, its library scanned once it showed."""
    from studio.window import build

    preferences = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    built = build(mixed_decoder, preferences=preferences)
    qtbot.addWidget(built.window)
    with qtbot.waitSignal(built.library.library_changed, timeout=SIGNAL_MS):
        built.window.show()
        built.start()
    qtbot.waitUntil(lambda: built.chat.status.ready, timeout=SIGNAL_MS)
    yield built
    built.shutdown()


def entries(box) -> dict[str, tuple[str, bool, str]]:
    """Each entry by its path: (text, enabled, tooltip)."""
    return {path: (box.itemText(i), enabled, box.itemData(i, Qt.ItemDataRole.ToolTipRole))
            for i, (_, path, enabled) in enumerate(box.entries())}


def show_target(qtbot, studio, path) -> None:
    with qtbot.waitSignal(studio.library.summaries_changed, timeout=SIGNAL_MS):
        studio.window.picker.target.setText(str(path))


def test_the_target_list_holds_every_model_found_with_its_facts(studio, models):
    listed = entries(studio.window.picker.target)
    text, enabled, tooltip = listed[str(models["target"])]
    assert enabled and text.startswith("target · qwen2 ") and "Q8_0" in text and "4,096 ctx" in text
    assert "LM Studio" in tooltip
    assert {str(models[name]) for name in ("small", "other")} <= listed.keys()


def test_an_unusable_model_is_listed_greyed_with_its_reason(studio, models):
    text, enabled, tooltip = entries(studio.window.picker.target)[str(models["noise"])]
    assert not enabled and tooltip.splitlines()[0].startswith("damaged")


def test_the_draft_list_holds_the_compatible_drafts_then_lookup_and_none(qtbot, studio, models):
    show_target(qtbot, studio, models["target"])
    listed = [(path, enabled) for _, path, enabled in studio.window.picker.draft.entries()]
    assert [path for path, enabled in listed if enabled] == [str(models["small"]), LOOKUP, ""]
    assert listed[:3] == [(str(models["small"]), True), (LOOKUP, True), ("", True)]  # the usable ones first


def test_an_incompatible_draft_is_greyed_with_why_on_hover(qtbot, studio, models):
    show_target(qtbot, studio, models["target"])
    listed = entries(studio.window.picker.draft)
    assert str(models["target"]) not in listed
    _, enabled, tooltip = listed[str(models["other"])]
    assert not enabled and tooltip.startswith("vocabularies differ")


def test_choosing_a_draft_puts_its_path_in_the_box(qtbot, studio, models):
    show_target(qtbot, studio, models["target"])
    draft = studio.window.picker.draft
    draft.activated.emit(0)
    assert draft.text() == str(models["small"])


def test_an_added_models_folder_is_listed_and_kept_in_the_settings(qtbot, studio, tmp_path):
    added = write_gguf(tmp_path / "mine" / "mine.gguf", layers=2)
    with qtbot.waitSignal(studio.library.library_changed, timeout=SIGNAL_MS):
        studio.window.picker.folder_added.emit(str(added.parent))
    assert str(added) in entries(studio.window.picker.target)
    assert studio.window.preferences.value("library/folders") == [str(added.parent)]
    # the status bar says what the scan found there, not "scanning it" until the next message
    assert studio.window.statusBar().currentMessage() == f"Models folder {added.parent}: 1 model listed from it"


def open_model_action(window):
    file_menu = window.menuBar().actions()[0].menu()
    return next(a for a in file_menu.actions() if a.shortcut() == QKeySequence(QKeySequence.StandardKey.Open))


def test_ctrl_o_takes_the_opened_model_as_the_target(studio, tmp_path, monkeypatch):
    opened = write_gguf(tmp_path / "elsewhere" / "opened.gguf", layers=3)
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *_args: (str(opened), ""))
    open_model_action(studio.window).trigger()
    assert studio.window.picker.target.text() == str(opened)
    assert str(opened) in entries(studio.window.picker.target)
    assert studio.window.statusBar().currentMessage() == "opened is in the target box: Load pair loads it"


def test_ctrl_o_on_the_draft_makes_it_the_target_and_empties_the_draft_box(studio, models, monkeypatch):
    picker = studio.window.picker
    picker.draft.setText(str(models["small"]))
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *_args: (str(models["small"]), ""))
    open_model_action(studio.window).trigger()
    assert picker.target.text() == str(models["small"]) and picker.draft.text() == ""
    assert studio.window.statusBar().currentMessage() == ("small is in the target box, and the draft box is empty (a "
                                                          "model cannot draft for itself): Load pair loads them")
    picker.draft.setText(str(models["small"]))  # control: another model opened leaves the draft alone
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *_args: (str(models["target"]), ""))
    open_model_action(studio.window).trigger()
    assert picker.target.text() == str(models["target"]) and picker.draft.text() == str(models["small"])


def test_ctrl_o_says_in_one_line_why_a_model_cannot_be_used(studio, models, monkeypatch):
    before = studio.window.picker.target.text()
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *_args: (str(models["noise"]), ""))
    open_model_action(studio.window).trigger()
    assert studio.window.picker.target.text() == before
    message = studio.window.statusBar().currentMessage()
    assert message.startswith("noise cannot be used: damaged") and "\n" not in message


def fake_pick(target, candidates, prompts, *, progress, **_options):
    """Two replies reported per candidate, then each a made-up figure: the first draft 1.31x."""
    total = 2 * len(candidates)
    for done in range(1, total + 1):
        progress(done, total, "fake run")
    figures = {candidates[0]: 1.31, LOOKUP: 1.05}
    return ranked.rank([Pick(NONE, 1.0, 1.0, None, 1.0)] + [
        Pick(c, figures[c], figures[c] + 0.1, 0.6, 2.0, [0.6], 1.0, 10.0) for c in candidates if c in figures])


def pick(qtbot, studio, signal):
    with qtbot.waitSignal(signal, timeout=SIGNAL_MS):
        qtbot.mouseClick(studio.window.picker.finder, Qt.MouseButton.LeftButton)


def test_find_the_best_draft_shows_the_ranking(qtbot, studio, models, monkeypatch):
    monkeypatch.setattr(picking, "pick_draft", fake_pick)
    show_target(qtbot, studio, models["target"])
    pick(qtbot, studio, studio.library.pick_finished)
    rows = studio.window.pair_pane.ranking_dialog.rows()
    assert [row[:3] for row in rows] == [["small.gguf", "1.31x", "1.41x"], ["lookup only (copying)", "1.05x", "1.15x"],
                                         ["none (plain AR)", "1.00x", "1.00x"]]
    assert rows[0][3:5] == ["0.60", "2.00"]  # α, tokens per round
    picker = studio.window.picker
    picker.draft.setText("")
    dialog = studio.window.pair_pane.ranking_dialog
    assert dialog.use_button.text() == "Use small.gguf"
    qtbot.mouseClick(dialog.use_button, Qt.MouseButton.LeftButton)
    assert picker.draft.text() == str(models["small"]) and not dialog.isVisible()  # in the box, not loaded yet


def test_choosing_a_kind_of_prompts_in_the_finder_s_menu_measures_it(qtbot):
    from ui.pair.draft_ranking import DraftFinder

    finder = DraftFinder()
    qtbot.addWidget(finder)
    chat = next(a for a in finder.kinds.actions() if a.data() == "chat")
    with qtbot.waitSignal(finder.find_requested) as asked:
        chat.trigger()
    assert asked.args == ["chat"] and finder.kind == "chat"
    finder.on_pick_started()
    with qtbot.assertNotEmitted(finder.find_requested):  # not while a pick runs (the menu is disabled then too)
        chat.trigger()


def test_a_kept_ranking_is_shown_beside_its_draft(qtbot, studio, models, monkeypatch):
    monkeypatch.setattr(picking, "pick_draft", fake_pick)
    show_target(qtbot, studio, models["target"])
    with qtbot.waitSignal(studio.library.summaries_changed, timeout=SIGNAL_MS):
        pick(qtbot, studio, studio.library.pick_finished)
    text = entries(studio.window.picker.draft)[str(models["small"])][0]
    assert text.endswith(f"— 1.31x on code here, measured {picking.new_ranking('', 'code', []).measured_on}")


@pytest.fixture
def held_pick(monkeypatch):
    """A fake pick that reports its first reply, then waits for `release` before reporting the next."""
    release = threading.Event()

    def held(target, candidates, prompts, *, progress, **_options):
        progress(1, 24, "first reply")
        release.wait(SIGNAL_MS / 1000)
        progress(2, 24, "second reply")
        return [Pick(NONE, 1.0)]

    monkeypatch.setattr(picking, "pick_draft", held)
    return release


def test_stop_ends_a_pick_after_the_reply_in_progress(qtbot, studio, models, held_pick):
    show_target(qtbot, studio, models["target"])
    finder = studio.window.picker.finder
    pick(qtbot, studio, studio.library.pick_progressed)
    assert finder.text() == "Stop 1/24"
    qtbot.mouseClick(finder, Qt.MouseButton.LeftButton)
    with qtbot.waitSignal(studio.library.pick_stopped, timeout=SIGNAL_MS):
        held_pick.set()
    assert finder.text() == FIND and studio.window.pair_pane.ranking_dialog is None


def test_the_chat_waits_while_a_pick_measures_the_cpu(qtbot, studio, models, held_pick):
    show_target(qtbot, studio, models["target"])
    pick(qtbot, studio, studio.library.pick_progressed)
    window = studio.window
    assert not window.picker.load_button.isEnabled() and not window.send_button.isEnabled()
    window.send("w3 w7")
    assert window.statusBar().currentMessage().startswith("Find the best draft is measuring this CPU")
    assert not studio.chat.replies
    with qtbot.waitSignal(studio.library.pick_finished, timeout=SIGNAL_MS):
        held_pick.set()
    assert window.picker.load_button.isEnabled() and window.send_button.isEnabled()


def test_lookup_only_loads_the_target_with_copying_as_its_only_drafter(monkeypatch):
    from app.chat.worker import DecodeWorker
    from engine.decoding.decoder import Decoder
    from engine.decoding.drafters import LookupDrafter
    from tests.tiny import tiny_model

    asked = []
    monkeypatch.setattr(Decoder, "load", classmethod(
        lambda cls, target, draft, **_options: asked.append(draft) or cls(tiny_model(0))))
    worker = DecodeWorker()
    worker.on_load_requested("tiny", LOOKUP, "cpu", "float32", "auto")
    assert asked == [None] and isinstance(worker.decoder.drafter, LookupDrafter)


def test_a_pair_loaded_as_lookup_only_still_decodes_speculatively(qtbot, mixed_decoder):
    import dataclasses

    from engine.models.pairing import PRESETS
    from ui.window.main_window import MainWindow

    window = MainWindow(PRESETS)
    qtbot.addWidget(window)
    window.picker.draft.setText(LOOKUP)
    window.picker.request_load()
    window.on_pair_loaded(dataclasses.replace(mixed_decoder.info(), draft=None))
    assert window.controls.mode.isEnabled()


def test_a_long_path_in_a_narrow_box_shows_the_start_of_its_file_name(qtbot, studio, tmp_path):
    path = str(write_gguf(tmp_path / "models" / "a-model-whose-name-is-longer-than-the-box-q4_k_m.gguf"))
    target = studio.window.picker.target
    target.setText(path)
    line = target.lineEdit()
    line.repaint()  # where a line edit scrolls its text
    name_at = line.cursorRect().center().x() - line.fontMetrics().horizontalAdvance(
        path[path.rfind("/") + 1: line.cursorPosition()])
    assert 0 <= name_at <= 8  # the name starts at the box's left edge, its margin aside
    assert target.toolTip().startswith(path + "\n\n")  # the hover gives it whole, then what the box is for
    target.clear()
    assert target.toolTip() and not target.toolTip().startswith("\n")


def test_a_ranking_whose_best_is_no_faster_than_plain_ar_says_so(qtbot):
    from ui.pair.draft_ranking import RankingDialog

    ranking = ranked.Ranking("t.gguf", "code", "here", "2026-12-05",
                              [Pick(LOOKUP, 1.001, 1.01, 0.6, 1.02), Pick(NONE, 1.0, 1.0, None, 1.0)])
    dialog = RankingDialog(ranking)
    qtbot.addWidget(dialog)
    assert "Nothing was measured faster than plain AR here" in dialog.note.text()
    assert dialog.use_button.text() == "Use none (plain AR)"
    with qtbot.waitSignal(dialog.use_requested) as used:
        dialog.use_button.click()
    assert used.args == [NONE]
    loaded = RankingDialog(ranking, loaded=("t.gguf", NONE))  # the pair loaded now has no draft: nothing to use
    qtbot.addWidget(loaded)
    assert not loaded.use_button.isEnabled() and loaded.use_button.text() == "none (plain AR) is loaded"
    elsewhere = RankingDialog(ranking, loaded=("other.gguf", NONE))  # control: another target is loaded
    qtbot.addWidget(elsewhere)
    assert elsewhere.use_button.isEnabled()


def test_model_dialogs_open_in_the_target_s_folder_else_downloads_never_the_working_directory(studio, tmp_path,
                                                                                             monkeypatch):
    asked = []
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda _parent, _title, folder, *_args: asked.append(folder)
                        or ("", ""))
    downloads = tmp_path / "Downloads"
    downloads.mkdir()
    monkeypatch.setattr(QStandardPaths, "writableLocation", lambda _location: str(downloads))
    picker = studio.window.picker
    target = write_gguf(tmp_path / "models" / "target.gguf", layers=2)
    picker.target.setText(str(target))
    open_model_action(studio.window).trigger()
    picker.target.setText("HuggingFaceTB/SmolLM2-135M-Instruct")  # a hub id is no folder here
    open_model_action(studio.window).trigger()
    assert asked == [str(target.parent), str(downloads)]


@pytest.fixture
def ollama_draft(machine, tmp_path):  # noqa: F811 (the fixture imported above)
    """LM Studio's folder holds a target; Ollama's store a smaller model of its vocabulary, `qwen2.5-coder:0.5b`,
    kept as a blob named by its digest. The library scanned: (the records, the target, the draft's blob)."""
    from engine.models import library

    target = write_gguf(machine / ".lmstudio" / "models" / "someone" / "Tiny-GGUF" / "target.gguf", layers=8)
    blob = ollama_model(machine, "qwen2.5-coder", "0.5b", write_gguf(tmp_path / "scratch" / "coder.gguf", layers=1))
    return tuple(library.scan()), target, blob


def test_a_draft_chosen_from_ollama_s_store_is_shown_by_its_ollama_name(qtbot, ollama_draft):
    from engine.models.pairing import PRESETS
    from ui.pair.controls import ModelPicker

    records, target, blob = ollama_draft
    picker = ModelPicker(PRESETS, "", None, "auto", "auto")
    qtbot.addWidget(picker)
    picker.show_library(records)
    picker.target.setText(str(target))
    draft = picker.draft
    with qtbot.waitSignal(draft.textEdited) as edited:
        draft.activated.emit(next(i for i, (_, path, _) in enumerate(draft.entries()) if path == str(blob)))
    assert draft.lineEdit().text() == "qwen2.5-coder:0.5b"
    assert draft.text() == str(blob) and edited.args == [str(blob)]  # what a load is given is still the blob
    assert draft.toolTip().startswith(str(blob))  # the hover says where it is
    with qtbot.waitSignal(picker.load_requested) as requested:
        picker.request_load()
    assert requested.args[:2] == [str(target), str(blob)]


def test_a_draft_path_set_before_the_library_is_scanned_is_named_once_it_is(qtbot, ollama_draft):
    from engine.models.pairing import PRESETS
    from ui.pair.controls import ModelPicker

    records, target, blob = ollama_draft
    picker = ModelPicker(PRESETS, str(target), str(blob), "auto", "auto")  # as the preferences give it at start
    qtbot.addWidget(picker)
    assert picker.draft.lineEdit().text() == str(blob)
    picker.show_library(records)
    assert picker.draft.lineEdit().text() == "qwen2.5-coder:0.5b" and picker.draft.text() == str(blob)


def ollama_pair(target, blob):
    from engine.events import ModelInfo, PairInfo

    return PairInfo(ModelInfo(str(target), str(target), 100, len(TOKENS)),
                    ModelInfo(str(blob), str(blob), 50, len(TOKENS)), "cpu", "float32")


def test_the_status_line_names_an_ollama_draft_by_its_ollama_name(qtbot, ollama_draft):
    from ui.window.status import WindowStatusBar

    _, target, blob = ollama_draft
    status = WindowStatusBar()
    qtbot.addWidget(status)
    status.on_load_started(str(target), str(blob))
    status.open_progress()
    assert status.pair_label.text() == "Loading target and qwen2.5-coder:0.5b…"
    status.show_pair(ollama_pair(target, blob))
    assert status.pair_label.text().startswith("target + qwen2.5-coder:0.5b · cpu · float32")
    assert "sha256-" not in status.pair_label.text() and str(blob) in status.pair_label.toolTip()


def test_an_export_names_an_ollama_draft_by_its_ollama_name(ollama_draft):
    from app.chat.export import markdown, session_json
    from words.records import Session

    _, target, blob = ollama_draft
    session = Session(pair=ollama_pair(target, blob), title="coder")
    assert "*target + qwen2.5-coder:0.5b · cpu · float32*" in markdown(session).splitlines()  # both by store names
    models = session_json(session)["models"]
    assert models["said"] == "target + qwen2.5-coder:0.5b · cpu · float32"
    assert models["draft"]["path"] == str(blob)  # where it was loaded from is kept beside its name
