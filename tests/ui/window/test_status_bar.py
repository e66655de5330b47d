"""The status bar: a notice takes the labels' place instead of being drawn over them, and says all in its tooltip;
the pair's name leaves the last reply's figures room for all of them at the default size; short of width they keep
their first and last figures whole, and in a narrow window their speedups."""
from __future__ import annotations

import dataclasses
from itertools import combinations

import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QApplication

from engine.events import DecodeSettings, ModelInfo, PairInfo, PrefillProgress, RoundEvent
from tests.ui.helpers import shown_window
from tests.ui.synthetic import accepted_round, in_order, plain_steps, rejected_round
from ui.window.main_window import INT4_NOTE
from ui.window.status import PAIR_NAMES_SHARE
from words.records import MEASURED_TOKENS, Comparison, ComparisonShown, Reply, ReplyRequest, ReplyShown
from words.wording import SEPARATOR, UNFAIR, speedup_said

LONG_SUMMARY = ("last reply: 128 tokens in 120 rounds · 71.9 tok/s · α 0.62 · 1.07 tok/round · 1.13× vs AR, drawn"
                + UNFAIR + " · measured 0.80× undrawn")


def int4_pair() -> PairInfo:
    return PairInfo(ModelInfo("embedded", "/m/t.gguf", 135, 49152, weights="native"),
                    ModelInfo("embedded-draft", "/m/d", 30, 49152), "cpu", "bfloat16")


def drawn(window) -> dict[str, QRect]:
    """The status bar's widgets that are drawn, each with its place in the status bar."""
    status = window.status_bar
    widgets = {"notice": status.notice, "pair": window.pair_label, "reply": window.reply_label,
               "prefill": window.prefill_progress, "comparison": window.comparison_progress}
    return {name: QRect(w.mapTo(status, QPoint(0, 0)), w.size()) for name, w in widgets.items() if w.isVisible()}


def show_a_compared_reply(window, machine_busy: bool = False) -> tuple[Reply, Comparison]:
    """A 128-token reply read in after 0.5 s, then its comparison, the chat's second fair one."""
    comparison = Comparison(ar_events=plain_steps(64), ar_text="", spec_wall_s=2.4, ar_wall_s=3.0,
                            spec_tokens_per_s=66.7, ar_tokens_per_s=50.0, identical=None)
    return show_a_compared_reply_with(window, comparison, machine_busy)


def measured_rounds(prefill_s: float = 0.5) -> tuple[RoundEvent, ...]:
    """128 tokens in 1.92 s, read in after `prefill_s`: 60 drafted rounds and, every eighth round, a plain one of
    20 ms (1.33x)."""
    return in_order(*(dataclasses.replace(accepted_round(0, ["a"], "b"), round_s=1.76 / 60,
                                          prefill_s=prefill_s if i == 0 else 0.0) if i % 8 != 7 else plain_steps(1)[0]
                      for i in range(68)))


def show_a_compared_reply_with(window, comparison: Comparison, machine_busy: bool = False) -> tuple[Reply, Comparison]:
    events = measured_rounds(prefill_s=0.0)
    reply = Reply(ReplyRequest(({"role": "user", "content": "x"},), DecodeSettings(gamma=2)), events, "ab" * 64,
                  False, reference_s=0.02, machine_busy=machine_busy)
    window.on_reply_finished(ReplyShown(0, reply, reply, can_continue=False, live=True))
    window.on_comparison_finished(ComparisonShown(0, comparison, reply, None, chat_measured=(1.2, 1.33)))
    QApplication.processEvents()
    window.charts.refresh()
    return reply, comparison


def reading_a_long_prompt_after_the_int4_notice(qtbot, width: int = 1600, height: int = 1000):
    window = shown_window(qtbot, width, height)
    window.reply_label.setText(LONG_SUMMARY)
    window.on_pair_loaded(int4_pair())  # its notice says why the int4 target matters
    window.on_prefill_progressed(PrefillProgress(2880, 4404))  # a bar shown beside it: the status bar lays out anew
    QApplication.processEvents()
    return window


def test_a_notice_hides_the_labels_while_a_progress_bar_is_shown_beside_it(qtbot):
    window = reading_a_long_prompt_after_the_int4_notice(qtbot)
    assert window.statusBar().currentMessage() == INT4_NOTE
    assert not window.pair_label.isVisible() and not window.reply_label.isVisible()
    places = drawn(window)
    assert set(places) == {"notice", "prefill"}
    for (one, a), (other, b) in combinations(places.items(), 2):
        assert not a.intersects(b), (one, other)


