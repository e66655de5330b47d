"""The cost model and the round planner on synthetic costs: their choices against the analytic optimum."""
import dataclasses

import pytest
import torch

from engine.decoding.costs import (DECAY, DRIFT_LEAST, EARLY_PROBE, PAUSE_ROUNDS, PAYING_WINDOW, PRIOR, PRIOR_WEIGHT,
                                   PROBE_EVERY, RECENT_ROUNDS, TRY_AFTER, Acceptance, CostModel, LoadGap, RoundPlanner,
                                   expected_tokens)
from engine.events import DecodeSettings
from engine.stats import MEASURED_PLAIN_ROUNDS
from tests.tiny import tiny_decoder


def costs(draft_ms: float, row_ms: float = 1.0, step_ms: float = 10.0) -> CostModel:
    return CostModel([(step_ms + row_ms * k) / 1e3 for k in range(9)], draft_step_s=draft_ms / 1e3,
                     copy_s=0.01 / 1e3, overhead_s=0.5 / 1e3)


def rate(model: CostModel, chances: list[float]) -> float:
    return expected_tokens(chances) / model.round_s(["model"] * len(chances))


def test_expected_tokens_is_the_seed_s_formula_for_a_constant_alpha():
    alpha, gamma = 0.7, 5
    assert expected_tokens([alpha] * gamma) == pytest.approx((1 - alpha ** (gamma + 1)) / (1 - alpha))


@pytest.mark.parametrize("draft_ms", [0.5, 2.0, 6.0])
@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.9])
def test_planned_length_is_the_analytic_optimum_for_a_known_acceptance(draft_ms, alpha):
    model = costs(draft_ms)
    planner = RoundPlanner(model, Acceptance(kept=[alpha * 100] * 8, reached=[100.0] * 8))
    chances = [planner.acceptance.at(i) for i in range(1, 9)]
    best = max(range(9), key=lambda d: rate(model, chances[:d]))
    kinds, drafted = [], []
    while planner.draft_more(kinds, drafted, 8):  # drafts whose chance is the measured one
        kinds.append("model")
        drafted.append(chances[len(drafted)])
    # the hope (Acceptance.hoped) may make one draft more than the optimum; once made, it is verified where that pays
    assert len(kinds) in (best, best + 1) and planner.best_length(kinds, drafted) in (best, len(kinds))


def test_one_rejected_first_draft_does_not_stop_drafting_and_repeated_ones_do():
    """A draft at 2/3 of a step's cost pays above a chance of ~0.56: the prior (0.6) and one rejection put the plain
    estimate at 0.48, under it; the hope keeps drafting on. Three rejections in a row stop it (the control)."""
    planner = RoundPlanner(costs(draft_ms=6.0, row_ms=5.5, step_ms=21.0))
    planner.acceptance.record(["model"], [0.6], n_accepted=0)
    assert planner.acceptance.at(1) < 0.5 and planner.draft_more([], [], 6)
    for _ in range(2):
        planner.acceptance.record(["model"], [0.6], n_accepted=0)
    assert not planner.draft_more([], [], 6)


def test_a_new_chat_drafts_again_where_the_last_chats_rejections_had_stopped_drafting(qapp):
    """The worker's New chat: a planner whose drafts were all rejected (greedy and sampled) judges the next chat's
    from the prior again, with its costs unchanged. The control: a new reply in the same chat keeps the verdicts."""
    from app.chat.worker import DecodeWorker

    worker = DecodeWorker(tiny_decoder())
    planner = worker.decoder.planner = RoundPlanner(costs(draft_ms=6.0, row_ms=5.5, step_ms=21.0))
    for greedy in (True, False):
        planner.decode(greedy)
        for _ in range(3):
            planner.acceptance.record(["model"], [0.6], n_accepted=0)
    assert not planner.draft_more([], [], 6)
    worker.decoder.reset()  # what a reply's own prefill may do: the verdicts stay
    assert not planner.draft_more([], [], 6)
    worker.on_new_chat_requested()
    for greedy in (True, False):
        planner.decode(greedy)
        assert planner.acceptance.at(1) == pytest.approx(PRIOR) and planner.draft_more([], [], 6)
    assert planner.costs.draft_step_s == pytest.approx(6.0e-3)


def test_a_round_drafts_nothing_where_no_draft_can_pay():
    planner = RoundPlanner(costs(draft_ms=30.0))
    assert not planner.draft_more([], [], 8)


