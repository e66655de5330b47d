"""The "why this γ" tab: acceptance by draft position from synthetic rounds, the recommendation beside the γ slider
from a synthetic cost model, Compare drafters on the tiny pair, the export, and the tab's layout at 1000×700."""
from __future__ import annotations

import dataclasses
import json
from html import escape

import pytest
from PySide6.QtGui import QFont, QTextDocumentFragment
from PySide6.QtWidgets import QApplication

from app.chat.export import session_json
from app.why import MeasuredPoint, machine_line, why_gamma
from engine.decoding.recommend import MAX_GAMMA, SPREAD
from engine.events import DecodeSettings, Drafting, ModelInfo, PairInfo
from engine.stats import expected_tokens_per_round, position_acceptance, reply_stats
from tests.ui.helpers import REPLY_TIMEOUT_MS, send, shown_window
from tests.ui.synthetic import accepted_round, in_order, plain_steps, rejected_round
from ui.why.gamma_charts import COLOURS, MIN_WHY_HEIGHT
from ui.window.fit import MIN_HEIGHT, MIN_WIDTH
from ui.window.main_window import MainWindow
from words.records import (MEASURED_TOKENS, Comparison, DrafterComparison, DrafterRun, Reply, ReplyRequest, RoundShown,
                           Session, TurnStarted)
from words.wording import alpha_wording

MODEL_ONLY = DecodeSettings(gamma=4, lookup=False)


def first_reply():
    """γ 3 all kept; 1 kept of 2; none kept of 4; 1 of 1 kept."""
    return [accepted_round(0, ["a", "b", "c"], "d"), rejected_round(1, ["a"], "x", "y"),
            rejected_round(2, [], "x", "y", gamma=4), accepted_round(3, ["a"], "b")]


def second_reply():
    """γ 2 with both kept; γ 2 with none kept."""
    return [accepted_round(0, ["a", "b"], "c"), rejected_round(1, [], "x", "y", gamma=2)]


def window_at(qtbot, width=1400, height=900) -> MainWindow:
    return shown_window(qtbot, width, height)


def draw_reply(window: MainWindow, index: int, events, settings: DecodeSettings = MODEL_ONLY) -> None:
    """What the chat controller sends for one reply: its start, then each round."""
    request = ReplyRequest(({"role": "user", "content": "hi"},), settings)
    window.on_turn_started(TurnStarted(index, request, live=True))
    for event in events:
        window.on_round_received(RoundShown(event, live=True))
    window.why_charts.refresh()


def test_the_chats_bars_count_only_the_loaded_pairs_replies_once_the_why_is_in(qtbot):
    """Two replies of two pairs, drawn live: the chat's bars count both until the controller's why (the loaded
    pair's replies) comes in, then the second reply's alone."""
    one = PairInfo(ModelInfo("t", "/t", 1, 64), ModelInfo("d", "/d", 1, 64), "cpu", "float32")
    other = dataclasses.replace(one, target=ModelInfo("other", "/o", 1, 64))
    window = window_at(qtbot)
    draw_reply(window, 0, first_reply())
    draw_reply(window, 1, second_reply())
    assert window.why_charts.bar_heights("session") == [4 / 6, 2 / 6, 1 / 6, 0.0]
    request = ReplyRequest(({"role": "user", "content": "hi"},), MODEL_ONLY)
    replies = [Reply(request, tuple(events), "x", False) for events in (first_reply(), second_reply())]
    window.on_why_changed(why_gamma(Session(other, replies, reply_pairs={0: one, 1: other})))
    window.why_charts.refresh()
    assert window.why_charts.bar_heights("session") == window.why_charts.bar_heights("reply") == [1 / 2, 1 / 2]


def test_a_last_reply_of_another_pair_has_no_bars_beside_the_loaded_pairs(qtbot):
    """Reopened with the first reply's pair loaded, the chat's last reply (another pair's) is drawn last: its bars
    go once the why comes in, and its line says why; the chat's are the first reply's."""
    one = PairInfo(ModelInfo("t", "/t", 1, 64), ModelInfo("d", "/d", 1, 64), "cpu", "float32")
    other = dataclasses.replace(one, target=ModelInfo("other", "/o", 1, 64))
    window = window_at(qtbot)
    draw_reply(window, 0, first_reply())
    draw_reply(window, 1, second_reply())
    request = ReplyRequest(({"role": "user", "content": "hi"},), MODEL_ONLY)
    replies = [Reply(request, tuple(events), "x", False) for events in (first_reply(), second_reply())]
    window.on_why_changed(why_gamma(Session(one, replies, reply_pairs={0: one, 1: other})))
    window.why_charts.refresh()
    assert window.why_charts.bar_heights("reply") == []
    assert window.why_charts.bar_heights("session") == [3 / 4, 1 / 4, 1 / 4, 0.0]
    legend = QTextDocumentFragment.fromHtml(window.why_charts.headers[window.why_charts.acceptance_plot].text())
    assert "another pair's, left out" in legend.toPlainText()


