"""Numbers a user can trust: a robust step reference, estimates clamped to γ + 1, a busy machine said out loud,
and a comparison with plain AR that shows its progress, the AR text and why the two differ."""
from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest
from PySide6.QtCore import QUrl

from app.chat.controller import ChatController
from app.chat.timing import RECENT, StepReference, machine_was_busy, unequal_loads
from engine.decoding.costs import CostModel, RoundPlanner
from engine.events import DecodeSettings, EmittedToken, Fate, ModelInfo, PairInfo, RoundEvent
from engine.stats import measured_speedup, reply_stats
from tests.ui.helpers import send
from tests.ui.synthetic import accepted_round, in_order, plain_steps
from ui.chat.document import ACTION_ROW
from ui.why.charts import RoundBuffers
from words.compare import comparison_view, explain, first_difference
from words.records import MEASURED_TOKENS, Comparison, Reply, ReplyRequest
from words.transcript import clean_tokens
from words.wording import busy_note, comparison_line, estimate_apart, speedup_said, stats_line


def ar_step(index: int, token_id: int, text: str, p: float, step_s: float = 0.03) -> RoundEvent:
    return RoundEvent(index=index, gamma=0, drafted=(), emitted=(EmittedToken(token_id, text, Fate.TARGET, p),),
                      text_delta=text, draft_s=0.0, verify_s=step_s, round_s=step_s, target_step_s=step_s)


def test_one_slow_measurement_does_not_move_the_reference():
    reference = StepReference()
    for seconds in (0.030, 0.031, 0.029, 0.030, 1.21):  # one sample taken while the machine was busy
        reference.add(seconds)
    assert reference.seconds == 0.030


def test_a_reply_measured_on_a_busy_machine_is_flagged():
    reference = StepReference()
    for _ in range(5):
        reference.add(0.03)
    quiet = [accepted_round(i, ["a"], "b") for i in range(5)]
    assert not machine_was_busy(quiet, reference)
    busy_step = [dataclasses.replace(e, target_step_s=1.21) for e in quiet]  # the fresh measurement was slow
    assert machine_was_busy(busy_step, reference)
    stalled = [dataclasses.replace(e, verify_s=0.5) for e in quiet]  # the rounds themselves were slow
    assert machine_was_busy(stalled, reference)


def test_a_machine_that_stays_busy_is_judged_against_its_quiet_speed():
    reference = StepReference()
    for seconds in [0.027] * 3 + [0.278] * RECENT:  # quiet at first, then another process took the cores for good
        reference.add(seconds)
    assert reference.seconds == 0.278 and reference.fastest == 0.027
    # The reply's own steps match the slow median: only the quiet floor shows that they are ten times too slow.
    events = [dataclasses.replace(accepted_round(i, ["a"], "b"), target_step_s=0.278, verify_s=0.3, round_s=0.35)
              for i in range(5)]
    assert machine_was_busy(events, reference)
    reference.clear()  # a new pair: its own speed, no floor from the last one
    assert reference.fastest == 0.0 and not machine_was_busy(events, reference)


def test_the_first_reply_is_judged_against_the_step_timed_when_the_pair_loaded():
    chat = ChatController()
    first = [dataclasses.replace(accepted_round(i, ["a"], "b"), target_step_s=0.2) for i in range(5)]
    flagged = []
    for warm_up_s in (0.0, 0.02):  # 0: a pair announced without a warm-up timing
        chat.on_models_loaded(PairInfo(ModelInfo("t", "/t", 1, 64), None, "cpu", "float32",
                                       target_step_s=warm_up_s))
        chat.timing.add_round(first[0])  # the fresh timing before the reply, as the controller adds it
        flagged.append(machine_was_busy(first, chat.timing))
    assert flagged == [False, True]  # alone, a slow fresh timing is its own floor