def test_a_sure_copy_is_drafted_where_a_model_draft_is_not():
    planner = RoundPlanner(costs(draft_ms=30.0))
    planner.acceptance = Acceptance(kept=[95.0], reached=[100.0])
    assert planner.draft_more([], [], 8, next_kind="copy")
    assert not planner.draft_more([], [], 8, next_kind="model")


def test_a_draft_model_far_behind_pays_its_reading_before_it_drafts_again():
    model = costs(draft_ms=1.0)
    planner = RoundPlanner(model, Acceptance(kept=[80.0] * 4, reached=[100.0] * 4))
    assert planner.draft_more([], [], 8, unread=200)  # no reading seen yet: priced as free
    model.observe_read(50, 50 * 0.5e-3)  # half a millisecond a token: 200 tokens cost ten target steps
    assert planner.draft_more([], [], 8, unread=1)
    assert not planner.draft_more([], [], 8, unread=200)
    assert planner.draft_more([], [], 8, next_kind="copy", later_kind="copy", unread=200)  # copies read nothing
    assert planner.draft_more(["model"], [0.8], 8, unread=200)  # once read, the reading is paid


def test_a_kind_s_first_drafts_are_judged_by_their_own_record():
    """Copies kept at the first position do not make the draft model's first draft look sure: it is judged by
    how the model's own first drafts fared (before, one count per position: the model drafted on the copies' hope)."""
    planner = RoundPlanner(costs(draft_ms=3.0))
    for _ in range(30):
        planner.acceptance.record(["copy"], [0.83], n_accepted=1)
        planner.acceptance.record(["model"], [0.5], n_accepted=0)
        planner.acceptance.record(["copy"], [0.83], n_accepted=1)
    assert planner.acceptance.at(1) > 0.6  # the position's chance, every kind's
    assert planner.draft_more([], [], 8, next_kind="copy", later_kind="copy")
    assert not planner.draft_more([], [], 8, next_kind="model")
    assert planner.draft_more(["copy"], [0.9], 8, next_kind="model")  # past the first position, the position's


def test_a_drafted_token_too_unlikely_to_be_kept_is_not_verified():
    planner = RoundPlanner(costs(draft_ms=1.0, row_ms=4.0))
    assert planner.best_length(["model", "model"], [0.9, 0.01]) == 1


def test_longer_blocks_than_measured_grow_by_the_last_step():
    model = CostModel([0.010, 0.012, 0.015])
    assert model.block_s(5) == pytest.approx(0.021)


def test_a_block_timed_in_a_busy_moment_costs_no_more_than_what_bounds_it():
    model = CostModel([0.004, 0.133, 0.010, 0.012])  # the 2-row block was caught by another job
    assert model.block_s(2) == pytest.approx(0.008)  # two single steps
    assert CostModel([0.004, 0.011, 0.009]).block_s(2) == pytest.approx(0.008)
    assert CostModel([0.004, 0.0075, 0.009]).block_s(2) == pytest.approx(0.0075)  # a quiet timing stands


def test_observations_only_ever_lower_a_block_and_the_bookkeeping():
    model = costs(draft_ms=1.0)
    model.observe_round([], 0.5, 1.5)  # a busy round
    assert model.block_s(1) == pytest.approx(0.010) and model.overhead_s == pytest.approx(0.0005)
    model.observe_round([], 0.0095, 0.0099)
    assert model.block_s(1) == pytest.approx(0.0095) and model.overhead_s == pytest.approx(0.0004)


def test_a_draft_s_bookkeeping_is_learnt_from_quiet_rounds_only():
    model = costs(draft_ms=1.0)  # a block of 3 rows: 12 ms; bookkeeping 0.5 ms
    for _ in range(100):  # two drafts, each costing 0.3 ms beyond its step
        model.observe_round(["model", "model"], 0.012, 0.012 + 2 * 0.001 + 0.0005 + 2 * 0.0003)
    assert model.per_draft_s == pytest.approx(0.0003, rel=0.05)
    model.observe_round(["model", "model"], 0.5, 0.6)  # busy: left out
    assert model.per_draft_s == pytest.approx(0.0003, rel=0.05)
    assert model.round_s(["model"]) == pytest.approx(0.001 + 0.0003 + 0.011 + 0.0005, rel=0.01)