def test_the_int4_notice_is_read_whole_at_1000x700_beside_a_progress_bar(qtbot):
    window = reading_a_long_prompt_after_the_int4_notice(qtbot, 1000, 700)
    assert window.status_bar.notice.shown_text() == INT4_NOTE


def test_a_long_notice_is_elided_with_its_whole_text_in_the_tooltip(qtbot):
    window = reading_a_long_prompt_after_the_int4_notice(qtbot, 1000, 700)
    long_notice = "A notice longer than the bar: " + "every word of it matters to somebody " * 4
    window.statusBar().showMessage(long_notice, 20000)
    QApplication.processEvents()
    notice = window.status_bar.notice
    assert notice.toolTip() == long_notice
    shown = notice.shown_text()
    assert shown.endswith("…") and long_notice.startswith(shown[:-1])
    assert notice.fontMetrics().horizontalAdvance(shown) <= notice.contentsRect().width()


def test_the_labels_come_back_when_the_notice_ends(qtbot):
    window = reading_a_long_prompt_after_the_int4_notice(qtbot)
    window.statusBar().clearMessage()
    QApplication.processEvents()
    assert set(drawn(window)) == {"pair", "reply", "prefill"}
    assert window.pair_label.text().endswith("4-bit GGUF target")


def test_the_last_reply_summary_short_of_width_keeps_its_first_and_last_figures(qtbot):
    window = shown_window(qtbot, 1100, 800)
    window.on_pair_loaded(int4_pair())
    window.statusBar().clearMessage()
    window.reply_label.setText(LONG_SUMMARY)
    QApplication.processEvents()
    label = window.reply_label
    shown = label.shown_text()
    assert label.fontMetrics().horizontalAdvance(LONG_SUMMARY) > label.contentsRect().width()  # it must give way
    assert shown.startswith("last reply: 128 tokens in 120 rounds · ") and shown.endswith(" · measured 0.80× undrawn")
    assert " · … · " in shown and label.fontMetrics().horizontalAdvance(shown) <= label.contentsRect().width()
    assert label.toolTip() == LONG_SUMMARY


def test_in_a_narrow_window_the_summary_keeps_the_live_and_the_measured_speedup(qtbot):
    window = shown_window(qtbot, 1000, 700)
    reply, comparison = show_a_compared_reply(window, machine_busy=True)  # the tok/s say "machine busy"
    label = window.reply_label
    shown = label.shown_text()
    assert label.fontMetrics().horizontalAdvance(label.text()) > label.contentsRect().width()  # it must give way
    assert speedup_said(reply.speedup) in shown and "tok/s (machine busy)" in label.text()
    assert f"measured {comparison.speedup:.2f}× undrawn" in shown
    assert label.fontMetrics().horizontalAdvance(shown) <= label.contentsRect().width()
    assert label.toolTip() == label.text()  # what was given up is still said there


def test_in_a_narrow_window_tokens_per_second_outlasts_tokens_per_round(qtbot):
    """At 1000×700 beside the pair's name and a compared reply tok/s stays and tok/round goes (the control: ranked
    with tok/round, tok/s went with it)."""
    window = shown_window(qtbot, 1000, 700)
    window.on_pair_loaded(int4_pair())
    window.statusBar().clearMessage()
    show_a_compared_reply(window)
    shown = window.reply_label.shown_text()
    assert "66.7 tok/s" in shown and "tok/round" not in shown and "measured" in shown


def shows_whole_parts(label) -> bool:
    """Whatever the label gives up, it gives up whole parts (each gap marked "…"), never a word or figure cut."""
    return all(piece == "…" or piece in {text for text, _ in label.parts}
               for piece in label.shown_text().split(SEPARATOR))


def int4_pair_beside_a_reply_at_1000_by_700(qtbot):
    window = shown_window(qtbot, 1000, 700)
    window.on_pair_loaded(int4_pair())
    window.statusBar().clearMessage()
    events = measured_rounds(prefill_s=0.0)
    reply = Reply(ReplyRequest(({"role": "user", "content": "x"},), DecodeSettings(gamma=2)), events, "ab" * 64,
                  False, reference_s=0.02)
    window.on_reply_finished(ReplyShown(0, reply, reply, can_continue=False, live=True))
    QApplication.processEvents()
    return window


