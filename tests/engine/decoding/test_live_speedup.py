"""The live speedup figure (engine.stats.SpeedupMeter): a reply's tokens per second against its own plain rounds,
measured, with its band, or said not to be measured or not fair."""
import dataclasses

import pytest

from engine.events import EmittedToken, Fate, RoundEvent
from engine.stats import MEASURED_PLAIN_ROUNDS, SpeedupMeter, measured_speedup, reply_stats, typical_load
from tests.ui.synthetic import accepted_round


def plain(index: int, step_s: float, quiet_s: float = 0.0) -> RoundEvent:
    """A round that drafted nothing: one plain target step (its drafting decision 0.1 ms of it)."""
    return RoundEvent(index=index, gamma=0, drafted=(), emitted=(EmittedToken(9, "x", Fate.TARGET, 0.7),),
                      text_delta="x", draft_s=1e-4, verify_s=step_s, round_s=step_s + 1e-4, ar_equivalent_s=quiet_s)


def drafted(index: int, round_s: float, tokens: int = 3, quiet_s: float = 0.0) -> RoundEvent:
    event = accepted_round(index, ["a"] * (tokens - 1), "b")
    return dataclasses.replace(event, round_s=round_s, ar_equivalent_s=quiet_s * tokens)


def test_drafted_rounds_are_measured_against_the_reply_s_own_plain_rounds():
    """Three tokens a 30 ms round, plain rounds at 20 ms a token: 2x, with a narrow band."""
    events = [drafted(0, 0.03), drafted(1, 0.03), plain(2, 0.02), drafted(3, 0.03), plain(4, 0.02),
              drafted(5, 0.03)]
    figure = measured_speedup(events)
    ar_s = 2 * 0.02 + 12 * 0.02
    assert figure.fair and figure.value == pytest.approx(ar_s / sum(e.round_s for e in events))
    assert figure.low == pytest.approx(figure.value) == pytest.approx(figure.high)  # the plain rounds agree


def test_a_reply_of_plain_rounds_reads_one_x_as_plain_ar_is_its_own_baseline():
    figure = measured_speedup([plain(i, 0.02) for i in range(10)])
    assert figure.fair and figure.value == pytest.approx(1.0, abs=0.01)


def test_without_enough_plain_rounds_the_figure_says_it_is_not_measured_yet():
    figure = measured_speedup([drafted(0, 0.03), plain(1, 0.02), drafted(2, 0.03)])
    assert figure.value is None and not figure.fair and figure.plain_rounds == MEASURED_PLAIN_ROUNDS - 1
    assert figure.note == "not measured yet"


def test_plain_rounds_that_varied_widely_leave_the_figure_unfair_and_say_so():
    """Another program took the cores now and then: the plain rounds' median is uncertain, and the figure says so;
    the control with steady plain rounds is fair."""
    busy = [drafted(0, 0.03), plain(1, 0.02), plain(2, 0.06), drafted(3, 0.03), plain(4, 0.02), plain(5, 0.07)]
    figure = measured_speedup(busy)
    assert figure.value is not None and not figure.fair and "machine busy" in figure.note
    assert figure.low < figure.value < figure.high
    steady = [dataclasses.replace(e, round_s=0.0201, verify_s=0.02) if not e.gamma else e for e in busy]
    assert measured_speedup(steady).fair


def test_a_figure_faster_than_its_tokens_a_round_allow_is_not_a_fair_one():
    """Every round costs at least a plain step: 2 tokens a round cannot make 3x (its plain rounds met another
    load). The control at 1.5x is fair."""
    events = [drafted(0, 0.02, tokens=2), plain(1, 0.06), plain(2, 0.06), drafted(3, 0.02, tokens=2)]
    figure = measured_speedup(events)
    assert figure.value is not None and not figure.fair and figure.note == "above its tokens per round"
    control = [drafted(0, 0.08, tokens=2), plain(1, 0.06), plain(2, 0.06), drafted(3, 0.08, tokens=2)]
    assert measured_speedup(control).fair


def test_plain_rounds_price_the_others_at_their_load_over_the_cost_model_as_positions_grow():
    """With a cost model, a plain round's load (time over its quiet price) prices the other rounds' tokens at their
    own quiet price: a round deep in a long context costs plain AR more than one near the start."""
    events = [plain(0, 0.04, quiet_s=0.02), plain(1, 0.04, quiet_s=0.02), drafted(2, 0.09, quiet_s=0.03)]
    figure = measured_speedup(events)
    assert figure.value == pytest.approx((0.08 + 2.0 * 0.09) / (0.08 + 2e-4 + 0.09))
    assert typical_load(events[:2]) == pytest.approx(2.0, rel=0.01)


def test_a_continued_part_is_measured_by_its_own_plain_rounds():
    """A busy continuation's plain rounds (one more than the first part's) price its own rounds, not the first
    part's: one median for the whole reply would be the busy part's."""
    first = [plain(0, 0.02), plain(1, 0.02), drafted(2, 0.03)]
    busy_part = [plain(0, 0.06), plain(1, 0.06), plain(2, 0.06), drafted(3, 0.09)]
    events = first + busy_part
    by_parts = (0.04 + 3 * 0.02) + (0.18 + 3 * 0.06)
    assert measured_speedup(events).value == pytest.approx(by_parts / sum(e.round_s for e in events))


def test_the_meter_added_round_by_round_ends_where_the_reply_s_stats_do():
    events = [drafted(0, 0.03), plain(1, 0.02), drafted(2, 0.03), plain(3, 0.021), drafted(4, 0.03)]
    meter = SpeedupMeter()
    for event in events:
        meter.add(event)
    assert meter.figure == reply_stats(events).speedup
    assert meter.round_speedup(events[-1]) == pytest.approx(3 * 0.0205 / 0.03)