def test_a_drafted_round_that_waited_outside_its_forward_teaches_no_bookkeeping():
    """Its forward was quiet, but the round stood still beside it (the window's drawing holding Python's lock)."""
    model = costs(draft_ms=1.0)
    model.observe_round(["model", "model"], 0.012, 0.012 + 2 * 0.001 + 0.0005 + 0.040)
    assert model.per_draft_s == 0.0


def test_a_draft_priced_out_by_a_dear_moment_is_tried_again_after_rounds_without_drafts():
    """No round drafts while even a draft that is always kept would not pay, so none would ever measure it again."""
    model = costs(draft_ms=1.0)
    model.per_draft_s = 0.050
    sure_draft_pays = lambda: model.round_s(["model"]) < 2 * model.ar_step_s()  # noqa: E731 - two tokens a round
    assert not sure_draft_pays()
    for _ in range(1000):  # a few replies' worth of plain rounds
        model.observe_round([], 0.010, 0.0105)
    assert sure_draft_pays()


def test_acceptance_counts_each_position_reached_and_kept():
    acceptance = Acceptance()
    acceptance.record(["model", "copy", "model"], [0.5, 0.8, 0.5], n_accepted=1)
    # positions 1 and 2 were judged (kept, rejected); position 3 was never looked at
    assert acceptance.reached == [1.0, 1.0] and acceptance.kept == [1.0, 0.0]
    assert acceptance.at(1) > PRIOR > acceptance.at(2)
    assert acceptance.at(3) == pytest.approx(PRIOR)


def test_calibration_scales_estimates_by_what_was_kept():
    acceptance = Acceptance()
    for _ in range(200):
        acceptance.record(["copy"], [0.8], n_accepted=0)  # copies the target never keeps
    assert acceptance.calibrated(0.8, "copy") < 0.1
    assert acceptance.calibrated(0.8, "model") == pytest.approx(0.8)


def test_the_optimum_moves_with_the_draft_cost():
    """Negative control for the optimum test: the optimum it checks against is not one fixed length."""
    chances = [0.6] * 8
    cheap, dear = costs(0.5), costs(6.0)
    best = [max(range(9), key=lambda d, m=m: rate(m, chances[:d])) for m in (cheap, dear)]
    assert best[0] > best[1]
    assert all(rate(cheap, chances[:best[0]]) >= rate(cheap, chances[:d]) for d in range(9))


def test_a_block_after_a_draft_is_planned_at_what_rounds_that_drafted_measured():
    model = costs(draft_ms=1.0)  # blocks timed back to back: 10, 11, 12 ms
    model.observe_round(["model"], 0.0135, 0.0135 + 0.001 + 0.0005)  # the draft's run left the caches colder
    assert model.verify_s(2, model_ran=True) == pytest.approx(0.0135)
    assert model.verify_s(2, model_ran=False) == pytest.approx(0.011)  # a round of copies is not slowed
    assert model.verify_s(3, model_ran=True) == pytest.approx(0.012)  # not seen yet: the back-to-back timing
    assert model.round_s([]) == pytest.approx(0.0105)
    assert model.round_s(["copy"]) == pytest.approx(0.00001 + 0.011 + 0.0005)


def test_each_cached_position_beyond_the_scratch_caches_adds_to_a_block():
    costs = CostModel([1e-3] * 9, position_s=2e-6, position_row_s=5e-7)
    assert costs.context_s(1, 16) == 0.0 == costs.context_s(4, 3)
    assert costs.context_s(1, 1016) == pytest.approx(1000 * 2e-6)
    assert costs.context_s(4, 1016) == pytest.approx(1000 * (2e-6 + 3 * 5e-7))



def test_a_length_far_from_every_one_timed_in_place_wants_a_step_timed_there():
    costs = CostModel([1e-3] * 9, position_s=2e-6)
    assert not costs.wants_context_step(300)  # too few positions to stand above a step's jitter
    assert costs.wants_context_step(1016)  # the load's timing is not the conversation's own
    costs.observe_context_step(1016, 1e-3 + 1000 * 3e-6)
    assert not costs.wants_context_step(1016) and not costs.wants_context_step(1250)
    assert costs.wants_context_step(1300)


