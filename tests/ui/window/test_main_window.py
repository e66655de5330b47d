"""The real main window and worker thread, driven with tiny in-memory models: what a user sees and exports."""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
from PySide6.QtCore import QByteArray, QPoint, QSettings, Qt, QUrl
from PySide6.QtGui import QTextCursor, QTextDocument
from PySide6.QtWidgets import QApplication, QMenu

from engine.events import DecodeSettings, Fate, ModelInfo, PairInfo
from tests.ui.helpers import REPLY_TIMEOUT_MS, expected_colours, send, shown_window, text_of, token_fragments
from ui.window.palette import STYLES
from words.records import MEASURED_TOKENS
from words.wording import reply_header


def test_reply_shows_a_colour_for_each_fate_that_occurred(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, greedy=False, max_new_tokens=48, cost_aware=False, stop_below=0.0)
    reply = send(qtbot, studio)
    fates = {t.fate for t in reply.tokens}
    assert {Fate.ACCEPTED, Fate.BONUS, Fate.RESAMPLED} <= fates  # the fixture's pair is built to show all three
    assert studio.window.legend.trace_button.text() == "Trace: off"
    studio.window.legend.trace_action.trigger()  # the speculative trace: every draft on its tint
    assert studio.window.legend.trace_button.text() == "Trace: on"  # its state in words, not only a sunken frame
    shown = {(colour, strike) for _, colour, strike in token_fragments(studio.window.chat)}
    assert shown == expected_colours(list(reply.events))
    assert (STYLES[Fate.REJECTED].background, True) in shown
    assert "rejected draft" in studio.window.inspector.label.text()  # opened on the first rejection
    # back to the clean view, the default: exactly the rejected drafts go, the fates stay as text colours
    studio.window.legend.trace_action.trigger()
    clean = token_fragments(studio.window.chat)
    assert all(not strike and not colour for _, colour, strike in clean)
    assert "".join(text for text, _, _ in clean) == "".join(t.text for t in reply.tokens)


def test_greedy_corrections_are_blue_and_plain_ar_is_uncoloured(make_studio, greedy_mixed_decoder, qtbot):
    # γ drafts every round: cost-aware rounds on a shared session decoder may draft nothing, and correct nothing
    studio = make_studio(greedy_mixed_decoder, greedy=True, max_new_tokens=12, cost_aware=False, stop_below=0.0)
    reply = send(qtbot, studio)
    assert Fate.CORRECTED in {t.fate for t in reply.tokens}
    studio.window.legend.trace_action.setChecked(True)
    assert (STYLES[Fate.CORRECTED].background, False) in {(c, s) for _, c, s in token_fragments(studio.window.chat)}
    studio.window.new_chat()
    studio.window.controls.mode.setCurrentIndex(studio.window.controls.mode.findData("ar"))
    ar_reply = send(qtbot, studio)
    assert {t.fate for t in ar_reply.tokens} == {Fate.TARGET}
    assert {colour for _, colour, _ in token_fragments(studio.window.chat)} == {""}


def test_charts_hold_one_point_per_round(make_studio, mixed_decoder, qtbot):
    # γ drafts every round: cost-aware rounds on a busy machine may all be plain steps, with no α to chart
    studio = make_studio(mixed_decoder, greedy=False, max_new_tokens=16, cost_aware=False, stop_below=0.0)
    reply = send(qtbot, studio)
    with qtbot.waitSignal(studio.window.charts.timer.timeout, timeout=1000):
        pass  # one refresh tick pushes the buffers into the plot items
    for series in ("alpha", "alpha_mean", "tokens", "expected"):
        assert studio.window.charts.point_count(series) == len(reply.events)
    measured = ~np.isnan(studio.window.charts.buffers.series("speedup_mean")[1])  # where plain rounds measured it
    assert studio.window.charts.point_count("speedup_mean") == np.count_nonzero(measured)


