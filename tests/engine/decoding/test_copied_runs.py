"""Copied runs: the lookup index's whole continuation of a match, acceptance by a copy's place in its run, the
target's long blocks priced from their timings, and rounds whose copies go on past γ while output stays AR's."""
import pytest

from engine.decoding.costs import LONG_BLOCKS, Acceptance, CostModel
from engine.decoding.drafters import COPY_RUN_MAX, ContinuationIndex
from engine.decoding.recommend import cost_model_from_dict
from engine.events import DecodeSettings
from tests.engine.decoding.test_lookup_drafter import REPEATING, lookup_decoder, tokens
from tests.tiny import tiny_decoder


def test_a_span_is_what_followed_the_latest_earlier_occurrence_and_follows_rollbacks():
    index = ContinuationIndex(n=3)
    sequence = [1, 2, 3, 7, 1, 2, 3, 8, 5, 1, 2, 3]
    assert index.span(sequence, 3) == (7, [8, 5, 1])  # the latest of two earlier occurrences
    assert index.span(sequence, 99) == (7, [8, 5, 1, 2, 3])  # up to the sequence's end
    assert index.span(sequence[:7], 99) == (3, [7, 1, 2, 3])  # rolled back: the second occurrence is gone
    assert index.span(sequence[:7] + [9], 99) is None  # (2, 3, 9) occurred nowhere before
    assert index.continuation(sequence) == 8


def test_a_copy_s_chance_is_measured_by_its_place_in_its_run():
    acceptance = Acceptance()
    for _ in range(40):  # rounds of a model draft, then ten copies all kept
        acceptance.record(["model"] + ["copy"] * 10, [0.5] * 11, 11)
    chances = acceptance.copy_run(0.5, 1, 10)
    assert chances == sorted(chances) and chances[-1] > 0.95  # a run kept so far goes on being kept
    assert acceptance.copy_run(0.5, 4, 2) == chances[3:5]
    # the run starts after the model draft: counted from the round's start, place 11 would have been reached
    assert len(acceptance.run_reached) == 10


def test_a_long_block_is_priced_between_the_lengths_timed_around_it():
    steps = [0.030 + 0.010 * (k - 1) for k in range(1, 10)]  # 30 ms, then 10 ms a row to 110 ms at 9 rows
    costs = CostModel(steps, long_block_s=[0.150, 0.230])  # 17 and 33 rows: 5 ms a row past 9
    assert LONG_BLOCKS == (17, 33)
    assert costs.block_s(13) == pytest.approx(0.130)
    assert costs.block_s(25) == pytest.approx(0.190)
    assert costs.block_s(41) == pytest.approx(0.270)  # past the longest: the last stretch's growth
    untimed = CostModel(list(steps))
    assert untimed.block_s(17) == pytest.approx(0.190)  # without them: the last measured row's growth goes on
    costs.observe_block(17, 0.140)
    assert costs.long_block_s[0] == 0.140 and costs.block_s(9) == pytest.approx(0.110)
    costs.observe_block(9, 0.5)  # slower than a longer block: a busy moment, bounded by the longer one
    assert costs.block_s(9) == pytest.approx(0.110)
    assert cost_model_from_dict(costs.as_dict()).long_block_s == pytest.approx(costs.long_block_s)
    kept_before = {k: v for k, v in costs.as_dict().items() if k != "long_block_ms"}  # another version's
    assert cost_model_from_dict(kept_before).long_block_s == []


def test_copied_runs_go_on_past_gamma_in_cost_aware_rounds_and_output_stays_ar_s():
    settings = DecodeSettings(gamma=2, max_new_tokens=60)
    events = list(lookup_decoder().generate(REPEATING, settings))
    assert max(e.gamma for e in events) > 2 and max(e.gamma for e in events) <= COPY_RUN_MAX
    ar = tokens(tiny_decoder(draft_seed=None).generate(REPEATING, DecodeSettings(mode="ar", max_new_tokens=60)))
    assert tokens(events) == ar
    confidence = list(lookup_decoder().generate(REPEATING, DecodeSettings(gamma=2, max_new_tokens=60,
                                                                          cost_aware=False, stop_below=0.0)))
    assert max(e.gamma for e in confidence) == 2  # the confidence rule's rounds draft γ at most
    assert tokens(confidence) == ar