def test_a_chat_of_another_pair_than_the_loaded_one_says_which_pair_to_load(qtbot):
    """A reopened chat whose replies another pair decoded: the tab names that pair, not "after a speculative
    reply"; the control, the same chat with its own pair loaded, says what its rounds chose."""
    one = PairInfo(ModelInfo("t", "/t", 1, 64), ModelInfo("d", "/d", 1, 64), "cpu", "float32",
                   costs={"target_block_ms": [10.0] * 9, "draft_step_ms": 2.0, "copy_ms": 0.01, "overhead_ms": 0.0})
    other = dataclasses.replace(one, target=ModelInfo("other", "/o", 1, 64))
    request = ReplyRequest(({"role": "user", "content": "hi"},), MODEL_ONLY)
    replies = [Reply(request, tuple(first_reply()), "x", False)]
    window = window_at(qtbot)
    window.on_why_changed(why_gamma(Session(other, replies, reply_pairs={0: one})))
    assert window.why_charts.explanation_text().startswith("Why this γ: this chat's replies were decoded by t + d")
    said = "recommended γ: after a speculative reply of the pair loaded now"
    assert window.pair_pane.controls.recommended.text() == said
    window.on_why_changed(why_gamma(Session(one, replies, reply_pairs={0: one})))
    assert window.why_charts.explanation_text().startswith("Best here")


def test_acceptance_bars_equal_the_hand_count_for_the_reply_and_the_session(qtbot):
    window = window_at(qtbot)
    draw_reply(window, 0, first_reply())
    # kept at position 1 by rounds 0, 1, 3; at 2 and 3 by round 0; at 4 by none: over 4 rounds
    assert window.why_charts.bar_heights("reply") == [3 / 4, 1 / 4, 1 / 4, 0.0]
    draw_reply(window, 1, second_reply())
    assert window.why_charts.bar_heights("reply") == [1 / 2, 1 / 2]
    # the session: 6 rounds; position 1 kept by 4 of them, 2 by 2, 3 by 1, 4 by none
    assert window.why_charts.bar_heights("session") == [4 / 6, 2 / 6, 1 / 6, 0.0]
    engine = position_acceptance(first_reply() + second_reply())
    assert window.why_charts.bar_heights("session") == list(engine.kept)


def test_acceptance_header_gives_mean_length_and_the_seeds_expectation(qtbot):
    window = window_at(qtbot)
    draw_reply(window, 0, first_reply())
    counts = window.why_charts.reply
    alpha = 5 / 7  # accepted 3 + 1 + 0 + 1 of verified 3 + 2 + 1 + 1
    seed = sum(expected_tokens_per_round(alpha, g) for g in (3, 2, 4, 1)) / 4
    assert (counts.mean_accepted, counts.tokens_per_round) == (5 / 4, 9 / 4)
    assert counts.seed_tokens_per_round == pytest.approx(seed)
    header = QTextDocumentFragment.fromHtml(window.why_charts.headers[window.why_charts.acceptance_plot].text())
    assert (f"1.25 of 1.75 checked drafts kept a round (α 0.71), 2.25 tokens/round (seed's E {seed:.2f})"
            in header.toPlainText())


def test_the_acceptance_header_gives_drafts_kept_out_of_those_checked_beside_the_stats_lines_alpha(qtbot):
    """5 drafts kept of the 7 the target checked over 4 rounds: 1.25 of 1.75 a round, whose ratio is the α the chat's
    stats line says for the same rounds, so the count and the share read as two figures that agree."""
    window = window_at(qtbot)
    draw_reply(window, 0, first_reply())
    counts = window.why_charts.reply
    assert (counts.mean_accepted, counts.mean_verified) == (5 / 4, 7 / 4)
    header = QTextDocumentFragment.fromHtml(window.why_charts.headers[window.why_charts.acceptance_plot].text())
    stats_alpha = alpha_wording(reply_stats(first_reply()))
    assert stats_alpha == "α 0.71" and f"1.25 of 1.75 checked drafts kept a round ({stats_alpha})" in (
        header.toPlainText())


def test_an_acceptance_header_of_rounds_that_drafted_nothing_says_no_drafts_were_checked(qtbot):
    """Rounds with no drafts have no α: the line says none were checked, not "0.00 of 0.00" and an α of 0."""
    window = window_at(qtbot)
    draw_reply(window, 0, [dataclasses.replace(accepted_round(i, [], "w"), gamma=0) for i in range(3)])
    header = QTextDocumentFragment.fromHtml(window.why_charts.headers[window.why_charts.acceptance_plot].text())
    assert "this reply: no drafts checked, 1.00 tokens/round" in header.toPlainText()
    assert "α" not in header.toPlainText()


def test_the_acceptance_headers_tooltip_says_what_drafts_kept_a_round_are_beside_alpha(qtbot):
    window = window_at(qtbot)
    draw_reply(window, 0, first_reply())
    tip = window.why_charts.headers[window.why_charts.acceptance_plot].toolTip()
    assert tip.startswith("drafts kept a round: of the drafts the target checked each round, how many it accepted")
    assert "Kept over checked is α, a share: 1.25 of 1.75 drafts kept a round is α 0.71" in tip


def shown_ticks(plot) -> list[float]:
    """The x tick values the plot draws at its range and width."""
    axis = plot.getAxis("bottom")
    low, high = plot.viewRange()[0]
    return [value for _, values in axis.tickValues(low, high, axis.width()) for value in values]


@pytest.mark.parametrize("width", [1000, 1600])
def test_the_why_charts_tick_their_count_axes_at_whole_numbers_only(qtbot, width):
    window = window_at(qtbot, width, 1000)
    window.chart_tabs.setCurrentWidget(window.why_charts)
    draw_reply(window, 0, second_reply())  # drafts 2 long: the acceptance axis spans 0.5 to 2.5
    window.on_why_changed(why_gamma(synthetic_session(2.0)))
    charts = window.why_charts
    for plot in (charts.acceptance_plot, charts.costs_plot, charts.speedup_plot):
        ticks = shown_ticks(plot)
        assert ticks and all(value == int(value) for value in ticks), ticks
    assert shown_ticks(charts.acceptance_plot) == [1.0, 2.0]