def test_at_1000_by_700_a_replys_figures_are_whole_beside_the_pair_giving_up_whole_parts(qtbot):
    window = int4_pair_beside_a_reply_at_1000_by_700(qtbot)
    assert window.reply_label.shown_text() == window.reply_label.text()
    pair = window.pair_label
    assert pair.shown_text().startswith("embedded + embedded-draft · cpu · ") and shows_whole_parts(pair)
    assert pair.text() in pair.toolTip()


def test_at_1000_by_700_the_pairs_models_keep_their_names_whole_beside_a_compared_reply(qtbot):
    """The Qwen pair's names are longer than the pair's label had room for beside a compared reply's figures: the
    label gives up the device, dtype and weights, the figures their least ranked parts, and neither cuts a word."""
    window = shown_window(qtbot, 1000, 700)
    window.on_pair_loaded(PairInfo(ModelInfo("qwen2.5-coder-1.5b", "/m/t.gguf", 1544, 151936, weights="native"),
                                   ModelInfo("qwen2.5-coder-0.5b", "/m/d.gguf", 494, 151936), "cpu", "bfloat16"))
    window.statusBar().clearMessage()
    show_a_compared_reply(window)
    assert window.pair_label.shown_text() == "qwen2.5-coder-1.5b + qwen2.5-coder-0.5b · …"
    assert shows_whole_parts(window.reply_label) and "measured 1.33× undrawn" in window.reply_label.shown_text()


def test_at_1000_by_700_compare_with_ars_bar_takes_its_room_from_the_pairs_details(qtbot):
    window = int4_pair_beside_a_reply_at_1000_by_700(qtbot)
    assert "bfloat16" in window.pair_label.shown_text()  # the control: room for the pair's details before the bar
    window.status_bar.on_comparison_progressed(12, 32)
    QApplication.processEvents()
    assert window.pair_label.shown_text() == "embedded + embedded-draft · …"
    assert shows_whole_parts(window.reply_label)


def test_a_progress_bar_appearing_leaves_the_panes_where_they_are(qtbot):
    window = shown_window(qtbot, 1600, 1000)
    before = window.chat.geometry(), window.statusBar().height()
    window.on_prefill_progressed(PrefillProgress(100, 4404))
    QApplication.processEvents()
    assert window.prefill_progress.isVisible()
    assert (window.chat.geometry(), window.statusBar().height()) == before


def test_a_reply_drawn_while_the_load_notice_shows_brings_its_figures_into_view(qtbot):
    window = shown_window(qtbot, 1400, 900)
    window.on_pair_loaded(int4_pair())
    assert window.statusBar().currentMessage() == INT4_NOTE
    events = tuple(accepted_round(i, ["a"], "b") for i in range(4))
    reply = Reply(ReplyRequest(({"role": "user", "content": "x"},), DecodeSettings(gamma=2)), events, "ab" * 4,
                  False, reference_s=0.02)
    window.on_reply_finished(ReplyShown(0, reply, reply, can_continue=False, live=False))  # a reopened chat's
    assert window.statusBar().currentMessage() == "" and window.reply_label.isVisible()
    assert window.reply_label.text().startswith("last reply: 8 tokens in 4 rounds")


def test_at_the_default_size_a_compared_reply_shows_every_figure_beside_the_pairs_name(qtbot):
    window = shown_window(qtbot, 1600, 1000)
    window.on_pair_loaded(int4_pair())
    window.statusBar().clearMessage()
    show_a_compared_reply(window)
    pair = window.pair_label
    assert pair.width() <= window.width() // 4 and pair.text() in pair.toolTip()  # elided if need be, whole there
    assert window.reply_label.shown_text() == window.reply_label.text()
    line = window.reply_label.text()
    assert "66.7 tok/s" in line and "this chat 1.20–1.33× in 2 runs" in line


def test_while_the_pair_is_timed_its_progress_has_the_whole_line(qtbot):
    window = shown_window(qtbot, 1000, 700)
    window.status_bar.on_timing_started()
    window.status_bar.on_timing_progressed(5, 12)
    QApplication.processEvents()
    assert window.pair_label.shown_text() == window.pair_label.text() and "step 5 of 12" in window.pair_label.text()
    window.reply_label.setText(LONG_SUMMARY)  # a reply's figures beside it: the line gives way to a share
    QApplication.processEvents()
    assert window.pair_label.width() <= PAIR_NAMES_SHARE * window.width()