def test_blocks_are_priced_by_the_lengths_timed_in_place():
    costs = CostModel([1e-3] * 9, position_s=2e-6, position_row_s=1e-6)
    linear = CostModel([1e-3] * 9, position_s=2e-6, position_row_s=1e-6)  # the control: the load's timing alone
    costs.observe_context_step(4016, 1e-3 + 4000 * 6e-6)
    assert linear.context_s(1, 4016) == pytest.approx(4000 * 2e-6)
    assert costs.context_s(1, 4016) == pytest.approx(4000 * 6e-6)
    assert costs.context_s(3, 4016) == pytest.approx(4000 * 6e-6 + 2 * 4000 * 3e-6)  # a further row scaled alike
    # between the load's length and the one timed in place, interpolated; past it, at its cost per position
    assert costs.context_s(1, 2528) == pytest.approx(1024 * 2e-6 + (4000 * 6e-6 - 1024 * 2e-6) / 2)
    assert costs.context_s(1, 8016) == pytest.approx(8000 * 6e-6)
    assert costs.context_s(1, 16) == 0.0 == costs.context_s(4, 3)


def test_a_length_timed_in_place_supersedes_the_loads_timing_near_it():
    costs = CostModel([1e-3] * 9, position_s=9e-6)  # timed at load on a busy moment
    costs.observe_context_step(1100, 1e-3 + 1084 * 4e-6)
    assert costs.context_s(1, 1040) == pytest.approx(1024 * 4e-6)


def test_plain_steps_near_a_length_timed_in_place_refine_it_the_fastest_standing():
    costs = CostModel([1e-3] * 9, position_s=2e-6)
    costs.observe_context_step(2016, 1e-3 + 2000 * 8e-6)  # the timing met a busy moment
    costs.observe_round([], forward_s=1e-3 + 2200 * 5e-6, round_s=2e-3, positions=2216)
    assert costs.context_steps == [(2016, pytest.approx(2000 * 5e-6))]  # reckoned at the timed length
    costs.observe_round([], forward_s=1e-3 + 2000 * 7e-6, round_s=2e-3, positions=2016)  # slower: the fastest stands
    costs.observe_round(["model"], forward_s=1e-3, round_s=2e-3, positions=2016)  # a block of two rows
    costs.observe_round([], forward_s=1e-3, round_s=2e-3, positions=4016)  # far from it: no length timed from one
    assert costs.context_steps == [(2016, pytest.approx(2000 * 5e-6))]


def test_a_draft_worth_its_row_in_a_short_chat_is_not_in_a_long_one():
    # each cached position adds 5 µs to a row beyond the first: after 5,000 a draft's row costs 25 ms, a step 30
    model = CostModel([(4.0 + 0.5 * k) / 1e3 for k in range(9)], draft_step_s=0.5e-3, overhead_s=0.5e-3,
                      position_s=5e-6, position_row_s=5e-6)
    planner = RoundPlanner(model, Acceptance(kept=[50.0] * 8, reached=[100.0] * 8))
    assert planner.draft_more([], [], 8)
    planner.positions = 5016
    assert not planner.draft_more([], [], 8)
    assert planner.best_length(["model"], [0.5]) == 0  # a draft made already is not worth verifying either


def test_a_draft_model_step_grows_with_the_positions_it_attends_to():
    model = CostModel([1e-3] * 9, draft_step_s=0.5e-3, draft_position_s=1e-7)
    assert model.draft_model_step_s() == pytest.approx(0.5e-3)
    assert model.steps_s(["model", "copy"], positions=1016) == pytest.approx(0.5e-3 + 1000 * 1e-7)


def test_a_long_chat_s_drafted_rounds_still_teach_a_draft_s_bookkeeping():
    """Their forward is far above the scratch block's only because of the positions it attended to."""
    model = costs(draft_ms=1.0)
    model.position_s, model.position_row_s = 4e-6, 2e-6
    context_s = model.context_s(3, 2016)
    for _ in range(100):
        model.observe_round(["model", "model"], 0.012 + context_s, 0.012 + context_s + 2 * 0.001 + 0.0005 + 2 * 0.0003,
                            positions=2016)
    assert model.per_draft_s == pytest.approx(0.0003, rel=0.05)
    assert model.drafted_block_s[2] == pytest.approx(0.012)


def test_each_decoding_plans_with_its_own_acceptance():
    planner = RoundPlanner(costs(draft_ms=1.0))
    planner.decode(greedy=False)
    for _ in range(200):  # sampled drafts the target never kept
        planner.acceptance.record(["model"], [0.5], n_accepted=0)
    assert not planner.draft_more([], [], 8)
    planner.decode(greedy=True)  # greedy replies are not held back by them
    assert planner.acceptance.at(1) == pytest.approx(PRIOR) and planner.draft_more([], [], 8)
    planner.decode(greedy=False)
    assert not planner.draft_more([], [], 8)  # and the sampled verdicts are still there