def test_a_drafting_round_between_rounds_that_drafted_nothing_is_drawn_on_the_alpha_chart(qtbot):
    """Cost-aware rounds often draft alone: a line between neighbours would leave such a round's α undrawn."""
    from PySide6.QtGui import QColor
    window = window_at(qtbot)
    plain = [dataclasses.replace(accepted_round(i, [], "w"), gamma=0) for i in (0, 2, 4)]
    # round 4's α of 1 stands clear of the running mean (0.5) drawn over the rounds
    draw_reply(window, 0, [plain[0], rejected_round(1, [], "x", "y"), plain[1], accepted_round(3, ["a"], "b"),
                           plain[2]])
    window.charts.refresh()
    image = window.charts.alpha_plot.grab().toImage()
    green = QColor("#7cb342").rgb()
    assert sum(image.pixel(x, y) == green for x in range(image.width()) for y in range(image.height())) > 0


def test_plain_ar_replies_stay_out_of_the_acceptance_count(qtbot):
    window = window_at(qtbot)
    draw_reply(window, 0, first_reply())
    draw_reply(window, 1, second_reply(), DecodeSettings(mode="ar"))
    assert window.why_charts.session.rounds == 4
    legend = QTextDocumentFragment.fromHtml(window.why_charts.headers[window.why_charts.acceptance_plot].text())
    assert "this reply: plain AR, no drafts" in legend.toPlainText().replace("\xa0", " ")  # not "0.00 tokens/round"


# Costs with a flat verification block: a round of γ drafts costs 10 ms + γ drafts, so the analytic optimum is
# argmax (1 + Σ_{i≤γ} K_i) / (10 + γ·c). Rounds of 4 drafts keeping 3, 2, 1 and 0 give K = 3/4, 2/4, 1/4, 0.
def flat_costs(draft_ms: float) -> dict:
    return {"target_block_ms": [10.0] * 9, "draft_step_ms": draft_ms, "copy_ms": 0.01, "overhead_ms": 0.0}


def four_kinds_of_round():
    return [rejected_round(i, ["a"] * kept, "x", "y", gamma=4) for i, kept in enumerate((3, 2, 1))] + [
        rejected_round(3, [], "x", "y", gamma=4)]


def synthetic_session(draft_ms: float) -> Session:
    pair = PairInfo(ModelInfo("t", "/t", 1, 64), ModelInfo("d", "/d", 1, 64), "cpu", "float32",
                    costs=flat_costs(draft_ms))
    request = ReplyRequest(({"role": "user", "content": "hi"},), MODEL_ONLY)
    return Session(pair, [Reply(request, tuple(four_kinds_of_round()), "", False, reference_s=0.01)])


def measured_session(draft_ms: float) -> Session:
    """synthetic_session's reply with two plain rounds after its drafted ones: they measure its live figure, its
    hollow dot."""
    session = synthetic_session(draft_ms)
    reply = session.replies[0]
    session.replies[0] = dataclasses.replace(reply, events=in_order(*reply.events, *plain_steps(2)))
    return session


def analytic_best(draft_ms: float) -> tuple[int, float]:
    kept = [3 / 4, 2 / 4, 1 / 4, 0.0]
    rates = {g: (1 + sum(kept[:g])) / (10 + g * draft_ms) for g in range(1, 5)}
    gamma = max(rates, key=lambda g: (rates[g], -g))
    return (gamma, rates[gamma] * 10) if rates[gamma] > 1 / 10 else (0, 1.0)


@pytest.mark.parametrize("draft_ms", [2.0, 6.0, 9.0])
def test_the_label_beside_the_slider_names_the_analytic_optimum(qtbot, draft_ms):
    window = window_at(qtbot)
    window.on_why_changed(why_gamma(synthetic_session(draft_ms)))
    gamma, speedup = analytic_best(draft_ms)
    label = window.controls.recommended.text()
    if gamma:
        assert label == f"recommended γ ≤ {gamma} (predicted {speedup:.2f}×, draft model)"
    else:
        assert label == "recommended: plain AR (no draft is sure to pay here)"
    assert window.controls.recommended.toolTip().startswith(("drafts stop when", "no draft pays"))
    assert window.why_charts.explanation.text().endswith(window.controls.recommended.toolTip() + ".")
    cost_header = window.why_charts.headers[window.why_charts.costs_plot].text()
    assert escape(machine_line(why_gamma(synthetic_session(draft_ms)))) in cost_header


def test_the_cost_chart_draws_the_measured_blocks_and_the_prediction_per_gamma(qtbot):
    window = window_at(qtbot)
    why = why_gamma(measured_session(2.0))
    window.on_why_changed(why)
    charts = window.why_charts
    x, y = charts.cost_curves["block"].getData()
    assert list(x) == list(range(1, 10)) and list(y) == [10.0] * 9
    assert list(charts.cost_curves["draft"].getData()[1]) == [2.0, 2.0]
    x, y = charts.predicted[Drafting.MODEL].getData()
    assert list(x) == list(range(1, 9)) and list(y) == why.recommendation.speedups[Drafting.MODEL]
    x, y = charts.measured[Drafting.MODEL].getData()  # the reply itself, at its γ cap
    assert list(x) == [4.0] and len(y) == 1


