"""Why this γ: the draft length and drafters that maximise the predicted tokens per second of a pair, from its
measured costs (engine.decoding.costs.CostModel) and the acceptance measured at each draft position
(engine.stats.PositionAcceptance).

Rounds that draft as the measured ones did, cut at γ, yield E(γ) = 1 + Σ_{i≤γ} K_i tokens, K_i the share of rounds
whose i-th draft was kept, and cost C(γ) = Σ_{i≤γ} D_i·c_i + Σ_d (D_d − D_{d+1})·T(d + 1) + o: D_i the share of
rounds that made an i-th draft (D_0 = 1, D_{γ+1} = 0), c_i what such a draft costs (a model step or a copy), T(k)
the target's block of k rows, o a round's bookkeeping. With γ drafts in every round this is the seed's
E / (γ·T_q + T_p). One more draft raises E/C exactly when K_{d+1} / D_{d+1}, the chance that a round which makes
it keeps it, exceeds (E(d)/C(d))·(c_{d+1} + T(d+2) − T(d+1)): that product is the threshold the explanation names.
Positions past the longest measured draft are never drafted here, so γ is never recommended beyond it.

Where a drafting's speedup was measured against plain AR on this machine (the app's Compare runs), each run is held
against the prediction for that very run (its own rounds' acceptance, at its γ, after its positions), and where the
median of measured / predicted falls outside one run's spread, the drafting's predicted rates are scaled to within
that spread of it: a measurement is what the machine did, so the prediction must not contradict it, but a run that
met other acceptance than the chat's says nothing of the chat's acceptance, and one run's noise is no correction.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from math import floor
from statistics import median

from engine.decoding.costs import SCRATCH_POSITIONS, CostModel
from engine.events import Drafting
from engine.stats import PositionAcceptance

NO_ROUNDS = PositionAcceptance(0, (), (), (), (), 0.0, 0.0, 1.0, 1.0)  # acceptance before any round: a first draft
MAX_GAMMA = 8  # the longest draft the cost model has measured blocks for (engine.decoding.costs.MEASURED_ROWS − 1)
# A drafting is recommended over plain AR only where it is predicted this much faster: the cost model's predicted
# speedups came within about 10 % of the measured ones in `specdec bench`, so a smaller predicted gain is none to
# count on, and plain AR is the sure choice.
MARGIN = 1.05
# One measured run's spread: on a quiet 2-core machine the same decode measured up to ~10 % apart from run to run
# (specdec bench's rows that drafted nothing against AR, 7 %; one prompt's plain AR runs in the window, 9 %). A
# prediction within this factor of the measurements agrees with them.
SPREAD = 1.10


@dataclass(frozen=True)
class Measured:
    """A drafting's speedup over plain AR measured here (a Compare run), with the acceptance its own rounds met and
    the positions they started after, by which the run's own speedup is predicted."""

    gamma: int
    speedup: float
    profile: PositionAcceptance
    positions: int = SCRATCH_POSITIONS


@dataclass(frozen=True)
class Recommendation:
    drafting: Drafting
    gamma: int  # the cap; 0 with Drafting.NONE
    tokens_per_s: float  # predicted
    speedup: float  # predicted, over plain AR on the same target
    stop_below: float  # drafting pays while the chance of keeping the next draft stays above this
    explanation: str
    # Predicted speedup over AR for γ = 1 .. MAX_GAMMA, per drafting choice that was measured
    speedups: dict[Drafting, list[float]] = field(default_factory=dict)
    # The factor each drafting's prediction was scaled by to agree with its measured speedups (absent: none)
    calibration: dict[Drafting, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"drafting": self.drafting.value, "draft_model": self.drafting.draft_model,
                "lookup": self.drafting.lookup, "gamma": self.gamma, "tokens_per_s": self.tokens_per_s,
                "speedup": self.speedup, "stop_below": self.stop_below, "explanation": self.explanation,
                "speedups": {d.value: s for d, s in self.speedups.items()},
                "calibration": {d.value: f for d, f in self.calibration.items()}}