def test_a_busy_figure_says_it_is_unfair_in_its_own_line():
    """Plain rounds that varied widely (another program on the cores): the figure says so beside it."""
    events = in_order(accepted_round(0, ["a"], "b"), *plain_steps(1), *plain_steps(1, step_s=0.09),
                      accepted_round(0, ["a"], "b"), *plain_steps(1), *plain_steps(1, step_s=0.08))
    reply = Reply(ReplyRequest(({"role": "user", "content": "x"},), DecodeSettings(gamma=2)), events, "ab", False,
                  machine_busy=True)
    assert f"{reply.speedup.value:.2f}× vs AR, drawn (machine busy — not a fair number)" in stats_line(reply)
    assert reply.speedup.high - reply.speedup.low > 0.3 * reply.speedup.value  # the band says how much


def test_on_a_busy_machine_window_and_export_show_one_speedup_figure(make_studio, greedy_mixed_decoder,
                                                                            qtbot, tmp_path, monkeypatch):
    # a cost model far faster than this machine ever runs: every real step looks busy
    fast = CostModel([1e-6] * 9, overhead_s=1e-7)
    monkeypatch.setattr(greedy_mixed_decoder, "costs", fast)
    monkeypatch.setattr(greedy_mixed_decoder, "planner", RoundPlanner(fast))
    studio = make_studio(greedy_mixed_decoder, greedy=True, max_new_tokens=10)
    monkeypatch.setattr(studio.chat.other_programs, "cores", lambda: 2.0)  # other programs kept the machine busy
    window = studio.window
    window.controls.compare_ar.setChecked(True)
    studio.chat.timing.add(1e-6)
    send(qtbot, studio)
    reply = studio.chat.replies[-1]
    shown = window.reply_label.text()
    assert reply.machine_busy and f"{speedup_said(reply.speedup)} · measured" in shown
    assert shown.endswith("× undrawn (machine busy — not a fair number)")  # the AR run was as slow
    assert "The machine was busy during this reply" in window.chat.toPlainText()
    figure, _, _ = speedup_said(reply.speedup).partition(" (")
    assert figure.replace(" ", "\u00a0") in window.chat.document().toRawText()  # it never wraps inside
    studio.chat.export(tmp_path / "s")
    stats = json.loads((tmp_path / "s.json").read_text())["replies"][0]["stats"]
    assert stats["speedup"] == reply.speedup.as_dict() and stats["machine_busy"] is True


def greedy_pair(ar_texts: list[tuple[int, str, float]]) -> tuple[Reply, Comparison]:
    reply_events = (accepted_round(0, ["The", " cat"], " sat", finish="length"),)
    reply = Reply(ReplyRequest(({"role": "user", "content": "x"},), DecodeSettings()), reply_events,
                  "The cat sat", False)
    ar_events = tuple(ar_step(i, token_id, text, p) for i, (token_id, text, p) in enumerate(ar_texts))
    comparison = Comparison(ar_events, "".join(t for _, t, _ in ar_texts), 0.03, 0.09, 100.0, 33.0,
                            identical=[e.emitted[0].token_id for e in ar_events] == [100, 101, 99])
    return reply, comparison


def test_a_greedy_difference_is_located_and_explained_with_its_p_values():
    reply, comparison = greedy_pair([(100, "The", 0.9), (101, " cat", 0.9), (7, " lay", 0.41)])
    assert first_difference([100, 101, 99], [100, 101, 7]) == 2
    sentence = explain(comparison, reply, exact=False)
    assert "part at token 3" in sentence and "“ sat” (p = 0.700)" in sentence and "“ lay” (p = 0.410)" in sentence
    assert "near-tie" in sentence and "exact only up to rounding" in sentence
    view = comparison_view(comparison, reply, "summary", pair=None)
    assert view.first_difference == 2 and view.ar_tokens == ("The", " cat", " lay")


def test_a_stopped_comparison_marks_no_parting_where_it_stopped_and_claims_no_speed():
    reply, finished = greedy_pair([(100, "The", 0.9), (101, " cat", 0.9)])  # plain AR's end, one token short
    assert comparison_view(finished, reply, "summary", pair=None).first_difference == 2  # the control: a difference
    stopped = dataclasses.replace(finished, stopped=True)
    view = comparison_view(stopped, reply, "summary", pair=None)
    assert view.first_difference is None
    assert view.explanation == ("The comparison was stopped early, so no speed is measured; plain AR's 2 tokens are "
                                "the reply's first 2.")
    reply, parted = greedy_pair([(100, "The", 0.9), (7, " dog", 0.4)])
    assert comparison_view(dataclasses.replace(parted, stopped=True), reply, "s", pair=None).first_difference == 1
    before_any = dataclasses.replace(finished, stopped=True, ar_events=())  # stopped before plain AR's first token
    assert comparison_view(before_any, reply, "s", pair=None).explanation == (
        "The comparison was stopped before plain AR made a token, so nothing is measured.")