def test_the_cost_chart_names_a_slow_draft_step_in_plain_milliseconds(qtbot):
    window = window_at(qtbot)
    window.on_why_changed(why_gamma(synthetic_session(203.0)))
    assert "draft&nbsp;step&nbsp;203&nbsp;ms" in window.why_charts.headers[window.why_charts.costs_plot].text()


@pytest.mark.parametrize("busy", [False, True])
def test_the_speedup_legend_says_which_dots_are_measured_and_which_live(qtbot, busy):
    """A Compare that met a busy machine leaves its reply's dot hollow, at its live figure (two plain rounds among
    its rounds measure it): the legend must say what hollow means."""
    session = synthetic_session(2.0)
    reply = dataclasses.replace(session.replies[0], events=in_order(*four_kinds_of_round(), *plain_steps(2)))
    comparison = Comparison(plain_steps(MEASURED_TOKENS), "", 1.0, 1.5, 3.0, 2.0, None, machine_busy=busy)
    window = window_at(qtbot)
    window.on_why_changed(why_gamma(Session(session.pair, [reply, reply], {1: comparison})))
    legend = QTextDocumentFragment.fromHtml(window.why_charts.headers[window.why_charts.speedup_plot].text())
    assert "○ draft model live" in legend.toPlainText().replace("\xa0", " ")
    assert ("● draft model measured" in legend.toPlainText().replace("\xa0", " ")) is not busy
    assert f"lines end at γ = {MAX_GAMMA}: longer blocks not timed" in legend.toPlainText().replace("\xa0", " ")


def test_the_tokens_chart_ends_on_the_seeds_e_the_why_tab_gives_the_reply():
    from ui.why.charts import RoundBuffers
    from ui.why.gamma_charts import PositionCounts

    rounds = [accepted_round(0, ["a", "b", "c"], "d"), rejected_round(1, ["a"], "b", "c"),
              accepted_round(2, [], "x"), rejected_round(3, [], "b", "c"), accepted_round(4, ["a"], "b")]
    chart, counts = RoundBuffers(), PositionCounts()
    for event in rounds:
        chart.append(event)
        counts.add(event)
    assert chart.y["expected"][len(rounds) - 1] == pytest.approx(counts.seed_tokens_per_round)
    # the control: E at the last round's γ alone, as the line once drew, is another number
    assert expected_tokens_per_round(counts.alpha, rounds[-1].gamma) != pytest.approx(counts.seed_tokens_per_round)


def test_compare_drafters_gives_four_rows_on_the_tiny_pair(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, greedy=True, max_new_tokens=10, gamma=3, cost_aware=False, stop_below=0.0)
    send(qtbot, studio)
    font = QApplication.font()
    QApplication.setFont(QFont(font.family(), 15))  # a theme's larger font: the columns must still all show
    try:
        with qtbot.waitSignal(studio.chat.drafters_compared, timeout=REPLY_TIMEOUT_MS) as compared:
            studio.window.menus.compare_drafters_action.trigger()
    finally:
        QApplication.setFont(font)
    comparison = compared.args[0].comparison
    assert [run.drafting for run in comparison.runs] == [Drafting.MODEL, Drafting.LOOKUP, Drafting.BOTH,
                                                         Drafting.NONE]
    rows = comparison.rows()
    assert all(row["tokens"] == 10 and row["tokens_per_s"] > 0 for row in rows)
    assert rows[-1]["alpha"] is None and rows[-1]["tokens_per_round"] == 1.0  # plain AR: one token per step
    assert rows[0]["alpha"] is not None and rows[0]["tokens_per_round"] > 1.0
    dialog = studio.window.drafters_dialog
    table = dialog.table
    assert table.rowCount() == 4 and table.item(3, 0).text() == "none (plain AR)"
    assert "γ ≤ 3, γ drafts every round, 10 tokens at most" in dialog.note.text()  # the rule its runs drafted by
    assert all(len(run.others_tokens_per_s) == 1 and max(run.others_tokens_per_s) <= run.stats.tokens_per_s
               for run in comparison.runs)  # each the fastest of two
    assert "Each drafting ran 2 times, all of them in turn, and its row is its fastest run" in dialog.note.text()
    assert studio.chat.status.state.value == "idle"
    assert studio.chat.session.drafters == (comparison,)  # the export and the why tab see the runs
    qtbot.waitExposed(dialog)
    last = table.columnCount() - 1
    assert table.columnViewportPosition(last) + table.columnWidth(last) <= table.viewport().width()  # all in view
    assert table.rowViewportPosition(3) + table.rowHeight(3) <= table.viewport().height()  # every row too


def timed_rounds(events, tokens_per_s: float):
    """The rounds with round times that make them run at `tokens_per_s`."""
    return tuple(dataclasses.replace(e, round_s=len(e.emitted) / tokens_per_s) for e in events)


def copying_measured_at(speedup: float, settings: DecodeSettings = MODEL_ONLY,
                        drafting: Drafting = Drafting.LOOKUP) -> DrafterComparison:
    """Compare drafters where copying only (or `drafting`) kept every draft and ran at `speedup` × its plain AR
    run."""
    copies = [accepted_round(i, ["a", "b", "c"], "d", q=1.0) for i in range(4)]
    plain = [dataclasses.replace(accepted_round(i, [], "x"), gamma=0) for i in range(8)]
    request = ReplyRequest(({"role": "user", "content": "hi"},), settings)
    return DrafterComparison(request, (DrafterRun(drafting, timed_rounds(copies, 100.0 * speedup)),
                                       DrafterRun(Drafting.NONE, timed_rounds(plain, 100.0))))