def test_a_continued_parts_measured_speedup_says_it_is_the_parts_not_the_whole_replys(qtbot):
    window = shown_window(qtbot, 1600, 1000)
    events = tuple(accepted_round(i, ["a"], "b") for i in range(8))
    messages = ({"role": "user", "content": "x"}, {"role": "assistant", "content": "ab"})
    part = Reply(ReplyRequest(messages, DecodeSettings(gamma=2)), events, "ab" * 8, False, reference_s=0.02)
    comparison = Comparison(ar_events=plain_steps(64), ar_text="", spec_wall_s=2.4, ar_wall_s=3.0,
                            spec_tokens_per_s=66.7,
                            ar_tokens_per_s=50.0, identical=None)
    window.on_reply_finished(ReplyShown(1, part, part, can_continue=False, live=True))
    window.on_comparison_finished(ComparisonShown(1, comparison, part, None, part=2))
    assert "measured 1.33× undrawn (part 2, continued)" in window.reply_label.text()  # as the note under it names it
    show_a_compared_reply(window)  # the control: a reply answering a message
    assert "measured 1.33× undrawn (one run each)" in window.reply_label.text()


def test_each_parts_measured_line_runs_over_that_parts_rounds_only(qtbot):
    """A reply of three rounds measured at 1.33×, then a continuation of eight whose comparison met a busy machine,
    then one of eight measured at 1.33× again: a line over rounds 1-3 and one over 12-19, none over 4-11. The
    control: a reply measured whole is one line, named without rounds."""
    window = shown_window(qtbot, 1600, 1000)
    charts = window.charts
    fair = Comparison(ar_events=plain_steps(64), ar_text="", spec_wall_s=2.4, ar_wall_s=3.0, spec_tokens_per_s=66.7,
                      ar_tokens_per_s=50.0, identical=None)
    messages = ({"role": "user", "content": "x"}, {"role": "assistant", "content": "ab"})
    charts.start_reply(2)
    parts = ((3, ReplyRequest(messages[:1], DecodeSettings(gamma=2)), fair),
             (8, ReplyRequest(messages, DecodeSettings(gamma=2)), dataclasses.replace(fair, machine_busy=True)),
             (8, ReplyRequest(messages, DecodeSettings(gamma=2)), fair))
    for number, (rounds, request, comparison) in enumerate(parts, start=1):
        events = tuple(accepted_round(i, ["a"], "b") for i in range(rounds))
        for event in events:
            charts.add_round(event)
        part = Reply(request, events, "ab" * rounds, False, reference_s=0.02)
        window.on_comparison_finished(ComparisonShown(1, comparison, part, None, part=number))
    charts.refresh()
    assert charts.measured_spans() == [(0.5, 3.5, pytest.approx(66.7 / 50)), (11.5, 19.5, pytest.approx(66.7 / 50))]
    legend = charts.headers[charts.speedup_plot].text().replace("&nbsp;", " ")
    # one line for both, naming the parts it is of (the second's comparison was not fair)
    assert legend.count("measured") == 1 and "measured 1.33× undrawn, parts 1 and 3" in legend
    from ui.why.charts import measured_said
    assert measured_said([(12, 19, 1.3, 2)]) == "measured 1.30× undrawn (part 2, continued: rounds 12–19)"
    assert measured_said([(1, 3, 0.97, 1), (4, 9, 1.29, 2), (10, 12, 1.1, 3)]) == (
        "measured 0.97–1.29× undrawn, parts 1, 2 and 3")
    charts.start_reply(2)
    events = tuple(accepted_round(i, ["a"], "b") for i in range(8))
    for event in events:
        charts.add_round(event)
    whole = Reply(ReplyRequest(messages[:1], DecodeSettings(gamma=2)), events, "ab" * 8, False, reference_s=0.02)
    window.on_comparison_finished(ComparisonShown(0, fair, whole, None))
    charts.refresh()
    assert charts.measured_spans() == [(0.5, 8.5, pytest.approx(66.7 / 50))]
    assert "measured 1.33× undrawn<" in charts.headers[charts.speedup_plot].text().replace("&nbsp;", " ")


