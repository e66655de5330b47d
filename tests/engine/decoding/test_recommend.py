"""The recommendation on synthetic costs and acceptance against the analytic optimum (brute force over γ)."""
import re

import pytest

from engine.decoding.costs import CostModel, expected_tokens
from engine.decoding.recommend import SPREAD, Measured, cost_model_from_dict, predicted_rate, recommend, round_s
from engine.events import Drafting
from engine.stats import PositionAcceptance


def costs(draft_ms: float, row_ms: float = 1.0, step_ms: float = 10.0, copy_ms: float = 0.05) -> CostModel:
    return CostModel([(step_ms + row_ms * k) / 1e3 for k in range(9)], draft_step_s=draft_ms / 1e3,
                     copy_s=copy_ms / 1e3, overhead_s=0.5 / 1e3)


def fixed_rounds(chances: list[float], kind: str = "model") -> PositionAcceptance:
    """What rounds of exactly len(chances) drafts measure when the i-th is kept with chances[i] once the ones
    before it were."""
    kept, all_kept = [], 1.0
    for chance in chances:
        all_kept *= chance
        kept.append(all_kept)
    n = len(chances)
    return PositionAcceptance(n_rounds=1000, drafted=(1.0,) * n, copied=(1.0 if kind == "copy" else 0.0,) * n,
                              kept=tuple(kept), conditional=tuple(chances), alpha=0.0, mean_accepted=sum(kept),
                              tokens_per_round=1 + sum(kept), seed_tokens_per_round=0.0)


def analytic_best(model: CostModel, chances: list[float]) -> int:
    """The γ ≥ 1 with the most tokens per second by the cost model's own round formula (γ drafts every round)."""
    rate = lambda g: expected_tokens(chances[:g]) / model.round_s(["model"] * g)  # noqa: E731
    return max(range(1, len(chances) + 1), key=rate)


@pytest.mark.parametrize("draft_ms", [0.3, 1.0, 2.5])
@pytest.mark.parametrize("chances", [[0.6] * 8, [0.8] * 8, [0.95, 0.9, 0.8, 0.7, 0.5, 0.4, 0.3, 0.2]])
def test_the_recommended_gamma_is_the_analytic_optimum(draft_ms, chances):
    model = costs(draft_ms)
    advice = recommend(model, {Drafting.MODEL: fixed_rounds(chances)})
    best = analytic_best(model, chances)
    assert advice.drafting is Drafting.MODEL and advice.gamma == best
    rate = expected_tokens(chances[:best]) / model.round_s(["model"] * best)
    assert advice.tokens_per_s == pytest.approx(rate)
    assert advice.speedup == pytest.approx(rate * model.ar_token_s)


def test_the_optimum_is_strict_so_a_recommendation_one_step_off_fails():
    """Negative control for the optimum test: on these inputs the neighbours of the optimum are slower, and the
    optimum moves with the draft cost, so neither an off-by-one nor a fixed γ would pass it."""
    chances = [0.8] * 8
    bests = []
    for draft_ms in (0.3, 2.5):
        model, profile = costs(draft_ms), fixed_rounds(chances)
        best = recommend(model, {Drafting.MODEL: profile}).gamma
        rates = {g: predicted_rate(model, profile, g, Drafting.MODEL) for g in (best - 1, best, best + 1)}
        assert rates[best] > rates[best - 1] and rates[best] > rates[best + 1]
        bests.append(best)
    assert bests[0] > bests[1]


def test_the_threshold_named_is_where_the_next_draft_stops_paying():
    model, chances = costs(1.0), [0.8] * 8
    advice = recommend(model, {Drafting.MODEL: fixed_rounds(chances)})
    keep_next = 0.8 ** (advice.gamma + 1)  # the chance that the next draft, and all before it, are kept
    keep_last = 0.8 ** advice.gamma
    assert keep_next < advice.stop_below < keep_last
    assert re.fullmatch(rf"drafts stop when the chance of keeping the next token falls below 0\.\d\d: here a "
                        rf"{advice.gamma + 1}th draft costs [\d.]+ ms all told \(its draft step, bookkeeping and row "
                        r"in the target's block\) and a step [\d.]+ ms", advice.explanation)