@pytest.mark.parametrize("speedup", [0.7, 3.0])
def test_a_compare_drafters_measurement_is_a_point_and_the_recommendation_agrees_with_it(speedup):
    """Copying measured at 0.7× is not recommended, its predicted line within one run's spread of its dot; measured
    at 3× (the negative control: the same runs, a faster copy run) it is."""
    session = synthetic_session(2.0)
    session.drafters = (copying_measured_at(speedup),)
    why = why_gamma(session)
    assert (MeasuredPoint(Drafting.LOOKUP, MODEL_ONLY.gamma, pytest.approx(speedup), True, True, "Compare drafters")
            in why.points)
    recommendation = why.recommendation
    predicted = recommendation.speedups[Drafting.LOOKUP][MODEL_ONLY.gamma - 1]
    assert predicted == pytest.approx(speedup * SPREAD if speedup < 1 else speedup / SPREAD)
    assert (recommendation.drafting is Drafting.LOOKUP) is (speedup > 1)
    data = session_json(session)  # the export says what the window says, and keeps the runs
    assert data["why_gamma"]["recommendation"] == json.loads(json.dumps(recommendation.as_dict()))
    assert [row["drafting"] for row in data["drafters"][0]["rows"]] == ["lookup", "none"]


def test_a_confidence_stop_reply_moves_no_line_where_the_drafting_has_cost_aware_rounds():
    """Walk 29: "Best here: plain AR" beside a fair cost-aware reply at 1.16×, the draft model's line held down by
    confidence-stop rounds that drafted 8 and kept none. With a cost-aware reply of the drafting, its rounds alone
    make the line; the control: with that reply gone the confidence-stop rounds are all there is, and they do."""
    session = synthetic_session(2.0)
    alone = why_gamma(session)
    assert alone.recommendation.drafting is Drafting.MODEL
    confidence = dataclasses.replace(MODEL_ONLY, gamma=8, cost_aware=False, stop_below=0.3)
    wasted = tuple(rejected_round(i, [], "x", "y", gamma=8) for i in range(12))
    stopped = Reply(ReplyRequest(({"role": "user", "content": "hey"},), confidence), wasted, "", False,
                    reference_s=0.01)
    session.replies.append(stopped)
    both = why_gamma(session)
    assert both.profiles[Drafting.MODEL] == alone.profiles[Drafting.MODEL]
    assert both.recommendation.speedups == alone.recommendation.speedups
    session.replies.pop(0)
    only_confidence = why_gamma(session)
    assert only_confidence.profiles[Drafting.MODEL] == position_acceptance(wasted)
    assert only_confidence.recommendation.drafting is Drafting.NONE


def test_a_run_drafted_by_the_confidence_stop_is_drawn_apart_and_scales_no_cost_aware_line(qtbot):
    from ui.why.gamma_charts import CONFIDENCE_SAID, CONFIDENCE_SYMBOL, WhyGammaPanel

    predictions = {}
    for cost_aware in (True, False):  # the same run measured at 0.7×; cost-aware, the control, scales the line
        session = synthetic_session(2.0)
        settings = dataclasses.replace(MODEL_ONLY, cost_aware=cost_aware)
        session.drafters = (copying_measured_at(0.7, settings),)
        why = why_gamma(session)
        assert (MeasuredPoint(Drafting.LOOKUP, MODEL_ONLY.gamma, pytest.approx(0.7), True, cost_aware,
                              "Compare drafters") in why.points)
        predictions[cost_aware] = why.recommendation.speedups.get(Drafting.LOOKUP)
    # the confidence stop's rounds feed no line either: the chat has no cost-aware copying to draw one from
    assert predictions[True][MODEL_ONLY.gamma - 1] == pytest.approx(0.7 * SPREAD) and predictions[False] is None
    panel = WhyGammaPanel()
    qtbot.addWidget(panel)
    panel.show_why(why)  # the confidence stop's
    spots = panel.measured[Drafting.LOOKUP].data["symbol"]
    assert list(spots) == [CONFIDENCE_SYMBOL]
    legend = QTextDocumentFragment.fromHtml(panel.headers[panel.speedup_plot].text()).toPlainText().replace("\xa0", " ")
    assert CONFIDENCE_SAID in legend and "copying measured" not in legend
    assert "▲ copying by the confidence stop, measured" in legend  # in copying's colour, as its dot
    assert f"color:{COLOURS[Drafting.LOOKUP]}'>▲" in panel.headers[panel.speedup_plot].text()


def test_a_compare_drafters_row_faster_than_its_rounds_allow_is_said_unfair_and_not_drawn(qtbot):
    """Copying at 4 tokens a round measured at 4.5x (a slow plain AR run): no dot, and its cell says so. The
    control: 3x is a dot and a plain figure."""
    from ui.compare.drafters_dialog import drafters_table

    for speedup, drawn in ((4.5, False), (3.0, True)):
        session = synthetic_session(2.0)
        session.drafters = (copying_measured_at(speedup),)
        assert any(p.drafting is Drafting.LOOKUP for p in why_gamma(session).points) is drawn
        table = drafters_table(session.drafters[0])
        qtbot.addWidget(table)
        assert table.item(0, 5).text().endswith("(not fair: above its tok/round)") is not drawn