def test_a_comparison_of_a_few_tokens_is_said_too_short_and_not_drawn_as_measured(qtbot):
    """One token fewer than MEASURED_TOKENS is too short to time: no fair speedup. The control: that many are."""
    from words.wording import SHORT

    for n, fair in ((MEASURED_TOKENS - 1, False), (MEASURED_TOKENS, True)):
        comparison = Comparison(ar_events=plain_steps(n), ar_text="x" * n, spec_wall_s=0.1, ar_wall_s=0.12,
                                spec_tokens_per_s=66.7, ar_tokens_per_s=50.0, identical=None)
        assert comparison.fair is fair
        window = shown_window(qtbot, 1600, 1000)
        show_a_compared_reply_with(window, comparison)
        assert (SHORT in window.reply_label.text()) is not fair
        assert bool(window.charts.measured_spans()) is fair



def test_a_sampled_comparison_whose_speculative_rerun_is_short_is_too_short():
    """A sampled rerun is its own length: 70 plain AR tokens against 21 speculative ones is too short to time. The
    control: 32 speculative ones are timed."""
    for n, fair in ((21, False), (MEASURED_TOKENS, True)):
        rerun = tuple(accepted_round(i, ["a"], "b") for i in range(n // 2)) + plain_steps(n % 2)
        comparison = Comparison(ar_events=plain_steps(70), ar_text="", spec_wall_s=0.21, ar_wall_s=0.79,
                                spec_tokens_per_s=98.6, ar_tokens_per_s=88.3, identical=None, spec_events=rerun)
        assert len(comparison.spec_tokens) == n and comparison.short is not fair and comparison.fair is fair


def test_a_short_comparison_at_unequal_loads_is_said_too_short():
    """12 tokens (a continued part's) whose runs met different loads: too few to tell loads apart, so too short is
    what it says. The control: as many tokens as MEASURED_TOKENS at unequal loads are said unequal."""
    from words.wording import SHORT, UNEQUAL, comparison_caveat

    for n, said in ((12, SHORT), (MEASURED_TOKENS, UNEQUAL)):
        comparison = Comparison(ar_events=plain_steps(n), ar_text="x" * n, spec_wall_s=0.2, ar_wall_s=0.16,
                                spec_tokens_per_s=60.1, ar_tokens_per_s=74.6, identical=True, unequal_loads=True)
        assert not comparison.fair and comparison_caveat(comparison) == said


def test_a_comparison_whose_rerun_drafted_little_or_nothing_is_plain_ars_work_and_no_speedup():
    """No draft, and one in 34 tokens (under DRAFTED_SHARE), are plain AR's work; the control: four drafts in 40
    tokens are a fair measurement."""
    from words.wording import UNDRAFTED, comparison_caveat

    for drafting_rounds, fair in ((0, False), (1, False), (4, True)):
        rerun = plain_steps(MEASURED_TOKENS) + tuple(accepted_round(i, ["a"], "b") for i in range(drafting_rounds))
        comparison = Comparison(ar_events=plain_steps(MEASURED_TOKENS), ar_text="", spec_wall_s=0.3, ar_wall_s=0.3,
                                spec_tokens_per_s=102.0, ar_tokens_per_s=100.0, identical=None, spec_events=rerun)
        assert comparison.fair is fair and (comparison_caveat(comparison) == UNDRAFTED) is not fair


def test_a_measured_speedup_above_its_tokens_per_round_is_not_fair():
    """1.33x from rounds that drafted one token each and kept none (a plain AR run timed slow); the control: the same
    from rounds that kept theirs, two tokens a round."""
    from words.wording import BEYOND_ROUNDS, comparison_caveat

    for per_round, fair in ((1, False), (2, True)):
        rerun = tuple(accepted_round(i, ["a"], "b") if per_round == 2 else rejected_round(i, [], "x", "b")
                      for i in range(MEASURED_TOKENS))
        comparison = Comparison(ar_events=plain_steps(MEASURED_TOKENS), ar_text="", spec_wall_s=0.3, ar_wall_s=0.4,
                                spec_tokens_per_s=133.0, ar_tokens_per_s=100.0, identical=None, spec_events=rerun)
        assert comparison.fair is fair and (comparison_caveat(comparison) == BEYOND_ROUNDS) is not fair


def test_a_sampled_comparison_says_its_runs_are_other_samples_than_the_reply():
    """The control: a greedy reply's rerun is its own text, said plainly."""
    from words.wording import comparison_line

    reply_rounds = tuple(accepted_round(i, ["a"], "b") for i in range(MEASURED_TOKENS))
    rerun = tuple(accepted_round(i, ["c"], "d") for i in range(MEASURED_TOKENS // 2))  # another sample, shorter
    comparison = Comparison(ar_events=plain_steps(MEASURED_TOKENS), ar_text="", spec_wall_s=0.3, ar_wall_s=0.4,
                            spec_tokens_per_s=110.0, ar_tokens_per_s=100.0, identical=None, spec_events=rerun)
    for greedy in (False, True):
        reply = Reply(ReplyRequest(({"role": "user", "content": "x"},), DecodeSettings(greedy=greedy)),
                      reply_rounds, "ab" * MEASURED_TOKENS, False)
        said = "other samples of these settings, not this reply's text" in comparison_line(comparison, reply)
        assert said is not greedy


def test_the_new_chat_line_does_not_outlive_a_send_with_other_settings(qtbot):
    """A newcomer's finding: "New chat, decoding as: … up to 128 tokens" stayed while a reply sent with 1,024
    streamed."""
    window = shown_window(qtbot, 1600, 1000)
    window.new_chat()
    assert window.statusBar().currentMessage().startswith("New chat, decoding as:")
    window.controls.max_new_tokens.setValue(1024)
    window.send("hi")
    assert window.statusBar().currentMessage() == ""


def test_a_new_load_clears_the_last_loads_failure(qtbot):
    window = shown_window(qtbot, 1400, 900)
    window.on_pair_loaded(int4_pair())
    window.on_load_failed(int4_pair(), None)
    assert window.statusBar().currentMessage().startswith("Could not load the new pair")
    window.status_bar.on_load_started("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
    assert window.statusBar().currentMessage() == ""


def test_a_load_names_its_own_pair_when_its_progress_opened_first(qtbot):
    """The controller reports the loading state before what loads: the label must not keep the last load's name."""
    window = shown_window(qtbot, 1400, 900)
    window.status_bar.on_load_started("http://127.0.0.1:9/v1", None)
    window.status_bar.open_progress()
    window.status_bar.close_progress()
    window.status_bar.open_progress()  # the next load's state, then its name
    window.status_bar.on_load_started("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
    assert window.pair_label.text() == "Loading qwen2.5-coder-1.5b and qwen2.5-coder-0.5b…"



LONG_READ_IN = PrefillProgress(12880, 14404, 0, 5071.0, 256, 100.8)  # five-digit counts, minutes left


def test_the_read_in_bar_says_the_tokens_read_and_the_time_left_once_a_chunk_is_timed(qtbot):
    window = shown_window(qtbot, 1600, 1000)
    window.on_prefill_progressed(PrefillProgress(1024, 4096, 0, 4.0, 256, 1.0))
    assert window.prefill_progress.text() == "reading: 1,024 of 4,096 tokens, about 12 s left"
    window.on_prefill_progressed(PrefillProgress(256, 4096))  # no chunk timed: no estimate
    assert window.prefill_progress.text() == "reading: 256 of 4,096 tokens"


@pytest.mark.parametrize("bar", ["prefill", "comparison"])
def test_at_1000_by_700_a_long_read_ins_text_is_whole_in_its_bar_beside_the_replys_figures(qtbot, bar):
    window = int4_pair_beside_a_reply_at_1000_by_700(qtbot)
    if bar == "prefill":
        window.on_prefill_progressed(LONG_READ_IN)
    else:
        window.status_bar.on_comparison_reading(LONG_READ_IN)
    QApplication.processEvents()
    shown = drawn(window)
    progress = window.prefill_progress if bar == "prefill" else window.comparison_progress
    assert progress.text().endswith("12,880 of 14,404 tokens, about 10 min left")
    assert progress.fontMetrics().horizontalAdvance(progress.text()) <= progress.contentsRect().width()
    assert set(shown) == {"pair", "reply", bar}
    for (one, a), (other, b) in combinations(shown.items(), 2):
        assert not a.intersects(b), (one, other)
    # the reply's figures give up their least ranked parts, as beside the bars' shorter texts before
    reply = window.reply_label.shown_text()
    assert shows_whole_parts(window.reply_label) and "66.7 tok/s" in reply and "1.33× vs AR" in reply
    assert window.pair_label.shown_text() == "embedded + embedded-draft · …"