def test_identical_greedy_outputs_simply_say_so_where_greedy_is_exact():
    reply, comparison = greedy_pair([(100, "The", 0.9), (101, " cat", 0.9), (99, " sat", 0.7)])
    exact = comparison_view(comparison, reply, "summary", pair=SimpleNamespace(greedy_exact=True))
    assert exact.first_difference is None and "exact here" in exact.explanation
    assert "up to rounding" in comparison_view(comparison, reply, "summary", pair=None).explanation


def test_compare_with_ar_shows_progress_then_the_ar_text_beside_the_reply(make_studio, greedy_mixed_decoder,
                                                                          qtbot):
    studio = make_studio(greedy_mixed_decoder, greedy=True, max_new_tokens=10)
    window = studio.window
    window.controls.compare_ar.setChecked(True)
    progressed = []
    studio.worker.comparison_progressed.connect(lambda tokens, aim: progressed.append((tokens, aim)))
    send(qtbot, studio)
    # plain AR's 10 tokens, then the reply's again, out of the 20 both aim at
    assert progressed[-1] == (20, 20) and progressed == sorted(progressed)
    assert not window.comparison_progress.isVisible()
    shown = window.chat.toPlainText()
    assert "both decoded again, undrawn: plain AR 10 tokens" in shown and "vs speculative 10 in" in shown
    assert "greedy outputs identical" in shown
    assert "Plain AR produced the same 10 tokens" in shown
    assert window.chat.document().lastBlock().blockFormat().hasProperty(ACTION_ROW)  # the links stay under it all
    turn = studio.chat.turns[-1]
    comparison, rerun = turn.comparison, reply_stats(turn.comparison.spec_events)
    assert [t.token_id for e in comparison.spec_events for t in e.emitted] == [t.token_id for t in turn.reply.tokens]
    assert comparison.spec_prefill_s == rerun.prefill_s > 0 and comparison.ar_prefill_s > 0
    assert comparison.spec_tokens_per_s == pytest.approx(10 / rerun.decode_s)
    assert comparison.ar_tokens_per_s == pytest.approx(10 / comparison.ar_decode_s)


def test_a_greedy_replys_plain_ar_text_is_offered_where_it_is_the_same(make_studio, greedy_mixed_decoder, qtbot):
    """Greedy, plain AR made the reply's tokens: its text is a link away, drawn beside the reply's as a sampled
    reply's parted text is."""
    studio = make_studio(greedy_mixed_decoder, greedy=True, max_new_tokens=10)
    window = studio.window
    window.controls.compare_ar.setChecked(True)
    send(qtbot, studio)
    chat, comparison = window.chat, studio.chat.turns[-1].comparison
    ar_text = clean_tokens(tuple(t.text for t in comparison.ar_tokens))[0].strip()
    shown = chat.toPlainText()
    assert "Plain AR produced the same 10 tokens" in shown and shown.count(ar_text) == 1  # the reply's own
    chat.on_anchor_clicked(QUrl(chat.document().find("Show plain AR's text").charFormat().anchorHref()))
    beside = chat.toPlainText().split("Hide plain AR's text", 1)[1]
    assert "plain AR\n" in beside and beside.count(ar_text) == 2


def test_tokens_per_s_is_the_decodings_and_a_long_read_in_is_named_beside_it():
    request = ReplyRequest(messages=({"role": "user", "content": "a long prompt"},), settings=DecodeSettings())
    rounds = [accepted_round(i, ["a", "b"], "c") for i in range(4)]  # 12 tokens in 0.12 s of rounds
    read_long = Reply(request, (dataclasses.replace(rounds[0], prefill_s=2.0), *rounds[1:]), "abc" * 4, False)
    read_short = Reply(request, (dataclasses.replace(rounds[0], prefill_s=0.01), *rounds[1:]), "abc" * 4, False)
    assert read_long.stats.tokens_per_s == pytest.approx(100.0) == read_short.stats.tokens_per_s
    assert read_long.stats.wall_s == pytest.approx(2.12)
    assert "100.0 tok/s" in stats_line(read_long) and "prompt read in 2.0 s" in stats_line(read_long)
    assert "prompt read" not in stats_line(read_short)