def test_rounds_that_draft_nothing_let_old_verdicts_fade_until_drafting_is_tried_again():
    planner = RoundPlanner(costs(draft_ms=1.0))
    for _ in range(200):
        planner.acceptance.record(["model"], [0.5], n_accepted=0)
    plain_rounds = 0
    while not planner.draft_more([], [], 8):
        planner.acceptance.record([], [], n_accepted=0)  # what a drafter tells it after a round of no drafts
        plain_rounds += 1
    assert 100 < plain_rounds < 1000
    assert planner.acceptance.reached[0] < 20 and planner.acceptance.kept[0] == 0.0  # of ~49


def test_a_draft_made_and_dropped_counts_as_reached_and_not_kept():
    acceptance = Acceptance()
    acceptance.record(["model"], [0.9], n_accepted=1, dropped="model")  # the second draft was made, not verified
    assert acceptance.reached == [1.0, 1.0] and acceptance.kept == [1.0, 0.0]
    assert acceptance.calibration["model"] == pytest.approx([PRIOR_WEIGHT * DECAY + 1, PRIOR_WEIGHT * DECAY + 0.9])
    acceptance.record(["model"], [0.9], n_accepted=0, dropped="model")  # rejected first: the dropped one never mattered
    assert acceptance.reached[1] == pytest.approx(DECAY)


def test_a_draft_model_whose_drafts_are_always_dropped_stops_being_run():
    """The planner's acceptance said drafts pay, each draft's own estimate said it would not: the drafter made
    one every round and dropped it, paying a draft step for nothing."""
    decoder = tiny_decoder()
    drafter, settings = decoder.drafter, DecodeSettings(gamma=4, greedy=False, lookup=False)
    planner = RoundPlanner(costs(draft_ms=1.0))
    planner.acceptance.calibration["model"] = [PRIOR_WEIGHT, 1e6]  # estimates far above what is kept: chance ≈ 0
    sequence = decoder.chat_ids([{"role": "user", "content": "w3 w4 w5"}])
    drafter.prefill(sequence)
    ran = []
    for _ in range(60):
        before = len(drafter.runner)
        proposal = drafter.propose(sequence, 4, settings, torch.Generator().manual_seed(0), planner)
        ran.append(len(drafter.runner) > before)
        assert proposal.tokens == []
        drafter.update(0)
        sequence = sequence + [5]  # the target's own token ends the round
    assert all(ran[:5]) and sum(ran[20:]) <= 6  # tried while the prior held, then only now and then


def test_a_drafted_round_carries_its_load_to_a_plain_step_by_the_recent_gap_between_them():
    """Plain steps ran 1.3x their cost (one stalled 40x) while drafted blocks ran 1.04x theirs: a drafted round at
    load 2 is one where a plain step would have met 2.5x; only the last RECENT_ROUNDS of each kind count."""
    gap = LoadGap()
    assert gap.drafted_round(1.5) == 1.5  # nothing learnt yet: the block's own load
    for i in range(RECENT_ROUNDS + 4):  # the first four plain steps, from a slower moment, are left behind
        quiet_s = 0.01
        step_s = (40 if i == 10 else 2.0 if i < 4 else 1.3) * quiet_s
        assert gap.plain_step(step_s, quiet_s) == pytest.approx(step_s / quiet_s)
        gap.drafted_round(1.04)
    assert gap.ratio == pytest.approx(1.3 / 1.04)
    assert gap.drafted_round(2.0) == pytest.approx(2.0 * 1.3 / 1.04, rel=1e-3)
    assert gap.plain_step(0.01, 0.0) == 0.0  # no cost model: nothing to compare with


def test_on_a_gpu_s_flat_block_costs_rounds_draft_to_the_cap_and_a_target_sized_draft_is_refused():
    """Issue 50's H200 shapes: a 4B-shaped target's block costs ~21 ms for any rows, the perfect pair's 4-layer
    draft 3.2 ms a step at α 0.99: every round drafts γ; a draft as dear as the target at α 0.6 drafts nothing."""
    flat = RoundPlanner(costs(draft_ms=3.2, row_ms=0.05, step_ms=21.0), Acceptance(kept=[99.0] * 8, reached=[100.0] * 8))
    kinds, drafted = [], []
    while flat.draft_more(kinds, drafted, 8):
        kinds.append("model")
        drafted.append(flat.acceptance.at(len(drafted) + 1))
    assert len(kinds) == 8 and flat.best_length(kinds, drafted) == 8
    dear = RoundPlanner(costs(draft_ms=21.0, row_ms=0.05, step_ms=21.0), Acceptance(kept=[60.0] * 8,
                                                                                      reached=[100.0] * 8))
    assert not dear.draft_more([], [], 8)