def cost_model_from_dict(costs: dict) -> CostModel:
    """A CostModel from its as_dict() form (milliseconds), as PairInfo.costs carries it to the window."""
    return CostModel([ms / 1e3 for ms in costs["target_block_ms"]], draft_step_s=costs["draft_step_ms"] / 1e3,
                     long_block_s=[ms / 1e3 for ms in costs.get("long_block_ms", [])],
                     copy_s=costs["copy_ms"] / 1e3, overhead_s=costs["overhead_ms"] / 1e3,
                     per_draft_s=costs.get("per_draft_ms", 0.0) / 1e3, position_s=costs.get("position_us", 0.0) / 1e6,
                     position_row_s=costs.get("position_row_us", 0.0) / 1e6,
                     draft_position_s=costs.get("draft_position_us", 0.0) / 1e6,
                     context_steps=[(p, ms / 1e3) for p, ms in costs.get("context_steps_ms", [])],
                     drafted_block_s=[ms / 1e3 for ms in costs.get("drafted_block_ms", [])],
                     draft_read_s=costs.get("draft_read_us", 0.0) / 1e6)


def draft_cost_s(costs: CostModel, profile: PositionAcceptance, position: int, drafting: Drafting,
                 positions: int = SCRATCH_POSITIONS) -> float:
    """What a draft at `position` (1-based) costs on average after `positions` cached positions: copies at the
    copy cost, the rest as model steps (engine.decoding.recommend.copied_share)."""
    copies = copied_share(profile, position, drafting)
    return copies * costs.copy_s + (1 - copies) * costs.draft_model_step_s(positions) + costs.per_draft_s


def round_tokens(profile: PositionAcceptance, gamma: int) -> float:
    """E(γ): a round's expected tokens when the measured rounds are cut at γ drafts."""
    return 1.0 + sum(profile.kept[:gamma])


def round_s(costs: CostModel, profile: PositionAcceptance, gamma: int, drafting: Drafting,
            positions: int = SCRATCH_POSITIONS) -> float:
    """C(γ): a round's expected cost after `positions` cached positions when the measured rounds are cut at γ
    drafts."""
    drafted = [1.0, *profile.drafted[:gamma], 0.0]  # D_0 .. D_{γ+1}
    making = sum(drafted[i] * draft_cost_s(costs, profile, i, drafting, positions)
                 for i in range(1, len(drafted) - 1))
    model_ran = drafting is not Drafting.LOOKUP
    verifying = sum((drafted[d] - drafted[d + 1]) * costs.verify_s(d + 1, model_ran and d > 0, positions)
                    for d in range(len(drafted) - 1))
    return making + verifying + costs.overhead_s


def predicted_rate(costs: CostModel, profile: PositionAcceptance, gamma: int, drafting: Drafting,
                   positions: int = SCRATCH_POSITIONS) -> float:
    """Tokens per second of rounds that draft as the measured ones did, cut at γ."""
    return round_tokens(profile, gamma) / round_s(costs, profile, gamma, drafting, positions)


def extra_draft_s(costs: CostModel, profile: PositionAcceptance, gamma: int, drafting: Drafting,
                  positions: int = SCRATCH_POSITIONS) -> float:
    """What a (γ+1)-th draft adds to a round that makes it: drafting it, and its row in the target's block."""
    row_s = (costs.block_s(gamma + 2) - costs.block_s(gamma + 1)
             + costs.context_s(gamma + 2, positions) - costs.context_s(gamma + 1, positions))
    return draft_cost_s(costs, profile, gamma + 1, drafting, positions) + row_s


def stop_threshold(costs: CostModel, profile: PositionAcceptance, gamma: int, drafting: Drafting,
                   positions: int = SCRATCH_POSITIONS) -> float:
    """The chance of keeping a (γ+1)-th draft above which drafting it raises the rate."""
    return (predicted_rate(costs, profile, gamma, drafting, positions)
            * extra_draft_s(costs, profile, gamma, drafting, positions))