def test_the_draft_cost_named_is_of_the_next_draft_with_its_share_of_copies():
    """Walk 29 saw "a draft costs" go from 1.8 to 6.8 ms in one chat: it is the next draft's cost, and copies cost
    next to nothing, so the line says which draft it is and how many of them were copies. The control: rounds that
    never copy name no copies, and their draft costs the model's step."""
    model = costs(3.0)
    half = fixed_rounds([0.8] * 8)
    half = PositionAcceptance(**{**half.__dict__, "copied": (0.5,) * 8})
    said = recommend(model, {Drafting.BOTH: half}).explanation
    assert re.search(r"here a \d+th draft costs [\d.]+ ms all told \(its draft step, bookkeeping and row in the "
                     r"target's block, 50% of them copies\)", said)
    never = recommend(model, {Drafting.MODEL: fixed_rounds([0.8] * 8)}).explanation
    assert "copies" not in never


def test_plain_ar_is_recommended_where_no_draft_pays():
    advice = recommend(costs(draft_ms=30.0), {Drafting.MODEL: fixed_rounds([0.6] * 8)})
    assert advice.drafting is Drafting.NONE and advice.gamma == 0 and advice.speedup == 1.0
    assert advice.explanation.startswith("no draft pays: not even a draft that is always kept")  # 30 ms > a step


def test_a_drafting_predicted_only_a_little_faster_than_plain_ar_is_not_recommended():
    model = costs(draft_ms=0.5)
    slight = recommend(model, {Drafting.MODEL: fixed_rounds([0.15])})  # (1 + 0.15) · 10.5 / 12 = 1.006×
    clear = recommend(model, {Drafting.MODEL: fixed_rounds([0.6])})  # 1.4×
    assert slight.drafting is Drafting.NONE and slight.speedup == 1.0
    assert slight.speedups[Drafting.MODEL][0] == pytest.approx(1.15 * 10.5 / 12)
    assert slight.explanation.startswith("no drafting is predicted 5% faster than plain AR")
    assert "draft model at γ ≤ 1, 1.00×" in slight.explanation  # 1.006, rounded down beside "not 5% faster"
    assert clear.drafting is Drafting.MODEL and clear.gamma == 1


def test_where_even_a_sure_further_draft_would_not_pay_the_line_says_so_instead_of_a_chance_above_1():
    blocks = [10e-3, 10.2e-3, 10.4e-3] + [40e-3 + k * 1e-3 for k in range(6)]  # a fourth row costs 30 ms more
    model = CostModel(blocks, draft_step_s=1e-3, copy_s=1e-5, overhead_s=0.5e-3)
    advice = recommend(model, {Drafting.LOOKUP: fixed_rounds([1.0] * 8, "copy")})
    assert advice.gamma == 2 and advice.stop_below >= 1.0
    assert advice.explanation.startswith("drafts stop at 2: a further draft would not pay even if it were always kept")


def test_where_a_sure_draft_would_pay_the_line_names_the_chance_it_needs():
    advice = recommend(costs(draft_ms=2.0), {Drafting.MODEL: fixed_rounds([0.05] * 8)})
    assert advice.drafting is Drafting.NONE
    assert re.match(r"no draft pays: one would need a chance above 0\.\d\d of being kept", advice.explanation)


def test_cheap_sure_copies_win_over_model_drafts_and_lose_when_they_are_never_kept():
    model = costs(draft_ms=2.0)
    model_drafts = fixed_rounds([0.7] * 8)
    good_copies, bad_copies = fixed_rounds([0.9] * 8, "copy"), fixed_rounds([0.05] * 8, "copy")
    assert recommend(model, {Drafting.MODEL: model_drafts, Drafting.LOOKUP: good_copies}).drafting is Drafting.LOOKUP
    assert recommend(model, {Drafting.MODEL: model_drafts, Drafting.LOOKUP: bad_copies}).drafting is Drafting.MODEL