def play_round(planner: RoundPlanner, kept: bool, real: CostModel, loads: tuple[float, float] = (1.0, 1.0),
               gamma: int = 6) -> int:
    """One round of a synthetic pair: it drafts while the planner says so (drafts sure of themselves), the target
    keeps every draft or none, and it takes what `real` costs say times the drafted or plain rounds' load; the
    planner is told as the decoder tells it. Returns the drafts made."""
    kinds, chances = [], []
    while planner.draft_more(kinds, chances, gamma):
        kinds.append("model")
        chances.append(planner.acceptance.calibrated(0.9, "model"))
    verified = planner.best_length(kinds, chances)
    accepted = verified if kept else 0
    planner.acceptance.record(kinds[:verified], [0.9] * verified, accepted,
                              kinds[verified] if len(kinds) > verified else None)
    priced = planner.costs.round_s(kinds[:verified]) + planner.costs.drafting_s(kinds[verified:])
    took = (real.round_s(kinds[:verified]) + real.drafting_s(kinds[verified:])) * loads[0 if kinds else 1]
    planner.observe_round("model" if kinds else None, (accepted + 1) * real.ar_step_s(), priced, took)
    return len(kinds)


def decode_phases(planner: RoundPlanner, phases: list[tuple], gamma: int = 6) -> list[list[int]]:
    """A reply of a synthetic pair on `planner`'s costs: in each phase (kept, rounds[, drafted_load, plain_load])
    the target keeps every draft or none, and drafted and plain rounds take their price times these loads (1: as
    priced). Returns each phase's drafts per round."""
    planner.decode(True)
    return [[play_round(planner, kept, planner.costs, tuple(loads) or (1.0, 1.0), gamma) for _ in range(rounds)]
            for kept, rounds, *loads in phases]


def probes(rounds: int) -> int:
    """The most plain rounds a reply of `rounds` drafted rounds runs to measure plain decoding."""
    return MEASURED_PLAIN_ROUNDS + rounds // PROBE_EVERY


def test_drafts_that_stop_paying_mid_reply_give_way_to_plain_rounds_within_a_few_rounds():
    """The pair's drafts are all kept for 20 rounds, then none: drafting stops within 5 rounds (the acceptance
    measured over the rounds alone keeps it drafting for 15), and pauses longer each time it is tried in vain."""
    planner = RoundPlanner(costs(draft_ms=5.5, row_ms=5.5, step_ms=21.0))
    good, bad = decode_phases(planner, [(True, 20), (False, 40)])
    assert good.count(0) <= probes(20)
    assert bad.index(0) <= 5
    assert sum(1 for n in bad if n) <= 12
    assert planner.next_pause["model"] > PAUSE_ROUNDS


def test_a_pause_the_draft_model_earned_leaves_copies_drafting():
    """Beside a fast target the draft model's drafts are never kept while copies always are: the model's rounds
    stop (their own first drafts' record, the pauses they earn) and the rounds where a copy is at hand still copy
    (judged in one window, the copies' wins kept the model drafting in 7 of the last 20 rounds)."""
    planner = RoundPlanner(costs(draft_ms=2.0, row_ms=1.0, step_ms=4.0))
    planner.decode(True)
    copied, modelled = [], []
    for round_index in range(60):
        at_hand = "copy" if round_index % 3 == 0 else "model"  # a copy is at hand every third round
        kinds, chances = [], []
        while planner.draft_more(kinds, chances, 4, at_hand, later_kind=at_hand):
            kinds.append(at_hand)
            chances.append(planner.acceptance.calibrated(0.9, at_hand))
        verified = planner.best_length(kinds, chances)
        accepted = verified if at_hand == "copy" else 0
        planner.acceptance.record(kinds[:verified], [0.9] * verified, accepted,
                                  kinds[verified] if len(kinds) > verified else None)
        priced = planner.costs.round_s(kinds[:verified]) + planner.costs.drafting_s(kinds[verified:])
        planner.observe_round(at_hand if kinds else None, (accepted + 1) * planner.costs.ar_step_s(), priced, priced)
        (copied if at_hand == "copy" else modelled).append(len(kinds))
    assert all(copied[-10:])
    assert sum(1 for n in modelled[-20:] if n) <= 5