def test_a_comparison_measures_the_decoding_and_names_each_read_in():
    steps = tuple(ar_step(i, 5, "w5", 0.9, step_s=0.02) for i in range(12))  # 12 tokens in 0.24 s
    request = ReplyRequest(messages=({"role": "user", "content": "w3"},), settings=DecodeSettings())
    reply = Reply(request, (dataclasses.replace(accepted_round(0, ["a", "b"], "c"), prefill_s=1.5),
                            *(accepted_round(i, ["a", "b"], "c") for i in range(1, 4))), "abc" * 4, False)
    comparison = Comparison(ar_events=steps, ar_text="w5" * 12, spec_wall_s=1.62, ar_wall_s=1.44,
                            spec_tokens_per_s=100.0, ar_tokens_per_s=50.0, identical=None, spec_prefill_s=1.5,
                            ar_prefill_s=1.2)
    line = comparison_line(comparison, reply)
    assert "12 tokens in 0.24 s (50.0 tok/s)" in line and "12 in 0.12 s (100.0 tok/s)" in line
    assert "read in 1.2 s by AR, 1.5 s by both models" in line


def drawn_rounds() -> tuple[RoundEvent, ...]:
    """Four rounds of 3 tokens in 30 ms and two plain rounds of 20 ms between them: 14 tokens in 0.16 s drawn,
    1.75× its plain rounds."""
    rounds = [accepted_round(0, ["a", "b"], "c")] * 2
    return in_order(*rounds, *plain_steps(2), *rounds)


def test_a_greedy_reply_drawn_far_slower_than_its_undrawn_rerun_says_what_its_estimate_is_of():
    """14 tokens drawn in 0.16 s (87.5 tok/s) against 125 tok/s undrawn: the line says so; against 95 tok/s (the
    control) it does not, nor for a sampled reply, whose rerun is another sample."""
    steps = tuple(ar_step(i, 5, "w5", 0.9, step_s=0.02) for i in range(12))
    rounds = drawn_rounds()
    greedy = Reply(ReplyRequest(({"role": "user", "content": "w3"},), DecodeSettings()), rounds, "abc" * 4, False)
    sampled = Reply(ReplyRequest(({"role": "user", "content": "w3"},), DecodeSettings(greedy=False)), rounds,
                    "abc" * 4, False)
    rerun = lambda tokens_per_s: Comparison(  # noqa: E731
        ar_events=steps, ar_text="w5" * 12, spec_wall_s=12 / tokens_per_s, ar_wall_s=0.24,
        spec_tokens_per_s=tokens_per_s, ar_tokens_per_s=50.0, identical=None, spec_events=rounds)
    said = "Drawn as it streamed, the reply made 87.5 tok/s, 30% below its undrawn run: its live × is of the reply"
    assert estimate_apart(rerun(125.0), greedy).startswith(said)
    assert "live × was of it as drawn" in comparison_line(rerun(125.0), greedy)  # the line's short word of it
    assert estimate_apart(rerun(95.0), greedy) == estimate_apart(rerun(125.0), sampled) == ""
    assert "as drawn" not in comparison_line(rerun(95.0), greedy)