def _costs_said(draft_s: float, costs: CostModel, positions: int, position: int, copies: float) -> str:
    """All told: the draft's step, its bookkeeping and its row in the target's block (the cost chart's draft step
    is the first of these alone); in a chat, at its length (each cached position makes both dearer). `position`:
    which draft of a round it is, `copies`: the share of such drafts that were copies, which cost next to nothing
    (so the figure moves with what the chat's rounds copied: a walk saw it go from 1.8 to 6.8 ms)."""
    where = (f" after this chat's {positions:,} tokens (its messages and replies)" if positions > SCRATCH_POSITIONS
             else "")
    which = "a draft" if position == 1 else f"a {_ordinal(position)} draft"
    copied = f", {copies:.0%} of them copies" if copies >= 0.005 else ""
    return (f"here{where} {which} costs {draft_s * 1e3:.2g} ms all told (its draft step, bookkeeping and row in "
            f"the target's block{copied}) and a step {costs.ar_step_s(positions) * 1e3:.3g} ms")


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def copied_share(profile: PositionAcceptance, position: int, drafting: Drafting) -> float:
    """The share of the drafts at `position` (1-based) that are copies: as measured, and past the measured
    positions all of copying's and none of the draft model's."""
    i = position - 1
    if i < len(profile.drafted) and profile.drafted[i] > 0:
        return profile.copied[i] / profile.drafted[i]
    return 1.0 if drafting is Drafting.LOOKUP else 0.0


def calibration(costs: CostModel, drafting: Drafting, runs: Sequence[Measured],
                max_gamma: int = MAX_GAMMA) -> float | None:
    """The factor that brings `drafting`'s predictions within SPREAD of its measured runs: the median of measured
    / predicted speedup, each run predicted from its own rounds, moved towards 1 by SPREAD; None without a
    measurement or where they agree within it."""
    ratios = []
    for run in runs:
        if run.gamma > 0 and run.speedup > 0:
            predicted = (predicted_rate(costs, run.profile, min(run.gamma, max_gamma), drafting, run.positions)
                         * costs.ar_step_s(run.positions))
            if predicted > 0:
                ratios.append(run.speedup / predicted)
    if not ratios or 1 / SPREAD <= (ratio := median(ratios)) <= SPREAD:
        return None
    return ratio / SPREAD if ratio > SPREAD else ratio * SPREAD