def test_drafting_comes_back_once_drafts_pay_again():
    planner = RoundPlanner(costs(draft_ms=5.5, row_ms=5.5, step_ms=21.0))
    *_, back = decode_phases(planner, [(True, 20), (False, 40), (True, 60)])
    assert sum(1 for n in back[-20:] if n) >= 15


def test_a_drafted_round_is_priced_at_what_drafted_rounds_took_over_what_plain_ones_did():
    planner = RoundPlanner(costs(draft_ms=5.5, row_ms=5.5, step_ms=21.0))
    planner.acceptance = Acceptance(kept=[60.0], reached=[100.0])  # drafts that pay at their price, barely
    assert planner.draft_more([], [], 1)
    for _ in range(DRIFT_LEAST):
        planner.observe_round(None, 0.02, 0.02, 0.02)
        planner.observe_round("model", 0.03, 0.03, 0.045)  # a drafted round took 1.5x its price
    assert planner.drift == pytest.approx(1.5) and not planner.draft_more([], [], 1)


def test_a_drift_that_priced_drafts_out_fades_over_plain_rounds():
    """A few drafted rounds that took twice their price (a busy moment) price every draft out; no drafted round
    measures the drift again, so it fades over the plain rounds that follow and drafting is tried again."""
    planner = RoundPlanner(costs(draft_ms=5.5, row_ms=5.5, step_ms=21.0))
    planner.acceptance = Acceptance(kept=[60.0], reached=[100.0])
    for _ in range(DRIFT_LEAST):
        planner.observe_round(None, 0.02, 0.02, 0.02)
        planner.observe_round("model", 0.03, 0.03, 0.06)
    assert planner.drift == pytest.approx(2.0) and not planner.draft_more([], [], 1)
    plain_rounds = 0
    while not planner.draft_more([], [], 1) and plain_rounds < 200:
        planner.observe_round(None, 0.02, 0.02, 0.02)
        plain_rounds += 1
    assert plain_rounds < 50 and planner.drift == pytest.approx(1.0)


def test_a_machine_slower_at_everything_does_not_price_drafts_out():
    """The control: plain rounds took as much over their price as drafted ones."""
    planner = RoundPlanner(costs(draft_ms=5.5, row_ms=5.5, step_ms=21.0))
    planner.acceptance = Acceptance(kept=[60.0], reached=[100.0])
    for _ in range(DRIFT_LEAST):
        planner.observe_round(None, 0.02, 0.02, 0.03)
        planner.observe_round("model", 0.06, 0.03, 0.045)
    assert planner.drift == pytest.approx(1.0) and planner.draft_more([], [], 1)


def test_a_new_reply_drafts_at_once_and_pauses_as_long_as_the_chat_has_earned():
    """Replies whose drafts never pay: each drafts again at its start, but after the first reply each loses one
    window of drafted rounds before a long pause, where starting every reply at PAUSE_ROUNDS lost one per pause."""
    planner = RoundPlanner(costs(draft_ms=5.5, row_ms=5.5, step_ms=21.0))
    decode_phases(planner, [(True, 20), (False, 40)])
    assert planner.next_pause["model"] > 2 * PAUSE_ROUNDS
    [second] = decode_phases(planner, [(False, 40)])
    assert all(second[:PAYING_WINDOW])  # not held back by the last reply's pause
    assert not any(second[PAYING_WINDOW:PAYING_WINDOW + 4 * PAUSE_ROUNDS])  # then a long pause at once
    planner.forget_acceptance()  # the control: a new chat starts again from the shortest pause
    assert planner.next_pause["model"] == PAUSE_ROUNDS


def test_a_reply_that_drafts_every_round_runs_plain_rounds_to_measure_plain_decoding_now():
    """Plain rounds are the control: EARLY_PROBE drafted rounds in, one plain round, again until the reply has
    MEASURED_PLAIN_ROUNDS of them, then one after every PROBE_EVERY drafted rounds; a new reply starts again."""
    planner = RoundPlanner(costs(draft_ms=1.0))
    [rounds] = decode_phases(planner, [(True, 60)])
    plain = [i for i, n in enumerate(rounds) if not n]
    assert plain[:2] == [EARLY_PROBE, 2 * EARLY_PROBE + 1]
    assert all(b - a == PROBE_EVERY + 1 for a, b in zip(plain[1:], plain[2:])) and len(plain) == 4
    [again] = decode_phases(planner, [(True, EARLY_PROBE + 1)])
    assert again.index(0) == EARLY_PROBE