def test_gamma_is_never_recommended_past_the_longest_measured_draft():
    advice = recommend(costs(draft_ms=0.1), {Drafting.MODEL: fixed_rounds([0.99] * 3)})
    assert advice.gamma == 3 and "no round drafted more than 3" in advice.explanation


def test_rounds_that_sometimes_draft_less_cost_less_than_rounds_that_always_draft():
    full = fixed_rounds([0.8] * 4)
    partial = PositionAcceptance(1000, (1.0, 1.0, 0.5, 0.5), (0.0,) * 4, (0.8, 0.64, 0.3, 0.2), full.conditional,
                                 0.0, 0.0, 0.0, 0.0)
    model = costs(draft_ms=1.0)
    # half the rounds make 2 drafts and verify 3 rows: 2 × 1 ms of drafting and 1 ms of block less, half the time
    assert round_s(model, full, 4, Drafting.MODEL) - round_s(model, partial, 4, Drafting.MODEL) == pytest.approx(
        0.5 * (2 * 1e-3 + 2 * 1e-3))


def test_the_window_s_cost_dict_gives_back_the_cost_model():
    model = costs(draft_ms=2.7)
    model.observe_read(40, 6e-3)
    again = cost_model_from_dict(model.as_dict())
    assert again.target_block_s == pytest.approx(model.target_block_s)
    assert (again.draft_step_s, again.copy_s, again.overhead_s, again.draft_read_s) == pytest.approx(
        (model.draft_step_s, model.copy_s, model.overhead_s, 0.15e-3))


def test_a_long_chat_is_recommended_what_pays_at_its_length():
    """Each cached position makes a draft's row dearer: the γ that pays in a short chat does not after 5,000
    tokens, and the analytic optimum there is found with the positions in the round's cost."""
    model = costs(draft_ms=0.5, row_ms=0.5, step_ms=4.0)
    model.position_s, model.position_row_s = 5e-6, 5e-6
    chances = [0.6] * 8
    short = recommend(model, {Drafting.MODEL: fixed_rounds(chances)})
    long = recommend(model, {Drafting.MODEL: fixed_rounds(chances)}, positions=5016)
    assert short.drafting is Drafting.MODEL and short.speedup > 1.05
    assert long.drafting is Drafting.NONE and "after this chat's 5,016 tokens" in long.explanation
    assert long.speedups[Drafting.MODEL][0] < 1.0
    # the same rounds priced by hand: E(1) / (draft + the 2-row block with its positions + bookkeeping)
    by_hand = (1 + 0.6) / (0.5e-3 + 4.5e-3 + 5000 * (5e-6 + 5e-6) + 0.5e-3) * (4e-3 + 0.5e-3 + 5000 * 5e-6)
    assert long.speedups[Drafting.MODEL][0] == pytest.approx(by_hand)


def test_a_measured_speedup_scales_its_draftings_prediction_to_within_one_runs_spread_of_it():
    """A drafting predicted well above AR but measured below it at the γ it ran with is not recommended, and its
    predicted curve passes within SPREAD of the measurement; without the measurement it is recommended (the negative
    control), and a measurement of another drafting leaves it as it was."""
    model, profile = costs(0.3), fixed_rounds([0.9] * 8)
    alone = recommend(model, {Drafting.MODEL: profile})
    assert alone.drafting is Drafting.MODEL and alone.speedup > 1.3 and not alone.calibration
    measured = recommend(model, {Drafting.MODEL: profile}, measured={Drafting.MODEL: [Measured(3, 0.7, profile)]})
    assert measured.drafting is Drafting.NONE
    assert measured.speedups[Drafting.MODEL][2] == pytest.approx(0.7 * SPREAD)
    factor = measured.calibration[Drafting.MODEL]
    assert factor == pytest.approx(0.7 * SPREAD / alone.speedups[Drafting.MODEL][2])
    assert measured.speedups[Drafting.MODEL] == pytest.approx([s * factor for s in alone.speedups[Drafting.MODEL]])
    assert f"draft model ×{factor:.2f}" in measured.explanation
    other = recommend(model, {Drafting.MODEL: profile}, measured={Drafting.LOOKUP: [Measured(3, 0.7, profile)]})
    assert other.drafting is Drafting.MODEL and other.speedups == alone.speedups