def test_an_estimate_far_from_its_measurement_says_both_factors_though_drawing_cost_little():
    """Walk 29: est. 0.81× beside measured 0.96×, drawn only 9 % slower, and no word why. Here the reply's live
    figure is 1.75× at 87.5 tok/s drawn (its plain rounds at 50 tok/s) and its undrawn run made 92 tok/s against
    plain AR's 40: measured 2.30×, so the line names both factors. The control: plain AR at 50 undrawn (1.84×)
    says nothing."""
    rounds = drawn_rounds()
    greedy = Reply(ReplyRequest(({"role": "user", "content": "w3"},), DecodeSettings()), rounds, "abc" * 4, False)
    steps = tuple(ar_step(i, 5, "w5", 0.9, step_s=0.02) for i in range(12))
    rerun = lambda ar_tokens_per_s: Comparison(  # noqa: E731
        ar_events=steps, ar_text="w5" * 12, spec_wall_s=14 / 92.0, ar_wall_s=14 / ar_tokens_per_s,
        spec_tokens_per_s=92.0, ar_tokens_per_s=ar_tokens_per_s, identical=None, spec_events=rounds)
    assert greedy.speedup.value == pytest.approx(1.75)
    assert "measured 2.30×" in comparison_line(rerun(40.0), greedy)
    assert ("the reply made 87.5 tok/s, 5% below its undrawn run: its live × is of the reply as drawn (1.75×, "
            "against plain AR at about 50.0 tok/s as its own plain rounds ran, where undrawn it made 40.0)"
            ) in estimate_apart(rerun(40.0), greedy)
    assert estimate_apart(rerun(50.0), greedy) == ""


def test_the_chat_gives_why_the_estimate_stands_apart_on_demand(qtbot):
    """Under the reply, the comparison's line says it in a few words; hovering it gives both factors."""
    from ui.chat.view import ChatView
    from words.compare import comparison_view

    rounds = drawn_rounds()
    greedy = Reply(ReplyRequest(({"role": "user", "content": "w3"},), DecodeSettings()), rounds, "abc" * 4, False)
    steps = tuple(ar_step(i, 5, "w5", 0.9, step_s=0.02) for i in range(12))
    comparison = Comparison(ar_events=steps, ar_text="w5" * 12, spec_wall_s=12 / 105.0, ar_wall_s=12 / 40.0,
                            spec_tokens_per_s=105.0, ar_tokens_per_s=40.0, identical=None, spec_events=rounds)
    chat = ChatView()
    qtbot.addWidget(chat)
    chat.begin_reply("Assistant")
    for event in rounds:
        chat.add_round(event)
    chat.add_comparison(comparison_view(comparison, greedy, comparison_line(comparison, greedy), None))
    line = chat.document().find("live × was of it as drawn")
    assert not line.isNull() and line.charFormat().toolTip() == estimate_apart(comparison, greedy) != ""
    assert "against plain AR at about" not in chat.toPlainText()


def test_a_stopped_ar_comparison_claims_no_speedup():
    steps = tuple(ar_step(i, 5, "w5", 0.9) for i in range(2))
    request = ReplyRequest(messages=({"role": "user", "content": "w3"},), settings=DecodeSettings())
    reply = Reply(request, tuple(accepted_round(i, ["a", "b"], "c") for i in range(8)), "abc" * 8, False)
    finished = Comparison(ar_events=steps, ar_text="w5 w5", spec_wall_s=0.24, ar_wall_s=0.06, spec_tokens_per_s=100.0,
                          ar_tokens_per_s=33.0, identical=None)
    assert "measured 3.03×" in comparison_line(finished, reply)
    stopped = dataclasses.replace(finished, stopped=True)
    assert comparison_line(stopped, reply) == "comparison stopped (plain AR made 2 tokens): no measured speedup"


def costed(event: RoundEvent, ar_step_s: float) -> RoundEvent:
    """The round as the engine reports it with a cost model: its tokens' AR time at `ar_step_s` a step."""
    return dataclasses.replace(event, ar_equivalent_s=len(event.emitted) * ar_step_s)


def test_a_busy_machine_leaves_a_figure_measured_by_the_reply_s_own_plain_rounds_fair():
    """Its plain rounds met the machine as the drafted ones did: the figure stands beside a busy machine's tok/s.
    The control: with one plain round the figure is not measured, and the note under the reply says so."""
    request = ReplyRequest(messages=({"role": "user", "content": "w3"},), settings=DecodeSettings())
    plain = [costed(ar_step(i, 5, "w5", 0.9, step_s=0.03), 0.01) for i in range(8)]
    drafted = [costed(accepted_round(8 + i, ["a", "b"], "c"), 0.01) for i in range(4)]
    measured = Reply(request, tuple(plain + drafted), "w5" * 8 + "abc" * 4, False, machine_busy=True)
    unmeasured = Reply(request, tuple(plain[:1] + drafted), "w5" + "abc" * 4, False, machine_busy=True)
    assert measured.speedup.fair and not unmeasured.speedup.fair
    assert "tok/s (machine busy)" in stats_line(measured) and "not a fair number" not in stats_line(measured)
    assert stats_line(unmeasured).endswith("× vs AR not measured yet") and unmeasured.speedup.plain_rounds == 1
    assert busy_note(measured) is None and "not a fair number" in busy_note(unmeasured)  # no note where it allowed