def test_each_fairly_compared_part_of_a_continued_reply_is_a_dot_of_its_own():
    """Both parts compared: two dots, each named by its part and with its own speedup; only the last: one. The
    controls: a reply answered in one part is named alone, and a continued reply with no fair comparison is one
    hollow dot, its estimate."""
    session = measured_session(2.0)
    first = session.replies[0]
    measured = Comparison(plain_steps(MEASURED_TOKENS), "", 1.0, 1.5, 3.0, 2.0, None)
    busy = dataclasses.replace(measured, spec_tokens_per_s=4.0, machine_busy=True)
    faster = dataclasses.replace(measured, spec_tokens_per_s=2.5)
    more = dataclasses.replace(first, request=dataclasses.replace(
        first.request, messages=first.request.messages + ({"role": "assistant", "content": first.text},)))

    def dots(comparisons: dict, replies=(first, more)) -> list[tuple[str, float, bool]]:
        return [(p.origin, p.speedup, p.measured)
                for p in why_gamma(Session(session.pair, list(replies), comparisons)).points]

    assert dots({0: faster, 1: measured}) == [("reply 1, part 1 (of 2)", 1.25, True),
                                               ("reply 1, part 2 (of 2)", 1.5, True)]
    assert dots({0: busy, 1: measured}) == [("reply 1, part 2 (of 2)", 1.5, True)]
    assert dots({0: measured}, (first,)) == [("reply 1", 1.5, True)]
    [(origin, _, filled)] = dots({1: busy})
    assert origin == "reply 1" and not filled


def test_a_confidence_stop_run_that_beat_the_recommendation_is_said_under_the_chart(qtbot):
    """Copying by the confidence stop measured at 3x, above the draft model's recommended speedup: the line under
    the chart says so. The control: measured at 0.7x it says nothing."""
    from app.why import confidence_note
    from ui.why.gamma_charts import WhyGammaPanel

    confidence = dataclasses.replace(MODEL_ONLY, cost_aware=False)
    notes = {}
    for speedup in (3.0, 0.7):
        session = synthetic_session(2.0)
        session.drafters = (copying_measured_at(speedup, confidence),)
        notes[speedup] = confidence_note(why_gamma(session))
    assert notes[3.0].startswith("Compare drafters measured copying only at 3.00× with the confidence stop")
    assert notes[0.7] == "" and "own confidence-stop replies" not in notes[3.0]
    # the chat's own confidence-stop replies, fairly measured lower, are said beside it (walk 28)
    session = synthetic_session(2.0)
    session.drafters = (copying_measured_at(3.0, confidence),)
    why = why_gamma(session)
    replies = tuple(MeasuredPoint(Drafting.MODEL, 6, speedup, True, cost_aware=False, origin=f"reply {n}")
                    for n, speedup in ((3, 0.8), (4, 1.01)))
    assert confidence_note(dataclasses.replace(why, points=why.points + replies)).endswith(
        "This chat's own confidence-stop replies measured 0.80–1.01× on their prompts: what drafts pay moves with "
        "what a prompt lets them copy.")
    panel = WhyGammaPanel()
    qtbot.addWidget(panel)
    session = synthetic_session(2.0)
    session.drafters = (copying_measured_at(3.0, confidence),)
    panel.show_why(why_gamma(session))
    assert panel.explanation.text().endswith(notes[3.0])


def test_a_confidence_stop_compare_drafters_leaves_the_lines_as_the_chat_drew_them():
    """Its draft-model rounds, all kept, would raise the draft model's line: cost-aware (the control) they do."""
    lines = {}
    for rule in ("none", "cost-aware", "confidence"):
        session = synthetic_session(2.0)
        if rule != "none":
            settings = dataclasses.replace(MODEL_ONLY, cost_aware=rule == "cost-aware")
            session.drafters = (copying_measured_at(1.0, settings, Drafting.MODEL),)
        lines[rule] = why_gamma(session).recommendation.speedups[Drafting.MODEL]
    assert lines["confidence"] == lines["none"] and lines["cost-aware"] != lines["none"]


def test_dots_at_one_gamma_stand_side_by_side_and_each_says_what_ran_it(qtbot):
    """A reply and a Compare drafters run at the same γ: two dots apart, each with its own tooltip. The control: a
    lone dot stays at its γ."""
    from ui.why.gamma_charts import WhyGammaPanel

    session = measured_session(2.0)
    lone = why_gamma(session)
    settings = dataclasses.replace(MODEL_ONLY, gamma=session.replies[0].gamma)
    session.drafters = (copying_measured_at(0.7, settings),)
    why = why_gamma(session)
    panel = WhyGammaPanel()
    qtbot.addWidget(panel)
    panel.show_why(lone)
    assert list(panel.measured[Drafting.MODEL].getData()[0]) == [float(settings.gamma)]
    panel.show_why(why)
    reply_x = panel.measured[Drafting.MODEL].getData()[0]
    run_x = panel.measured[Drafting.LOOKUP].getData()[0]
    assert len(reply_x) == len(run_x) == 1 and abs(reply_x[0] - run_x[0]) >= 0.1
    assert abs((reply_x[0] + run_x[0]) / 2 - settings.gamma) < 1e-9  # around their γ
    tips = [dots.opts["tip"](x=0, y=0, data=spot.data()) for dots in panel.measured.values() for spot in dots.points()]
    assert sorted(tip.split(":")[0] for tip in tips) == ["Compare drafters", "reply 1"]
    assert (f"Compare drafters: copying only, γ ≤ {settings.gamma}, drafted by cost-aware rounds\n"
            "measured 0.70× vs plain AR (its plain AR run)") in tips
    assert any(tip.startswith("reply 1:") and tip.endswith("(no fair Compare with AR: the reply's live figure)")
               for tip in tips)  # its dot hollow: no comparison ran