def test_export_files_parse_and_agree_with_the_status_bar(make_studio, mixed_decoder, qtbot, tmp_path):
    studio = make_studio(mixed_decoder, greedy=False, max_new_tokens=16, cost_aware=False, stop_below=0.0)
    reply = send(qtbot, studio)
    written = studio.chat.export(tmp_path / "session")
    assert sorted(p.name for p in written) == ["session-positions.csv", "session.csv", "session.json", "session.md",
                                               "session.png"]
    data = json.loads((tmp_path / "session.json").read_text())
    with (tmp_path / "session.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    stats = data["replies"][0]["stats"]
    assert len(data["replies"][0]["rounds"]) == len(rows) == len(reply.events) == stats["n_rounds"]
    assert sum(int(r["n_emitted"]) for r in rows) == stats["n_tokens"]
    assert sum(int(r["n_accepted"]) for r in rows) / sum(int(r["n_verified"]) for r in rows) == stats["alpha"]
    assert data["replies"][0]["settings"]["greedy"] is False and data["environment"]["packages"]["torch"]
    shown = studio.window.reply_label.text()
    assert f"α {stats['alpha']:.2f}" in shown and f"{stats['tokens_per_round']:.2f} tok/round" in shown
    assert f"{stats['n_tokens']} tokens in {stats['n_rounds']} rounds" in shown


def test_gamma_change_applies_from_the_next_round(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, greedy=False, max_new_tokens=40, gamma=4, cost_aware=False, stop_below=0.0)
    seen_at_change = []

    def change_gamma_once(event):
        if not seen_at_change:
            seen_at_change.append(studio.worker.rounds_emitted)
            studio.window.controls.gamma.setValue(2)

    studio.window.round_shown.connect(change_gamma_once)
    reply = send(qtbot, studio)
    # rounds the worker had emitted when γ moved ran at γ=4; the one in flight may too; every later one uses 2
    already = seen_at_change[0]
    gammas = [e.gamma for e in reply.events]
    assert gammas[0] == 4
    assert set(gammas[already + 1:]) == {2}, gammas
    assert "γ=4→2" in studio.window.chat.toPlainText()  # the reply's header says so too


def test_a_reply_cut_at_max_tokens_carries_a_visible_mark(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, max_new_tokens=6)
    reply = send(qtbot, studio)
    assert reply.events[-1].finish_reason == "length"
    assert "cut at max new tokens" in studio.window.chat.toPlainText()


def test_stop_ends_the_reply_within_one_round(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, greedy=False, max_new_tokens=200)
    emitted_at_stop = []

    def stop_once(_event):
        if not emitted_at_stop:
            emitted_at_stop.append(studio.worker.rounds_emitted)
            qtbot.mouseClick(studio.window.stop_button, Qt.MouseButton.LeftButton)

    studio.window.round_shown.connect(stop_once)
    reply = send(qtbot, studio)
    assert reply.stopped and reply.events[-1].finish_reason is None
    assert len(reply.events) <= emitted_at_stop[0] + 1
    assert studio.window.send_button.isEnabled() and not studio.window.stop_button.isEnabled()
    assert studio.chat.messages[-1] == {"role": "assistant", "content": reply.text}


def test_compare_with_ar_reports_identical_greedy_output_and_keeps_history(make_studio, greedy_mixed_decoder, qtbot,
                                                                           monkeypatch):
    # the tiny models' timings are all noise beside their cost model: judged here as a quiet machine's
    monkeypatch.setattr("app.chat.controller.machine_was_busy", lambda *_: False)
    monkeypatch.setattr("app.chat.controller.unequal_loads", lambda *_: False)
    monkeypatch.setattr("words.records.beyond_rounds", lambda *_: False)  # nor can bound a noisy ratio
    studio = make_studio(greedy_mixed_decoder, greedy=True, max_new_tokens=MEASURED_TOKENS)  # long enough to time
    studio.window.controls.compare_ar.setChecked(True)
    runner, read = greedy_mixed_decoder.runner, []  # the positions each prompt read-in ends at
    prefill_chunks = runner.prefill_chunks
    runner.prefill_chunks = lambda ids: (read.append(end) or end for end in prefill_chunks(ids))
    reply = send(qtbot, studio)
    comparison = studio.chat.session.comparisons[0]
    assert comparison.identical is True and comparison.speedup > 0
    assert comparison.ar_text == reply.text and all(e.gamma == 0 for e in comparison.ar_events)
    # plain AR and the reply's undrawn rerun read the prompt in as the reply did, rather than finding it cached
    assert len(read) == 3 and read[0] == read[1] == read[2] > 0
    assert [m["role"] for m in studio.chat.messages] == ["user", "assistant"]
    assert re.search(r"measured \d+\.\d\d× undrawn", studio.window.reply_label.text())
    studio.window.charts.refresh()
    [(start, end, _)] = studio.window.charts.measured_spans()  # over the whole reply
    assert start == 0.5 and end == len(reply.events) + 0.5
    assert studio.window.why_charts.why.points[-1].measured


def test_an_unfair_comparison_is_not_drawn_as_measured(make_studio, greedy_mixed_decoder, qtbot, monkeypatch):
    monkeypatch.setattr("app.chat.controller.unequal_loads", lambda *_: True)  # the two runs met the machine at different loads
    studio = make_studio(greedy_mixed_decoder, greedy=True, max_new_tokens=10)
    studio.window.controls.compare_ar.setChecked(True)
    send(qtbot, studio)
    assert not studio.chat.session.comparisons[0].fair
    assert "measured" in studio.window.reply_label.text()  # said, with its caveat, but drawn as no line or dot
    studio.window.charts.refresh()
    assert studio.window.charts.measured_spans() == []
    assert not any(point.measured for point in studio.window.why_charts.why.points)


def test_hovering_a_rejected_token_shows_p_q_r_and_the_top_tokens(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, greedy=False, max_new_tokens=16, cost_aware=False, stop_below=0.0)
    send(qtbot, studio)
    chat = studio.window.chat
    studio.window.legend.trace_action.setChecked(True)  # rejected drafts are only drawn in the trace
    index = next(i for i, s in enumerate(chat.spans) if s.fate is Fate.REJECTED)
    cursor = _cursor_at_token(chat, index)
    point = chat.cursorRect(cursor).center() + QPoint(2, 0)
    with qtbot.waitSignal(chat.token_hovered, timeout=2000) as hovered:
        qtbot.mouseMove(chat.viewport(), point)
    assert hovered.args == [index]
    shown = text_of(studio.window.inspector.label.text())
    span = chat.spans[index]
    for needle in ("rejected draft", "sampling", "p(x)", "q(x)", "min(1, p/q)", "draw r", f"{span.drafted.r:.4f}",
                   "top of p", "top of q", span.drafted.top_q[0].text):
        assert needle in shown


def _cursor_at_token(chat, index: int) -> QTextCursor:
    block = chat.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.charFormat().anchorHref() == f"token:{index}":
                cursor = QTextCursor(chat.document())
                cursor.setPosition(fragment.position() + 1)
                return cursor
            it += 1
        block = block.next()
    raise AssertionError(f"token {index} not in the document")


def test_shift_enter_adds_a_line_and_enter_sends(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, max_new_tokens=4)
    box = studio.window.message_box
    qtbot.keyClicks(box, "w3")
    qtbot.keyClick(box, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(box, "w7")
    assert box.toPlainText() == "w3\nw7"
    with qtbot.waitSignal(studio.window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClick(box, Qt.Key.Key_Return)
    assert box.toPlainText() == "" and studio.chat.messages[0] == {"role": "user", "content": "w3\nw7"}


def test_a_failed_load_gives_a_dialog_and_keeps_the_previous_pair_working(make_studio, mixed_decoder, qtbot,
                                                                           tmp_path):
    studio = make_studio(mixed_decoder, max_new_tokens=4)
    window = studio.window
    pair_shown = window.pair_label.text()
    window.picker.target.setText(str(tmp_path / "missing"))
    with qtbot.waitSignal(window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        window.picker.load_button.click()
    assert "does not exist" in window.error_box.text()
    assert not window.load_progress.isVisible() and studio.chat.ready and window.send_button.isEnabled()
    # the controls show the pair that still answers, not the one that failed
    assert window.pair_label.text() == pair_shown
    assert window.picker.target.text() == mixed_decoder.info().target.name
    assert "still using" in window.statusBar().currentMessage()
    window.error_box.close()
    assert send(qtbot, studio).events


def test_keyboard_shortcuts_stop_and_start_a_new_chat(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, greedy=False, max_new_tokens=200)
    studio.window.round_shown.connect(lambda _e: qtbot.keyClick(studio.window.message_box, Qt.Key.Key_Escape))
    reply = send(qtbot, studio)
    assert reply.stopped
    with qtbot.waitSignal(studio.window.new_chat_requested, timeout=1000):
        qtbot.keyClick(studio.window.message_box, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert studio.chat.messages == [] and studio.window.chat.spans == []


def test_closing_the_window_mid_reply_stops_decoding_and_joins_the_thread(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, greedy=False, max_new_tokens=400)
    with qtbot.waitSignal(studio.window.round_shown, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClicks(studio.window.message_box, "w3 w5")
        qtbot.keyClick(studio.window.message_box, Qt.Key.Key_Return)
    emitted_at_close = studio.worker.rounds_emitted
    studio.window.close()
    studio.shutdown()
    assert studio.thread.isFinished()
    assert studio.worker.rounds_emitted <= emitted_at_close + 1


def test_reply_header_names_cost_aware_confidence_stopped_and_fixed_rounds():
    assert reply_header(DecodeSettings(gamma=6)) == "Assistant · speculative, greedy, γ ≤ 6, cost-aware"
    assert (reply_header(DecodeSettings(gamma=6, cost_aware=False, stop_below=0.3))
            == "Assistant · speculative, greedy, γ ≤ 6, stop 0.3")
    assert (reply_header(DecodeSettings(gamma=2, cost_aware=False, stop_below=0.0, greedy=False, temperature=0.7))
            == "Assistant · speculative, sampling T=0.7, γ=2")


def test_a_plain_ar_reply_draws_no_speedup_and_rests_gamma(make_studio, greedy_mixed_decoder, qtbot):
    studio = make_studio(greedy_mixed_decoder, greedy=True, max_new_tokens=12)
    controls = studio.window.controls
    assert controls.gamma.isEnabled()
    controls.mode.setCurrentIndex(controls.mode.findData("ar"))
    assert not controls.gamma.isEnabled() and not controls.compare_ar.isEnabled()
    send(qtbot, studio)
    studio.window.charts.refresh()
    assert studio.window.charts.point_count("tokens") == 12
    assert studio.window.charts.point_count("speedup") == studio.window.charts.point_count("speedup_mean") == 0
    assert "plain AR" in studio.window.charts.headers[studio.window.charts.speedup_plot].text()


def test_a_pair_without_a_draft_offers_plain_ar_only(make_studio, qtbot):
    from tests.tiny import tiny_decoder

    studio = make_studio(tiny_decoder(draft_seed=None), max_new_tokens=4)
    controls = studio.window.controls
    assert controls.settings().mode == "ar" and not controls.mode.isEnabled() and not controls.gamma.isEnabled()
    assert send(qtbot, studio).request.settings.mode == "ar"
    assert "plain AR" in studio.window.chat.toPlainText()


def test_continue_extends_the_reply_in_place(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, max_new_tokens=6)
    cut = send(qtbot, studio)
    window = studio.window
    assert window.continue_button.isVisible() and window.continue_action.isEnabled()
    with qtbot.waitSignal(window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        window.continue_action.trigger()
    more = studio.chat.replies[-1]
    [reply] = window.chat.transcript.replies()
    assert window.chat.transcript.clean_text(reply) == cut.text + more.text
    assert window.chat.toPlainText().count("Assistant") == 1 and "continued" not in window.chat.toPlainText()
    assert f"{len(cut.tokens) + len(more.tokens)} tokens in" in window.reply_label.text()


def test_a_new_chat_shows_no_continue(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, max_new_tokens=6)
    send(qtbot, studio)
    studio.window.new_chat()
    assert not studio.window.continue_button.isVisible() and not studio.window.continue_action.isEnabled()


def test_a_reply_cut_by_stop_offers_continue(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, greedy=False, max_new_tokens=200)
    stopped = []
    studio.window.round_shown.connect(lambda _e: stopped or (stopped.append(1), studio.window.stop()))
    assert send(qtbot, studio).stopped
    assert studio.window.continue_button.isVisible() and studio.window.continue_action.isEnabled()


def test_the_help_menu_lists_every_shortcut(make_studio, mixed_decoder, qtbot):
    window = make_studio(mixed_decoder, max_new_tokens=4).window
    shortcuts = dict(window.menus.shortcuts())
    for keys in ("Ctrl+N", "Ctrl+R", "Ctrl+T", "Ctrl+H", "Ctrl+E", "Ctrl+1", "Ctrl+2", "Esc", "Enter", "F1"):
        assert keys in shortcuts, keys
    assert shortcuts["Ctrl+N"] == "New chat"
    assert [what for keys, what in window.menus.shortcuts() if keys == "Esc"] == [
        "Stop", "While a message is back in the box for editing: leave the edit (Cancel edit)"]
    qtbot.keyClick(window, Qt.Key.Key_F1)
    assert window.menus.help_box.isVisible() and "Ctrl+Shift+E" in window.menus.help_box.text()
    window.menus.help_box.close()
    help_menu = next(m for m in window.menuBar().findChildren(QMenu) if m.title() == "&Help")
    about = next(a for a in help_menu.actions() if a.text().startswith("&About"))
    about.trigger()
    assert "speculative decoding" in window.menus.help_box.text()
    about_text = window.menus.help_box.text()
    assert "SpecDec Studio 0." in about_text and "Leviathan" in about_text  # version, source
    window.menus.help_box.close()


def blocks(document):
    block = document.begin()
    while block.isValid():
        yield block
        block = block.next()


def test_the_user_guide_shows_the_readme_with_its_pictures_and_without_a_checkout_its_text(
        make_studio, mixed_decoder, qtbot, monkeypatch, tmp_path):
    """Help > User guide: the README, its headings as headings and its screenshots found beside it; the control, a
    package installed without the checkout, shows the package's description; with neither, the entry is off."""
    import ui.window.guide as guide

    window = make_studio(mixed_decoder, max_new_tokens=4).window
    assert "Shift+F1" in dict(window.menus.shortcuts())
    qtbot.keyClick(window, Qt.Key.Key_F1, Qt.KeyboardModifier.ShiftModifier)
    document = window.menus.guide.browser.document()
    assert window.menus.guide.isVisible() and document.toPlainText().startswith("SpecDec Studio")
    picture = next(line.split("](")[1].split(")")[0] for line in (Path(__file__).parents[3] / "README.md").read_text(
        encoding="utf-8").splitlines() if line.startswith("!["))
    assert not document.resource(QTextDocument.ResourceType.ImageResource, picture).isNull()
    pictures = [piece.fragment().charFormat().toImageFormat() for block in blocks(document) for piece in block]
    [width] = [p.width() for p in pictures if p.isValid()]  # the screenshot (1,600 px) drawn within the guide
    assert 0 < width <= window.menus.guide.browser.viewport().width()
    QApplication.processEvents()
    assert window.menus.guide.browser.horizontalScrollBar().maximum() == 0  # code lines wrap: no sideways scrolling
    layout = document.documentLayout()
    unlaid = [b.text()[:40] for b in blocks(document) if b.text().strip() and not layout.blockBoundingRect(b).height()]
    assert unlaid == []  # every paragraph is laid out, so drawn: none left blank after the pictures were resized
    assert not window.menus.guide.back.isEnabled()
    opened = []
    monkeypatch.setattr(guide.QDesktopServices, "openUrl", opened.append)
    window.menus.guide.browser.anchorClicked.emit(QUrl("docs/screenshots/"))  # a folder: the desktop's file manager
    assert [url.toLocalFile() for url in opened] == [str(Path(__file__).parents[3] / "docs" / "screenshots") + "/"]
    assert window.menus.guide.browser.toPlainText().startswith("SpecDec Studio")
    window.menus.guide.browser.anchorClicked.emit(QUrl("docs/speed-figures.md"))
    assert window.menus.guide.browser.toPlainText().startswith("How the window's speed figures are computed")
    window.menus.guide.back.click()
    dialog = window.menus.guide
    assert dialog.browser.toPlainText().startswith("SpecDec Studio") and not dialog.back.isEnabled()
    assert [b.text()[:40] for b in blocks(document) if b.text().strip() and not layout.blockBoundingRect(b).height()] == []
    QApplication.processEvents()
    assert window.menus.guide.browser.horizontalScrollBar().maximum() == 0  # fitted again
    window.menus.guide.close()
    monkeypatch.setattr(guide, "__file__", str(tmp_path / "ui" / "window" / "guide.py"))
    text = guide.user_guide()
    assert isinstance(text, str) and text.startswith("# SpecDec Studio")
    monkeypatch.setattr(guide.metadata, "metadata", lambda name: (_ for _ in ()).throw(
        guide.metadata.PackageNotFoundError(name)))
    assert guide.user_guide() == ""


def test_loading_a_pair_leaves_the_guide_in_view(make_studio, mixed_decoder, qtbot, tmp_path):
    studio = make_studio(mixed_decoder, max_new_tokens=4)
    window = studio.window
    window.new_chat()
    window.picker.target.setText(str(tmp_path / "missing"))
    with qtbot.waitSignal(window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        window.picker.load_button.click()
        assert window.load_progress.isVisible() and "Loading" in window.pair_label.text()
        assert QApplication.activeModalWidget() is None and "Try one" in window.chat.toPlainText()
    window.error_box.close()


def test_while_a_loaded_pair_is_timed_the_bar_moves_by_its_steps_not_busily(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, max_new_tokens=4)
    window = studio.window
    window.status_bar.open_progress()
    assert window.load_progress.maximum() == 0  # a busy bar, drawn again and again while weights load
    studio.chat.timing_started.emit()
    assert window.load_progress.maximum() == 1 and window.load_progress.isVisible()
    assert "Timing this machine" in window.pair_label.text()
    studio.chat.timing_progressed.emit(3, 12)  # the bar moves a step at a time, and says so
    assert (window.load_progress.maximum(), window.load_progress.value()) == (12, 3)
    assert "step 3 of 12" in window.pair_label.text()
    window.status_bar.open_progress()  # the next load is busy again
    assert window.load_progress.maximum() == 0


def test_a_pair_timed_far_slower_than_its_last_quiet_timing_plans_on_that_and_the_why_tab_says_so(make_studio,
                                                                                                   qtbot, tmp_path):
    from engine.decoding.costs import CostModel
    from tests.tiny import tiny_decoder

    def timed_at(step_s: float) -> CostModel:
        return CostModel([step_s * (1 + k / 10) for k in range(9)], draft_step_s=0.002, copy_s=1e-5, overhead_s=5e-4)

    decoder = tiny_decoder()
    preferences = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    decoder.set_costs(timed_at(0.001))  # a quiet timing: the studio keeps it, as the app does at each load
    quiet = decoder.costs.as_dict()
    make_studio(decoder, preferences=preferences, max_new_tokens=4).shutdown()
    decoder.set_costs(timed_at(0.006))  # the next load's timing, six times slower
    studio = make_studio(decoder, preferences=preferences, max_new_tokens=4)
    qtbot.waitUntil(lambda: decoder.costs.block_s(1) == 0.001, timeout=5000)  # the worker plans on the quiet one
    assert studio.chat.pair.costs == quiet
    cost_header = studio.window.why_charts.headers[studio.window.why_charts.costs_plot].text()
    assert "busy while the pair was timed" in cost_header and "6.0 ms, 1.0 ms when timed here" in cost_header


def test_the_settings_a_message_was_sent_with_are_kept_before_the_app_quits(make_studio, mixed_decoder, qtbot,
                                                                              tmp_path):
    preferences = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    studio = make_studio(mixed_decoder, preferences=preferences, max_new_tokens=4)
    studio.window.controls.gamma.setValue(3)
    assert not QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat).contains("decoding/gamma")
    send(qtbot, studio)
    kept = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)  # as a killed app leaves it
    assert kept.value("decoding/gamma", type=int) == 3


def test_compare_with_ar_on_a_native_gguf_target_decodes_one_target_identically(make_studio, qtbot, tmp_path):
    from engine.decoding.decoder import Decoder
    from engine.decoding.drafters import DraftModelDrafter
    from tests.engine.models.test_gguf_native import tiny_gguf_pair
    from tests.tiny import cheap_draft_costs, tiny_model

    native, _ = tiny_gguf_pair(tmp_path)
    draft = tiny_model(1, layers=1, vocab_size=64)
    decoder = Decoder(native, DraftModelDrafter(draft, native.vocab_size), draft)
    decoder.set_costs(cheap_draft_costs())  # rounds that draft, whatever this machine's timings
    studio = make_studio(decoder, greedy=True, max_new_tokens=16, lookup=False)
    studio.window.controls.compare_ar.setChecked(True)
    reply = send(qtbot, studio)
    comparison = studio.chat.session.comparisons[0]
    assert any(e.gamma for e in reply.events)  # speculation really drafted
    assert comparison.identical is True and comparison.ar_text == reply.text
    assert decoder.info().target.weights == "native"


def test_the_charts_tab_is_named_for_the_last_reply_it_shows_while_an_earlier_token_is_pinned(make_studio,
                                                                                            mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, greedy=False, max_new_tokens=8, cost_aware=False, stop_below=0.0)
    window = studio.window
    send(qtbot, studio)
    last = send(qtbot, studio, "w5 w6")
    window.analysis.on_token_clicked(window.chat.items[1].first)  # pin the first reply's first token
    assert window.inspector.pinned
    assert window.charts.buffers.n == len(last.events)  # the charts stay on the last reply
    tab = window.chart_tabs.indexOf(window.charts)
    assert window.chart_tabs.tabText(tab) == "last reply"
    assert window.chart_tabs.tabToolTip(tab).startswith("The last reply's")


def test_the_system_prompt_dialog_names_what_the_model_sends_when_it_is_left_empty(qtbot, monkeypatch):
    asked = []
    monkeypatch.setattr("ui.chat.pane.QInputDialog.getMultiLineText",
                        lambda _parent, _title, label, text: asked.append(label) or (text, False))
    window = shown_window(qtbot, 1600, 1000)
    for default in ("Be kind.", ""):  # the control: a template that sends none
        window.on_pair_loaded(PairInfo(ModelInfo("t", "/t", 1, 64), None, "cpu", "float32", default_system_prompt=default))
        window.chat_pane.ask_system_prompt()
    assert asked[0].endswith("(empty: the model's own: “Be kind.”):") and asked[1].endswith("(empty: none):")


def drawn_width(label) -> float:
    document = QTextDocument()
    document.setDefaultFont(label.font())
    document.setHtml(label.text())
    return document.idealWidth() - 2 * document.documentMargin()


def test_a_system_prompt_in_effect_is_named_above_the_chat_and_opens_its_dialog(qtbot, monkeypatch):
    """The control: with none set, nothing is shown."""
    asked = []
    monkeypatch.setattr("ui.chat.pane.QInputDialog.getMultiLineText",
                        lambda _parent, _title, _label, text: asked.append(text) or (text, False))
    window = shown_window(qtbot, 1000, 700)
    line = window.system_prompt_line
    assert not line.isVisible()
    window.system_prompt = "You are a pirate. " * 10
    assert line.isVisible() and "System prompt (" in line.text() and "): “You are a pirate." in line.text() and "…”" in line.text()
    assert line.toolTip() == window.system_prompt and line.width() <= window.chat.width()  # it never widens the pane
    window.system_prompt = "You are a pirate who speaks only in rhymes. Always answer like a pirate would."  # walk 31
    assert "…”" in line.text() and drawn_width(line) <= line.contentsRect().width()  # cut where it is cut, with …
    line.linkActivated.emit("change")
    assert asked == [window.system_prompt]
    window.system_prompt = ""
    assert not line.isVisible()


def test_a_click_on_the_gamma_groove_moves_gamma_by_one(qtbot):
    """Walk 29: a click on the groove right of the handle jumped γ from 6 to 16 (Qt's page step of ten)."""
    from PySide6.QtTest import QTest

    window = shown_window(qtbot, 1400, 900)
    slider = window.controls.gamma
    slider.setValue(6)
    QTest.mouseClick(slider, Qt.MouseButton.LeftButton, pos=QPoint(slider.width() - 3, slider.height() // 2))
    assert slider.value() == 7


def test_view_why_this_gamma_shows_its_tab_and_brings_its_pane_back(qtbot):
    window = shown_window(qtbot, 1400, 900)
    window.pane_actions["right"].setChecked(False)
    assert window.chart_tabs.currentIndex() != window.analysis.why_tab and not window.analysis.isVisible()
    qtbot.keyClick(window, Qt.Key.Key_G, Qt.KeyboardModifier.ControlModifier)
    assert window.chart_tabs.currentIndex() == window.analysis.why_tab and window.analysis.isVisible()
    assert ("Ctrl+G", "Why this γ") in window.menus.shortcuts()


def test_saved_window_states_of_another_type_are_dropped_and_the_window_starts(make_studio, mixed_decoder, tmp_path,
                                                                               capfd):
    """Settings are the user's file, and other versions write it: a splitter's or the window's state stored as
    another type stopped the window with a TypeError from restoreState. Each is dropped with one line."""
    path = str(tmp_path / "settings.ini")
    preferences = QSettings(path, QSettings.Format.IniFormat)
    preferences.setValue("window/splitter0", 5)
    preferences.setValue("window/docks", "a state from elsewhere")
    preferences.sync()
    make_studio(mixed_decoder, preferences=preferences, max_new_tokens=4)  # raised a TypeError before
    said = capfd.readouterr().err
    assert "ignored the saved window/splitter0" in said and "ignored the saved window/docks" in said
    kept = QSettings(path, QSettings.Format.IniFormat)
    assert not kept.contains("window/splitter0") or isinstance(kept.value("window/splitter0"), QByteArray)