def test_the_chart_ends_on_the_figure_the_stats_line_shows():
    events = [costed(accepted_round(i, ["a"] * (i % 3), "c"), 0.012) for i in range(6)]  # rounds 0 and 3 plain
    reply = Reply(ReplyRequest(({"role": "user", "content": "x"},), DecodeSettings(gamma=3)), tuple(events), "",
                  False, reference_s=0.02)
    buffers = RoundBuffers()
    for event in events:
        buffers.append(event)
    assert buffers.series("speedup_mean")[1][-1] == pytest.approx(reply.speedup.value)
    line = stats_line(reply)
    assert speedup_said(reply.speedup) in line and f"{reply.speedup.value:.2f}× vs AR" in line


def test_a_reply_whose_rounds_ran_far_slower_than_the_cost_model_reckons_is_flagged_busy():
    reference = StepReference()
    reference.add(0.2)  # the only timings so far are this reply's own slow ones: alone they look quiet
    rounds = [costed(dataclasses.replace(accepted_round(i, ["a"], "b"), target_step_s=0.2, verify_s=0.25), 0.03)
              for i in range(5)]
    loaded = lambda *loads: [dataclasses.replace(e, load=x) for e, x in zip(rounds, loads)]  # noqa: E731
    assert machine_was_busy(loaded(2.5, 2.5, 2.5, 2.5, 2.5), reference)
    assert machine_was_busy(loaded(3.0, 3.0, 1.0, 1.0, 1.0), reference)  # two in five: more than one in five
    assert not machine_was_busy(loaded(3.0, 1.0, 1.0, 1.0, 1.0), reference)
    assert not machine_was_busy(loaded(1.5, 1.5, 1.5, 1.5, 1.5), reference)  # slower, not far slower


def test_a_reply_at_the_cost_models_speed_is_not_flagged():
    reference = StepReference()
    reference.add(0.03)
    quiet = [costed(dataclasses.replace(accepted_round(i, ["a"], "b"), target_step_s=0.03, verify_s=0.035), 0.03)
             for i in range(5)]
    assert not machine_was_busy(quiet, reference)


def test_a_speculative_replys_running_figure_starts_at_its_second_plain_round_and_keeps_whole():
    events = [costed(accepted_round(i, ["a"] if i in (0, 5) else [], "c"), 0.012) for i in range(6)]
    buffers = RoundBuffers()
    for event in events:
        buffers.append(event)
    running = buffers.series("speedup_mean")[1]
    assert np.isnan(running[:2]).all()  # not measured before two plain rounds
    assert not np.isnan(running[2:]).any()  # then no gap where the rounds chose not to draft


def test_a_plain_ar_reply_charts_no_speedup():
    buffers = RoundBuffers(speculative=False)
    for i in range(5):
        buffers.append(ar_step(i, 7, "w", 0.5, step_s=0.03 if i else 0.005))  # a fast first step
    assert np.isnan(buffers.series("speedup")[1]).all() and np.isnan(buffers.series("speedup_mean")[1]).all()