def recommend(costs: CostModel, profiles: Mapping[Drafting, PositionAcceptance],
              max_gamma: int = MAX_GAMMA, positions: int = SCRATCH_POSITIONS,
              measured: Mapping[Drafting, Sequence[Measured]] | None = None) -> Recommendation:
    """The drafting and γ (1..max_gamma) with the most predicted tokens per second after `positions` cached
    positions (a chat's length: each cached position makes a step and each draft's row dearer), or plain AR where
    no drafting beats it by MARGIN; the smallest γ among equals. `profiles`: the acceptance measured with each
    drafting; `measured`: the runs measured with it, which may scale its prediction (see `calibration`). A drafting
    every fair run of which measured slower than plain AR is not recommended on a prediction of less than MARGIN
    beyond one run's SPREAD: a measured loss outranks a gain that small, which the window would show beside it."""
    ar_rate = 1.0 / costs.ar_step_s(positions)
    best = (ar_rate, Drafting.NONE, 0)
    best_within_margin = (ar_rate, Drafting.NONE, 0)  # the best drafting, where it beats AR by less than MARGIN
    speedups, scaled, outranked = {}, {}, {}
    for drafting, profile in profiles.items():
        if drafting is Drafting.NONE:
            continue
        rates = [predicted_rate(costs, profile, g, drafting, positions) for g in range(1, max_gamma + 1)]
        factor = calibration(costs, drafting, (measured or {}).get(drafting, ()), max_gamma)
        if factor is not None:
            scaled[drafting] = factor
            rates = [rate * factor for rate in rates]
        speedups[drafting] = [rate / ar_rate for rate in rates]
        gamma = max(range(1, max_gamma + 1), key=lambda g: (rates[g - 1], -g))
        runs = [run.speedup for run in (measured or {}).get(drafting, ()) if run.speedup > 0]
        if runs and max(runs) < 1.0 and rates[gamma - 1] < MARGIN * SPREAD * ar_rate:
            outranked[drafting] = max(runs)
        elif rates[gamma - 1] > best[0] and rates[gamma - 1] >= MARGIN * ar_rate:
            best = (rates[gamma - 1], drafting, gamma)
        elif rates[gamma - 1] > best_within_margin[0]:
            best_within_margin = (rates[gamma - 1], drafting, gamma)
    rate, drafting, gamma = best
    chosen = profiles.get(drafting) if drafting is not Drafting.NONE else None
    if chosen is None:  # plain AR: what the first draft of the likeliest drafting would have needed
        chosen_drafting = next((d for d in profiles if d is not Drafting.NONE), Drafting.MODEL)
        threshold = stop_threshold(costs, NO_ROUNDS, 0, chosen_drafting, positions)
        draft_s = extra_draft_s(costs, NO_ROUNDS, 0, chosen_drafting, positions)
        costs_said = _costs_said(draft_s, costs, positions, 1, copied_share(NO_ROUNDS, 1, chosen_drafting))
        need = (f"one would need a chance above {threshold:.2f} of being kept" if threshold < 1.0
                else "not even a draft that is always kept")
        near_rate, near_drafting, near_gamma = best_within_margin
        if near_gamma:
            near = floor(near_rate / ar_rate * 100) / 100  # rounded down: 1.047 is no "1.05×" beside "not 5 % faster"
            line = (f"no drafting is predicted {MARGIN - 1:.0%} faster than plain AR, as much as the predictions can "
                    f"be off (the best, {near_drafting.label} at γ ≤ {near_gamma}, {near:.2f}×); "
                    f"{costs_said}")
        else:
            line = f"no draft pays: {need}; {costs_said}"
        measured_said = "".join(f"; {d.label} measured slower than plain AR in every fair run here (best "
                                f"{fastest:.2f}×), which outranks its prediction" for d, fastest in outranked.items())
        return Recommendation(Drafting.NONE, 0, rate, 1.0, threshold, line + measured_said + _scaled_said(scaled),
                              speedups, scaled)
    threshold = stop_threshold(costs, chosen, gamma, drafting, positions)
    draft_s = extra_draft_s(costs, chosen, gamma, drafting, positions)
    measured_beyond = gamma < len(chosen.drafted) and chosen.drafted[gamma] > 0
    stop = (f"drafts stop when the chance of keeping the next token falls below {threshold:.2f}" if threshold < 1.0
            else f"drafts stop at {gamma}: a further draft would not pay even if it were always kept, as it costs "
                 f"more than the round's tokens do ({1e3 / rate:.2g} ms each)")
    copies = copied_share(chosen, gamma + 1, drafting)
    line = f"{stop}: {_costs_said(draft_s, costs, positions, gamma + 1, copies)}"
    if not measured_beyond:
        # Said as what is known: the rounds' own stop (not the γ cap) may be what kept them short
        line += f" (no round drafted more than {gamma}, so what a further draft would keep is not measured)"
    return Recommendation(drafting, gamma, rate, rate / ar_rate, threshold, line + _scaled_said(scaled), speedups,
                          scaled)


def _scaled_said(scaled: Mapping[Drafting, float]) -> str:
    """Which predictions were scaled to this machine's measurements, and by how much."""
    said = ", ".join(f"{drafting.label} ×{factor:.2f}" for drafting, factor in scaled.items())
    return f"; predictions scaled to the speedups measured here ({said})" if said else ""