def test_drafted_rounds_that_become_twice_as_dear_mid_reply_step_aside_within_a_window():
    """Drafted rounds paid (1.2x plain), then took twice as long (a program beside them slowing the draft's steps)
    while plain rounds did not: drafting pauses after one window of PAYING_WINDOW rounds, judged against what the
    reply's plain rounds take now. Judged at the drift's price, the median of the last 16 drafted rounds' overruns
    stayed at 1 for eight rounds and the pair drafted on (negative control: that rule on the same rounds)."""
    def after_the_change(judged_by_plain_rounds: bool) -> list[int]:
        planner = RoundPlanner(costs(draft_ms=8.0, row_ms=8.0, step_ms=20.0))
        if not judged_by_plain_rounds:
            planner.plain_now = lambda: None  # the rule before: the windows judged at the drift's price
        *_, slowed = decode_phases(planner, [(True, 30), (True, 12, 2.0, 1.0)])
        return slowed

    slowed = after_the_change(judged_by_plain_rounds=True)
    assert all(slowed[:PAYING_WINDOW]) and not any(slowed[PAYING_WINDOW:PAYING_WINDOW + PAUSE_ROUNDS])
    assert all(after_the_change(judged_by_plain_rounds=False)[:8])


def test_a_load_that_slows_plain_and_drafted_rounds_alike_leaves_drafting_on():
    """The control of the rule above: both arms twice as slow (another program on the machine) still pay. The
    first window after the change lost to plain rounds measured before it: one plain round, then at most one short
    pause whose plain rounds measure the new load, and drafting goes on."""
    planner = RoundPlanner(costs(draft_ms=8.0, row_ms=8.0, step_ms=20.0))
    *_, loaded = decode_phases(planner, [(True, 30), (True, 30, 2.0, 2.0)])
    assert loaded.count(0) <= probes(30) + 1 + PAUSE_ROUNDS
    assert loaded[-15:].count(0) <= 1


def test_costs_measured_on_a_busy_machine_do_not_keep_a_paying_pair_from_drafting():
    """A costs file timed while another program ran (every price twice what the machine now takes): the
    drafted rounds are judged by what the plain rounds take now, and both run at half their price, so a pair
    whose drafts pay drafts on."""
    planner = RoundPlanner(costs(draft_ms=2.0, row_ms=2.0, step_ms=20.0))
    [rounds] = decode_phases(planner, [(True, 40, 0.5, 0.5)])
    assert rounds.count(0) <= probes(40)


def test_drafting_priced_out_by_a_transient_is_tried_again_and_kept_where_it_pays():
    """A first call's set-up taught a draft's bookkeeping 30 ms (a costs file timed while busy does the same): no
    draft pays at that price, and no drafted round would measure it again. After TRY_AFTER plain rounds a window
    drafts at the bare costs, pays by what plain rounds take, and drafting goes on. The control: without trials
    (TRY_AFTER never reached) the pair never drafts."""
    def rounds(trials: bool) -> list[int]:
        real = costs(draft_ms=2.0, row_ms=2.0, step_ms=20.0)
        planner = RoundPlanner(dataclasses.replace(real, target_block_s=list(real.target_block_s), per_draft_s=0.03))
        planner.decode(True)
        if not trials:
            planner._try = lambda kind: False
        return [play_round(planner, True, real) for _ in range(3 * TRY_AFTER)]

    tried = rounds(trials=True)
    assert not any(tried[:TRY_AFTER]) and tried[TRY_AFTER]
    assert tried[-TRY_AFTER:].count(0) <= probes(TRY_AFTER)
    assert not any(rounds(trials=False))


def test_a_trial_of_drafts_that_never_pay_costs_a_window_a_long_pause():
    """Drafts never kept: each trial is a window of PAYING_WINDOW rounds, the next one a longer pause later."""
    real = costs(draft_ms=2.0, row_ms=2.0, step_ms=20.0)
    planner = RoundPlanner(dataclasses.replace(real, target_block_s=list(real.target_block_s), per_draft_s=0.03))
    planner.decode(True)
    drafted = [play_round(planner, False, real) for _ in range(400)]
    assert sum(1 for n in drafted if n) <= 400 // TRY_AFTER * PAYING_WINDOW