def test_a_comparison_whose_runs_met_different_loads_says_it_is_not_a_fair_number():
    reply_rounds = [dataclasses.replace(costed(accepted_round(i, ["a", "b"], "c"), 0.015), load=1.4) for i in range(4)]
    # plain steps: their load is what they took in full over their quiet cost (1.0, then 1.2)
    ar_steps = [costed(ar_step(i, 5, "w5", 0.9, step_s=0.010), 0.01) for i in range(MEASURED_TOKENS)]
    assert unequal_loads(reply_rounds, ar_steps) and unequal_loads(ar_steps, reply_rounds)
    alike = [costed(ar_step(i, 5, "w5", 0.9, step_s=0.012), 0.01) for i in range(12)]
    assert not unequal_loads(reply_rounds, alike)
    assert not unequal_loads(reply_rounds, [ar_step(i, 5, "w5", 0.9) for i in range(12)])  # no cost model: no loads
    request = ReplyRequest(messages=({"role": "user", "content": "w3"},), settings=DecodeSettings())
    reply = Reply(request, tuple(reply_rounds), "abc" * 4, False)
    comparison = Comparison(ar_events=tuple(ar_steps), ar_text="w5" * 12, spec_wall_s=0.12, ar_wall_s=0.24,
                            spec_tokens_per_s=100.0, ar_tokens_per_s=50.0, identical=None, unequal_loads=True)
    assert comparison_line(comparison, reply).endswith("measured 2.00× (the two runs met the machine at different "
                                                       "loads — not a fair number)")


def test_a_speculative_reply_that_drafted_nothing_says_so_instead_of_an_alpha():
    request = ReplyRequest(messages=({"role": "user", "content": "hi"},), settings=DecodeSettings())
    steps = Reply(request, tuple(ar_step(i, 5, "w5", 0.9) for i in range(3)), "w5" * 3, False)
    drafted = Reply(request, tuple(accepted_round(i, ["a"], "b") for i in range(3)), "ab" * 3, False)
    assert " · no drafts · 1.00 tok/round" in stats_line(steps) and "α" not in stats_line(steps)
    assert " · α 1.00 · 2.00 tok/round" in stats_line(drafted)


def plain_step(index: int, load: float, quiet_s: float = 0.0094) -> RoundEvent:
    """A plain target step (no draft) that took `load` times its quiet cost."""
    step = dataclasses.replace(costed(accepted_round(index, [], "w"), quiet_s), gamma=0, draft_s=0.0002)
    return dataclasses.replace(step, round_s=quiet_s * load + step.draft_s, verify_s=quiet_s * load, load=load)


def test_a_reply_of_plain_steps_reads_one_x_though_one_of_them_stalled_81_times_over():
    """The twenty-second walk's reply (another program on the cores): 35 plain steps, seven of the first eight
    stalled (one 81 times its quiet cost), the rest at twice it on one thread. Each plain step is the step plain
    AR would have run: about 1x. The control, the mean load of the last 32 plain steps, read 1.84x."""
    loads = [6.6, 20.7, 7.0, 3.2, 8.0, 17.7, 81.2, 2.5] + [2.0 + 0.1 * (i % 5) for i in range(27)]
    events = [plain_step(i, load) for i, load in enumerate(loads)]
    assert measured_speedup(events).value == pytest.approx(1.0, abs=0.03)
    mean_load = sum(loads[-32:]) / 32
    assert sum(e.ar_equivalent_s for e in events[8:]) * mean_load / sum(e.round_s for e in events[8:]) > 1.5


def test_a_drafted_round_that_stalled_most_of_a_reply_leaves_its_estimate_unfair_and_the_reply_busy():
    """Its first round (drafting) took 830 ms of a 1.26 s reply, 15.8 times its quiet forward; the plain steps
    after it ran at about their quiet cost. No plain step met that load, so the estimate cannot price it: the
    reply is busy and its estimate not a fair number. The control: the same first round at 20 ms."""
    def replies(first_round_s: float) -> Reply:
        first = dataclasses.replace(costed(accepted_round(0, ["a", "b", "c", "d"], "e"), 0.0094),
                                    round_s=first_round_s, load=first_round_s / 0.025)
        events = (first, *(plain_step(1 + i, 1.1) for i in range(20)),
                  *(dataclasses.replace(costed(accepted_round(21 + i, ["a", "b", "c", "d"], "e"), 0.0094),
                                        round_s=0.017, load=1.02) for i in range(8)))
        return Reply(ReplyRequest(({"role": "user", "content": "hi"},), DecodeSettings()), events, "", False)

    stalled, quiet = replies(0.83), replies(0.02)
    assert machine_was_busy(stalled.events, StepReference()) and not stalled.speedup.fair
    assert "machine busy" in stalled.speedup.note
    assert not machine_was_busy(quiet.events, StepReference()) and quiet.speedup.fair