def test_a_measurement_within_one_runs_spread_of_its_prediction_scales_nothing():
    model, profile = costs(0.3), fixed_rounds([0.9] * 8)
    predicted = recommend(model, {Drafting.MODEL: profile}).speedups[Drafting.MODEL][2]
    near = recommend(model, {Drafting.MODEL: profile},
                     measured={Drafting.MODEL: [Measured(3, predicted * 1.08, profile)]})
    assert not near.calibration and "scaled" not in near.explanation
    far = recommend(model, {Drafting.MODEL: profile},
                    measured={Drafting.MODEL: [Measured(3, predicted * 1.3, profile)]})
    assert far.calibration[Drafting.MODEL] == pytest.approx(1.3 / SPREAD)


def test_a_run_is_held_against_its_own_acceptance_not_the_chats():
    """A run that met low acceptance and measured what its own rounds predict leaves the prediction for the chat's
    (high) acceptance alone; judged against the chat's acceptance instead (the negative control) it would pull the
    chat's prediction down to its own speedup."""
    model, chat, low = costs(0.3), fixed_rounds([0.95] * 8), fixed_rounds([0.3] * 8)
    own = recommend(model, {Drafting.MODEL: low}).speedups[Drafting.MODEL][2]
    held = recommend(model, {Drafting.MODEL: chat}, measured={Drafting.MODEL: [Measured(3, own, low)]})
    assert not held.calibration and held.drafting is Drafting.MODEL and held.speedup > 1.3
    misjudged = recommend(model, {Drafting.MODEL: chat}, measured={Drafting.MODEL: [Measured(3, own, chat)]})
    assert misjudged.calibration[Drafting.MODEL] < 0.8


def test_a_measurement_past_the_predicted_gammas_is_taken_at_the_last_one():
    model, profile = costs(0.3), fixed_rounds([0.9] * 8)
    alone = recommend(model, {Drafting.MODEL: profile})
    far = recommend(model, {Drafting.MODEL: profile}, measured={Drafting.MODEL: [Measured(16, 2.0, profile)]})
    assert far.calibration[Drafting.MODEL] == pytest.approx(2.0 / alone.speedups[Drafting.MODEL][-1] * SPREAD)


def test_a_fair_measured_loss_outranks_a_small_predicted_gain():
    """The walk's case: a drafting predicted ~1.08× for the chat's rounds beside a fair run of it at 0.88× (whose
    own rounds kept fewer drafts, so calibration leaves the prediction alone) is not recommended, and the line
    says the measurement is why; the same run measured at 1.04× (the control) leaves the recommendation."""
    model, chat, run = costs(3.0, row_ms=2.0), fixed_rounds([0.6] * 8), fixed_rounds([0.3] * 8)
    predicted = recommend(model, {Drafting.BOTH: chat})
    assert predicted.drafting is Drafting.BOTH and 1.05 <= predicted.speedup < 1.05 * SPREAD
    lost = recommend(model, {Drafting.BOTH: chat}, measured={Drafting.BOTH: [Measured(1, 0.88, run)]})
    assert not lost.calibration and lost.drafting is Drafting.NONE
    assert "measured slower than plain AR in every fair run here (best 0.88×)" in lost.explanation
    gained = recommend(model, {Drafting.BOTH: chat}, measured={Drafting.BOTH: [Measured(1, 1.04, run)]})
    assert gained.drafting is Drafting.BOTH