def test_after_compare_drafters_the_chat_decodes_as_before(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, greedy=True, max_new_tokens=10, gamma=3, cost_aware=False, stop_below=0.0)
    first = send(qtbot, studio)
    with qtbot.waitSignal(studio.chat.drafters_compared, timeout=REPLY_TIMEOUT_MS):
        studio.window.menus.compare_drafters_action.trigger()
    assert len(studio.chat.turns) == 1  # the comparison is not part of the conversation
    with qtbot.waitSignal(studio.window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        studio.window.regenerate()
    again = studio.chat.replies[-1]
    assert [t.token_id for t in again.tokens] == [t.token_id for t in first.tokens]
    assert any(e.gamma for e in again.events)  # its own drafter is back: it still drafts


def test_a_reply_updates_the_recommendation_beside_the_slider(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, greedy=True, max_new_tokens=10, gamma=3, cost_aware=False, stop_below=0.0)
    before = studio.window.controls.recommended.text()
    send(qtbot, studio)
    recommendation = studio.chat.why.recommendation
    assert recommendation is not None and before != studio.window.controls.recommended.text()
    assert studio.chat.session.pair.costs["target_block_ms"]  # the worker's measured costs reached the session


def test_export_holds_acceptance_by_position_and_the_recommendation(make_studio, mixed_decoder, qtbot, tmp_path):
    studio = make_studio(mixed_decoder, greedy=True, max_new_tokens=10, gamma=3, cost_aware=False, stop_below=0.0)
    reply = send(qtbot, studio)
    studio.chat.export(tmp_path / "session")
    data = json.loads((tmp_path / "session.json").read_text())
    engine = position_acceptance(reply.events)
    assert data["replies"][0]["position_acceptance"]["kept"] == list(engine.kept)
    why = data["why_gamma"]
    assert why["session_acceptance"]["mean_accepted"] == engine.mean_accepted
    assert why["recommendation"] == json.loads(json.dumps(studio.chat.why.recommendation.as_dict()))


@pytest.mark.parametrize("every_kind_of_dot", [False, True])
def test_at_1000_by_700_the_why_tab_charts_are_tall_and_whole(qtbot, every_kind_of_dot):
    """`every_kind_of_dot`: runs of each drafting by both rules, a legend entry for each."""
    window = window_at(qtbot, MIN_WIDTH, MIN_HEIGHT)
    session = synthetic_session(2.0)
    if every_kind_of_dot:
        session.drafters = tuple(copying_measured_at(0.7, dataclasses.replace(MODEL_ONLY, cost_aware=rule), drafting)
                                 for rule in (True, False) for drafting in (Drafting.LOOKUP, Drafting.BOTH))
    window.on_why_changed(why_gamma(session))
    draw_reply(window, 0, first_reply())
    window.chart_tabs.setCurrentIndex(1)
    QApplication.processEvents()
    charts = window.why_charts
    for plot, header in charts.headers.items():
        assert plot.isVisible() and plot.height() >= MIN_WHY_HEIGHT, (header.title, plot.height())
        assert not header.geometry().intersects(plot.geometry())
        assert header.height() >= header.heightForWidth(header.width()), f"{header.title}: legend cut"
    stacked = [charts.explanation] + [w for pair in charts.headers.items() for w in (pair[1], pair[0])]
    for upper, lower in zip(stacked, stacked[1:]):  # the tab scrolls rather than laying them over each other
        assert upper.geometry().bottom() < lower.geometry().top(), (upper, lower)
    viewport = charts.parentWidget()  # the tab's scroll area shows no horizontal bar: wider would be cut off
    assert charts.width() <= viewport.width(), "the tab is wider than its pane"
    label = charts.explanation
    assert label.isVisible() and label.geometry().bottom() <= charts.height()
    assert label.height() >= label.heightForWidth(label.width()), "the explanation is cut"
    assert label.geometry().bottom() < viewport.height(), "the explanation is out of view until the tab scrolls"
    side = window.panes["side"]
    assert not side.horizontalScrollBar().isVisible(), "the controls should fit the side pane's width"
    recommended = window.controls.recommended
    assert recommended.height() >= recommended.heightForWidth(recommended.width())


def test_at_1000_by_700_the_live_charts_keep_their_height_beside_the_tab(qtbot):
    from ui.why.charts import MIN_CHART_HEIGHT

    window = window_at(qtbot, MIN_WIDTH, MIN_HEIGHT)
    for plot in (window.charts.alpha_plot, window.charts.tokens_plot, window.charts.speedup_plot):
        assert plot.height() >= MIN_CHART_HEIGHT


def test_a_recommendation_that_every_fair_run_of_its_drafting_fell_short_of_says_so(qtbot):
    """Recommended: the draft model; measured (cost-aware, fair) at 1.01x, under the 5 % a recommendation needs: the
    line under the chart says so; measured at 1.20x, more than one run's spread below the 1.61x recommended, it says
    that. The controls: measured at 1.50x, or at 1.01x by the confidence stop, it says nothing."""
    from app.why import MeasuredPoint, measured_short_note
    from ui.why.gamma_charts import WhyGammaPanel

    why = why_gamma(synthetic_session(2.0))
    assert why.recommendation.drafting is Drafting.MODEL and why.recommendation.speedup > 1.05

    def measured_at(speedup: float, cost_aware: bool = True):
        return dataclasses.replace(why, points=why.points + (MeasuredPoint(Drafting.MODEL, 4, speedup, True,
                                                                           cost_aware, "Compare drafters"),))

    short = measured_short_note(measured_at(1.01))
    assert short.startswith("Measured: draft model at 1.01× (Compare drafters), short of the 5% gain")
    assert measured_short_note(measured_at(1.20)).startswith("Measured: draft model at 1.20× (Compare drafters), "
                                                             f"below this {why.recommendation.speedup:.2f}×;")
    assert measured_short_note(measured_at(1.50)) == ""
    assert measured_short_note(measured_at(1.01, cost_aware=False)) == ""
    panel = WhyGammaPanel()
    qtbot.addWidget(panel)
    panel.show_why(measured_at(1.01))
    assert panel.explanation.text().endswith(short)


def test_a_prediction_far_above_the_measured_runs_says_the_chats_rounds_keep_more_than_theirs():
    """Walk 29: runs of every drafting measured below plain AR, then the draft model predicted at 1.32×, unexplained.
    A run whose rounds kept nothing, measured at 0.9×, scales the chat's line (its own rounds predicted it slower
    still), so the chat's rounds, 2.5 tokens a round, are predicted far above it: the note says both."""
    from app.why import measured_short_note

    session = synthetic_session(2.0)
    nothing_kept = [rejected_round(i, [], "x", "y", gamma=4) for i in range(8)]
    plain = [dataclasses.replace(accepted_round(i, [], "x"), gamma=0) for i in range(8)]
    request = ReplyRequest(({"role": "user", "content": "hi"},), MODEL_ONLY)
    session.drafters = (DrafterComparison(request, (DrafterRun(Drafting.MODEL, timed_rounds(nothing_kept, 90.0)),
                                                    DrafterRun(Drafting.NONE, timed_rounds(plain, 100.0)))),)
    why = why_gamma(session)
    assert why.recommendation.drafting is Drafting.MODEL and why.recommendation.speedup > 0.9 * SPREAD
    note = measured_short_note(why)
    assert note.startswith("Measured: draft model at 0.90× (Compare drafters), short of the 5% gain this "
                           "recommendation needs; the prediction is of this chat's rounds as a whole, ")
    assert "where the measured runs made 1.00" in note
    session.drafters = ()
    assert measured_short_note(why_gamma(session)) == ""  # the control: nothing measured, nothing to explain


def test_plain_ar_recommended_beside_a_reply_estimated_faster_says_why_they_differ(qtbot):
    """Recommended: plain AR; the last reply's live figure (hollow, cost-aware) 1.15x: the line under the chart
    says that the estimate is at the load the rounds met and the lines at the quietest timings; measured 1.16x
    (walk 29), that the measurement is of its prompt. The controls: 1.02x, estimated or measured, and a recommended
    drafting say nothing."""
    from app.why import MeasuredPoint, estimate_note
    from ui.why.gamma_charts import WhyGammaPanel

    why = why_gamma(synthetic_session(9.0))
    assert why.recommendation.drafting is Drafting.NONE

    def last_reply_at(speedup: float, measured: bool = False, base=why):
        return dataclasses.replace(base, points=base.points + (MeasuredPoint(Drafting.MODEL, 4, speedup, measured,
                                                                             True, "reply 2"),))

    note = estimate_note(last_reply_at(1.15))
    assert note.startswith("Reply 2's live figure, 1.15× (hollow dot), is its rounds' time against its own plain "
                           "rounds at the load they met")
    assert estimate_note(last_reply_at(1.02)) == ""
    measured = estimate_note(last_reply_at(1.16, measured=True))
    assert measured.startswith("Reply 2 measured 1.16× on its own prompt (a fair Compare with AR); the lines "
                               "predict this chat's cost-aware rounds as a whole")
    assert estimate_note(last_reply_at(1.02, measured=True)) == ""
    drafting = why_gamma(synthetic_session(2.0))
    assert drafting.recommendation.drafting is Drafting.MODEL
    assert estimate_note(last_reply_at(1.15, base=drafting)) == ""
    panel = WhyGammaPanel()
    qtbot.addWidget(panel)
    panel.show_why(last_reply_at(1.15))
    assert panel.explanation.text().startswith("Best here: plain AR;") and panel.explanation.text().endswith(note)


def test_the_why_line_says_what_a_checked_row_costs_here_and_the_acceptance_a_draft_needs():
    """A step of 50 ms, a block of two rows 67.5 ms (a row 35 % of a step, as on an AVX2 CPU), a draft step of
    12.5 ms: a one-draft round costs 1.6 steps, so a draft pays above α 0.6; where a draft costs a whole step, no
    draft can pay."""
    costs = {"target_block_ms": [49.5, 67.0], "draft_step_ms": 12.5, "copy_ms": 0.01, "overhead_ms": 0.5}
    why = dataclasses.replace(why_gamma(Session(None, [])), costs=costs, machine="AVX2, 2 threads")
    assert machine_line(why) == ("A checked row costs 35% of a step here (AVX2, 2 threads); a draft pays only where "
                                 "it is kept more often than α ≈ 0.60.")
    dear = dataclasses.replace(why, costs={**costs, "draft_step_ms": 50.0})
    assert machine_line(dear).endswith("no single draft can pay, however often it is kept.")
    assert machine_line(dataclasses.replace(why, costs={})) == ""
