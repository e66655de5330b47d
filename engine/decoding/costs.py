"""What a round costs on this machine, and how long a round should draft: the seed's speedup formula (19.4.4)
with measured costs in place of the constant γ·T_q + T_p.

A round with d drafts costs C(d) = Σ c_i + T(d + 1) + o: each draft's cost c_i (a draft-model step, or a copied
token), the target's forward over a block of d + 1 rows, and the round's bookkeeping o, the steps and the block
priced at the cached positions they attend to. It yields
E(d) = Σ_{i=0..d} P_i tokens, P_i the chance that the first i drafts are all kept (P_0 = 1). A round drafts one
more token while that can raise E(d) / C(d), the round's tokens per second, judged from the drafts' calibrated
keep estimates and, for drafts not made yet, the acceptance measured at their position (`Acceptance`). Zero
drafts (a plain target step) is one of the choices, so a round never plans to be slower than AR. Nothing here
reads the target's p of the round being decided, so every token stays distributed as the target's.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

from engine.stats import MEASURED_PLAIN_ROUNDS, run_places

MEASURE_REPEATS = 5  # min of 5 timings per block size at load
MEASURED_ROWS = 9  # blocks of 1..9 rows are timed (γ ≤ 8)
# and these longer ones, which copied runs fill (engine.decoding.drafters.COPY_RUN_MAX drafts and the row after them);
# a block between two timed lengths is priced on the line between them, a longer one by the last one's growth
LONG_BLOCKS = (17, 33)
LONG_REPEATS = 3
# Blocks are timed after SCRATCH_POSITIONS cached positions, and again after LONG_POSITIONS more, for what each
# cached position adds to a block (attention reads every one of them for every row).
SCRATCH_POSITIONS = 16
LONG_POSITIONS = 1024
# Acceptance at each draft position (kept / reached), discounted by DECAY per verdict, starting at PRIOR with
# the weight of PRIOR_WEIGHT verdicts; the drafts' own keep estimates are scaled by kept / estimated per kind.
PRIOR = 0.6
PRIOR_WEIGHT = 4.0
DECAY = 0.98
# ... and by IDLE_DECAY per round that drafted nothing: a half-life of about 140 rounds, a reply or two, so a drafting
# given up is tried again every few dozen rounds at most, not every few. A draft's bookkeeping (CostModel.per_draft_s)
# fades by it too.
IDLE_DECAY = 0.995
KINDS = ("model", "copy")
QUIET_FACTOR = 1.5  # a round whose forward took longer than this times the block's cost was slowed by something else
PER_DRAFT_RATE = 0.1  # weight of each quiet round in the running mean of a draft's bookkeeping
# A single-row block after at least this many positions more than the scratch cache's times what a position adds:
# enough positions for their cost (~2.5 ms) to stand well above a step's jitter.
POSITIONS_SEEN = 512
# What the cached positions add to a step is neither linear in them nor the same from one load to the next (on one
# 2-core VM: 3.3 µs a position timed after 1,040 in one load, 8.3 in another, 5.5 at 4,165), so a conversation
# that reaches a length further than CONTEXT_SPAN (a share of it) from every length timed in place has a
# single-row step timed there, the fastest of CONTEXT_REPEATS, and plain steps near it refine that timing.
CONTEXT_SPAN = 0.25
CONTEXT_REPEATS = 5
RECENT_ROUNDS = 64  # the last plain steps, and drafted rounds, whose median loads LoadGap compares
# Drafted rounds are judged by their outcome too, PAYING_WINDOW at a time: where their tokens would have taken plain
# AR less time than they took, drafting pauses for PAUSE_ROUNDS plain rounds, twice as many each time in a row
# (up to MAX_PAUSE_ROUNDS; a window that pays halves the next pause), and is tried again after: a reply whose drafts
# stop paying (prose after code, a sampled answer) falls back to plain rounds within a few rounds, where the
# acceptance measured over many rounds would take dozens to fall, and comes back to drafting once they pay again.
# Rounds that ran the draft model and rounds of copies alone are judged and paused apart: beside a fast target a
# model draft may not pay where a copy, nearly free, still does (the embedded pair on code).
# A window pays where its rounds took no longer than plain rounds take now for their tokens: the median of the last
# PLAIN_NOW plain rounds' time over their cost (the cost model's price at the moment, until a plain round is seen).
PAYING_WINDOW = 3
PAUSE_ROUNDS, MAX_PAUSE_ROUNDS = 4, 64
PLAIN_NOW = 5
# Plain rounds are the control: a reply that drafts every round runs a plain one (a probe) after PROBE_EVERY drafted
# rounds in a row, and after EARLY_PROBE while it has fewer than MEASURED_PLAIN_ROUNDS, so what plain decoding costs
# is known under the load of now, not of the install, and the reply's speedup is measured (engine.stats). A probe
# costs a round's drafts: at 3 tokens a round and 1.5x, one in 16 rounds is ~2 % of the reply.
PROBE_EVERY, EARLY_PROBE = 16, 4
# Drafting priced out tries again at a bounded cost: after TRY_AFTER plain rounds in a row (or the kind's pause, if
# longer), a window of rounds drafts at the bare costs (the draft steps and the block, without the learnt bookkeeping
# per draft nor the drift), judged by what the plain rounds take now. Where it paid, the learnt bookkeeping and the
# drafted rounds' overruns are dropped: a transient that priced drafting out (a first call's set-up, a busy moment
# while the costs were timed) would otherwise keep it out, as no drafted round measures it again.
TRY_AFTER = 32
# What rounds took over what the costs said they would, drafted and plain, over the last DRIFT_ROUNDS of each, from
# DRIFT_LEAST of each on: a drafted round is priced at their ratio (a draft step or a verification row dearer on this
# CPU, or at this moment, than the costs file holds), within DRIFT_BOUNDS.
DRIFT_ROUNDS, DRIFT_LEAST = 16, 4
DRIFT_BOUNDS = (0.5, 2.0)
# Drafted rounds' overruns fade too: the oldest is dropped after each DRIFT_FADE plain rounds in a row. Else a few
# slow drafted rounds (a moment the machine was busy) could price every draft out for good: with no drafted round,
# nothing would measure the drift again. Past DRIFT_LEAST it is 1 again (about 100 plain rounds).
DRIFT_FADE = 8


@dataclass
class CostModel:
    """Measured costs of one loaded pair in its device, dtype and weights (seconds)."""

    target_block_s: list[float]  # [k - 1]: the target's forward over a block of k rows
    draft_step_s: float = 0.0  # one draft-model step (0: no draft model)
    copy_s: float = 0.0  # proposing one copied token (prompt lookup)
    overhead_s: float = 0.0  # a round's bookkeeping outside the forwards: sampling, verification, events, text
    # Each draft's own bookkeeping beyond its step (proposing it, its text and probabilities in the event), learnt
    # from quiet rounds: beside a fast target it is no small part of what a draft costs.
    per_draft_s: float = 0.0
    # [k - 1]: the fastest block of k rows seen in a round that ran the draft model (0: none yet). Running the
    # draft between two target forwards leaves less of the target's weights in the caches, so such a block costs
    # more than the same block timed back to back, as a plain step or a round of copies runs it.
    drafted_block_s: list[float] = field(default_factory=list)
    # What each cached position beyond SCRATCH_POSITIONS adds to the target's block: for its first row, and for each
    # further row (rows of one block share the reading of the cache, so a further row adds less); and to a draft-model
    # step. At a few thousand positions this is most of a step, and a draft's row costs as much as a short step:
    # rounds are planned, plain AR priced and recommendations made at the positions the block attends to.
    position_s: float = 0.0
    position_row_s: float = 0.0
    draft_position_s: float = 0.0
    # (positions, what they add to a single-row block) timed in the conversation's own cache, by positions: between
    # and near them a block is priced by them, the load's linear cost scaled to agree (a further row's too)
    context_steps: list[tuple[int, float]] = field(default_factory=list)
    # What a draft model's reading of tokens it is behind on costs a position (a prompt it reads with its first draft,
    # the tokens of rounds that did not run it): the fastest seen (0: none seen yet).
    draft_read_s: float = 0.0
    long_block_s: list[float] = field(default_factory=list)  # [i]: a block of LONG_BLOCKS[i] rows (empty: not timed)

    def block_s(self, rows: int) -> float:
        """The target's forward over `rows` rows: timed (1..MEASURED_ROWS, LONG_BLOCKS), on the line between the two
        timed lengths around it, or past the longest by the last stretch's growth per row.

        A timing caught by a busy moment is bounded by what cannot be slower: a block costs no more than a longer
        block, nor than its rows as single steps."""
        knots = self._bounded_timings()
        for (k0, s0), (k1, s1) in zip(knots, knots[1:]):
            if rows <= k1:
                return s0 + (s1 - s0) * (rows - k0) / (k1 - k0) if rows > k0 else s0
        if len(knots) < 2:
            return knots[-1][1]
        (k0, s0), (k1, s1) = knots[-2:]
        return s1 + (rows - k1) * max((s1 - s0) / (k1 - k0), 0.0)

    def _bounded_timings(self) -> list[tuple[int, float]]:
        """(rows, seconds) of each timed length, shortest first, each bounded by every longer timed block (a running
        minimum from the longest) and by its rows as single steps: one pass, as block_s is asked many times a
        draft."""
        lengths = [*range(1, len(self.target_block_s) + 1), *LONG_BLOCKS[:len(self.long_block_s)]]
        bounded, least = [], math.inf
        for rows, seconds in zip(reversed(lengths), reversed([*self.target_block_s, *self.long_block_s])):
            least = min(least, seconds)
            bounded.append((rows, min(least, rows * self.target_block_s[0])))
        return bounded[::-1]

    @property
    def ar_token_s(self) -> float:
        """One plain AR token: a single-row forward and a round's bookkeeping (after SCRATCH_POSITIONS)."""
        return self.block_s(1) + self.overhead_s

    def ar_step_s(self, positions: int = SCRATCH_POSITIONS) -> float:
        """One plain AR token after `positions` cached positions."""
        return self.ar_token_s + self.context_s(1, positions)

    def context_s(self, rows: int, positions: int) -> float:
        """What `positions` cached positions add to a block of `rows` rows beyond the scratch cache's."""
        added = max(0, positions - SCRATCH_POSITIONS)
        if not added:
            return 0.0
        linear_s = added * self.position_s
        first_row_s = self._first_row_context_s(positions) if self.context_steps else linear_s
        scale = first_row_s / linear_s if linear_s > 0 else 1.0
        return first_row_s + (rows - 1) * added * self.position_row_s * scale

    def _first_row_context_s(self, positions: int) -> float:
        """Interpolated between the lengths timed in place and the load's (where none of those is near it); past
        the longest, at its cost per position."""
        knots = [(SCRATCH_POSITIONS, 0.0), *self.context_steps]
        at_load = SCRATCH_POSITIONS + LONG_POSITIONS
        if self.position_s > 0 and self._timed_near(at_load) is None:
            knots.append((at_load, LONG_POSITIONS * self.position_s))
        knots.sort()
        for (p0, s0), (p1, s1) in zip(knots, knots[1:]):
            if positions <= p1:
                return s0 + (s1 - s0) * (positions - p0) / (p1 - p0)
        last, last_s = knots[-1]
        return last_s * (positions - SCRATCH_POSITIONS) / (last - SCRATCH_POSITIONS)

    def _timed_near(self, positions: int) -> int | None:
        """The index of the length timed in place within CONTEXT_SPAN of `positions` (None: none is)."""
        for i, (timed, _) in enumerate(self.context_steps):
            if abs(positions - timed) <= CONTEXT_SPAN * timed:
                return i
        return None

    def wants_context_step(self, positions: int) -> bool:
        """Whether a single-row step after `positions` cached positions is worth timing in place: enough positions
        to stand above a step's jitter, and no length timed in place near it."""
        return positions - SCRATCH_POSITIONS >= POSITIONS_SEEN and self._timed_near(positions) is None

    def observe_context_step(self, positions: int, forward_s: float) -> None:
        """A single-row block after `positions` cached positions (timed in place, or a plain round's): a new length
        timed, or the one timed near it refined (the fastest stands, reckoned at that one's positions)."""
        added = positions - SCRATCH_POSITIONS
        if added < POSITIONS_SEEN:
            return
        seen_s = max(0.0, forward_s - self.block_s(1))
        near = self._timed_near(positions)
        if near is None:
            self.context_steps = sorted([*self.context_steps, (positions, seen_s)])
            return
        timed, timed_s = self.context_steps[near]
        self.context_steps[near] = (timed, min(timed_s, seen_s * (timed - SCRATCH_POSITIONS) / added))

    def draft_model_step_s(self, positions: int = SCRATCH_POSITIONS) -> float:
        """One draft-model step after `positions` cached positions."""
        return self.draft_step_s + max(0, positions - SCRATCH_POSITIONS) * self.draft_position_s

    def steps_s(self, drafts: Sequence[str], positions: int = SCRATCH_POSITIONS) -> float:
        """The draft-model steps and copies that make `drafts` (each "model" or "copy") after `positions`."""
        return sum(self.draft_model_step_s(positions) if kind == "model" else self.copy_s for kind in drafts)

    def drafting_s(self, drafts: Sequence[str], positions: int = SCRATCH_POSITIONS) -> float:
        """Making `drafts`, their bookkeeping included."""
        return self.steps_s(drafts, positions) + len(drafts) * self.per_draft_s

    def verify_s(self, rows: int, model_ran: bool, positions: int = SCRATCH_POSITIONS) -> float:
        """The target's block of `rows` rows in a round that ran the draft model (or not), after `positions`."""
        seen = self.drafted_block_s[rows - 1] if model_ran and rows <= len(self.drafted_block_s) else 0.0
        return max(seen, self.block_s(rows)) + self.context_s(rows, positions)

    def round_s(self, drafts: Sequence[str], positions: int = SCRATCH_POSITIONS) -> float:
        """A round that makes `drafts` and verifies them all, after `positions` cached positions."""
        return (self.drafting_s(drafts, positions) + self.verify_s(len(drafts) + 1, "model" in drafts, positions)
                + self.overhead_s)

    def observe_block(self, rows: int, forward_s: float) -> None:
        """A timing of the target's forward over `rows` rows: the fastest seen stands (a busy machine only ever
        makes a timing slower)."""
        if forward_s <= 0:
            return
        if rows <= len(self.target_block_s):
            self.target_block_s[rows - 1] = min(self.target_block_s[rows - 1], forward_s)
        elif rows in LONG_BLOCKS[:len(self.long_block_s)]:
            i = LONG_BLOCKS.index(rows)
            self.long_block_s[i] = min(self.long_block_s[i], forward_s)

    def observe_read(self, positions: int, seconds: float) -> None:
        """A draft model's reading of `positions` tokens it was behind on: the fastest per position stands."""
        if positions > 0 and seconds > 0:
            per = seconds / positions
            self.draft_read_s = min(self.draft_read_s, per) if self.draft_read_s else per

    def observe_draft_step(self, seconds: float, positions: int) -> None:
        """A timing of one draft-model step after `positions` cached positions: the fastest seen stands, as for the
        target's blocks (a draft step timed at a busy load would otherwise price every draft out for good)."""
        scratch_s = seconds - max(0, positions - SCRATCH_POSITIONS) * self.draft_position_s
        if self.draft_step_s > 0 and scratch_s > 0:
            self.draft_step_s = min(self.draft_step_s, scratch_s)

    def observe_round(self, drafts: Sequence[str], forward_s: float, round_s: float,
                      positions: int = SCRATCH_POSITIONS) -> None:
        """A round's timings after `positions` cached positions: its block, and what it cost beyond its forward and
        its drafts' steps. A round with no draft times the bookkeeping and, near a length timed in place, what its
        positions add to a row (for both the fastest stands: a timing may have met a busy moment); a quiet
        round with drafts, its drafts' own share (a running mean, as it varies with what the drafts were)."""
        rows = len(drafts) + 1
        if not drafts and self._timed_near(positions) is not None:
            self.observe_context_step(positions, forward_s)
        # the block as it would have run after the scratch cache (what the cached positions added taken off)
        scratch_s = max(0.0, forward_s - self.context_s(rows, positions))
        quiet = scratch_s <= QUIET_FACTOR * self.block_s(rows)
        if "model" not in drafts:
            self.observe_block(rows, forward_s)
        elif quiet and rows <= len(self.target_block_s):
            self.drafted_block_s += [0.0] * (rows - len(self.drafted_block_s))
            seen = self.drafted_block_s[rows - 1]
            self.drafted_block_s[rows - 1] = min(seen, scratch_s) if seen else scratch_s
        extra = round_s - forward_s - self.steps_s(drafts, positions)
        if not drafts:
            self.overhead_s = min(self.overhead_s, extra) if self.overhead_s else max(extra, 0.0)
            # Else a moment that priced every draft out (a draft is never sure enough to pay) would never end: no
            # round would draft again to measure it. It fades as a given-up drafting's acceptance does.
            self.per_draft_s *= IDLE_DECAY
        elif quiet and round_s <= QUIET_FACTOR * self.round_s(drafts, positions):
            # quiet in full: a round that waited outside its forward (for the window's drawing, say) is left out
            share = max(0.0, (extra - self.overhead_s) / len(drafts))
            self.per_draft_s += PER_DRAFT_RATE * (share - self.per_draft_s)

    def as_dict(self) -> dict:
        return {"target_block_ms": [round(s * 1e3, 3) for s in self.target_block_s],
                "draft_step_ms": round(self.draft_step_s * 1e3, 3), "copy_ms": round(self.copy_s * 1e3, 3),
                "overhead_ms": round(self.overhead_s * 1e3, 3), "per_draft_ms": round(self.per_draft_s * 1e3, 3),
                "position_us": round(self.position_s * 1e6, 4), "position_row_us": round(self.position_row_s * 1e6, 4),
                "draft_position_us": round(self.draft_position_s * 1e6, 4),
                "context_steps_ms": [[p, round(s * 1e3, 3)] for p, s in self.context_steps],
                "drafted_block_ms": [round(s * 1e3, 3) for s in self.drafted_block_s],
                "draft_read_us": round(self.draft_read_s * 1e6, 4),
                "long_block_ms": [round(s * 1e3, 3) for s in self.long_block_s]}


def saved_costs(file: Path) -> CostModel | None:
    """The costs a pair measured at an earlier load on this machine (Decoder.costs_file), or None."""
    try:
        fields = json.loads(file.read_text(encoding="utf-8"))
        fields["context_steps"] = [tuple(step) for step in fields.get("context_steps", [])]
        return CostModel(**fields)
    except (OSError, ValueError, TypeError):
        return None


def save_costs(file: Path, costs: CostModel) -> None:
    """Best effort: a cache that cannot be written only means measuring again at the next load."""
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        partial = file.with_name(f"{file.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(dataclasses.asdict(costs)), encoding="utf-8")
        partial.replace(file)
    except OSError:
        pass


@dataclass
class LoadGap:
    """How much more the machine lately slowed a plain target step than a drafted round's block, each against its
    own fastest timing: a plain step in full against CostModel.ar_step_s, a block's forward against
    CostModel.verify_s (RoundEvent.load). The fastest single-row step is the least of every plain step the pair
    ran and stands further below a typical one than a drafted block's fastest does: on one 2-core VM, plain steps
    ran 1.3x theirs while the drafted blocks of the same minutes ran 1.04x. A reply with too few plain steps of its
    own prices plain AR at its blocks' load times this gap (RoundEvent.plain_load); priced at the blocks' load
    alone, replies that drafted every round read 0.60-1.01x where timed against plain AR they ran 0.79-1.35x."""

    plain: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_ROUNDS))
    drafted: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_ROUNDS))

    @property
    def ratio(self) -> float:
        """The recent plain steps' median load over the recent drafted rounds' (1 where either is unknown)."""
        if not self.plain or not self.drafted:
            return 1.0
        return median(self.plain) / median(self.drafted)

    def plain_step(self, plain_s: float, quiet_s: float) -> float:
        """A plain step's load, learnt: what it took beside its drafting decision over its cost (0: no cost)."""
        if quiet_s <= 0:
            return 0.0
        self.plain.append(plain_s / quiet_s)
        return self.plain[-1]

    def drafted_round(self, load: float) -> float:
        """The load a plain step met beside a drafted round whose block met `load`, learnt."""
        self.drafted.append(load)
        return load * self.ratio


def fastest(run: Callable[[], None], repeats: int = MEASURE_REPEATS, synchronize: Callable[[], None] = lambda: None
            ) -> float:
    """The fastest of `repeats` timings of `run` (min-of-N: noise only ever adds time)."""
    times = []
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        run()
        synchronize()
        times.append(time.perf_counter() - start)
    return min(times)


@dataclass
class Acceptance:
    """How often drafts are kept: per draft position (reached → kept), and per kind how the drafts' own keep
    estimates compare with what the target kept (their calibration)."""

    kept: list[float] = field(default_factory=list)  # [i]: discounted count of drafts kept at position i + 1
    reached: list[float] = field(default_factory=list)
    calibration: dict = field(default_factory=lambda: {kind: [PRIOR_WEIGHT, PRIOR_WEIGHT] for kind in KINDS})
    # [kind]: discounted counts [kept, reached] of rounds' first drafts of that kind, a dropped one as reached
    first: dict = field(default_factory=lambda: {kind: [0.0, 0.0] for kind in KINDS})
    # [j]: discounted counts of copies kept and reached at place j + 1 of a run of copies (a round's copies in a row;
    # a copy after a model draft starts one): once a copied run is kept it mostly goes on being kept, as an answer
    # repeats a pasted function line after line, where a copy that starts a run is a guess
    run_kept: list[float] = field(default_factory=list)
    run_reached: list[float] = field(default_factory=list)

    def _counts(self, position: int) -> tuple[float, float]:
        """The discounted counts of drafts kept and reached at `position` (1-based; 0 where none was)."""
        i = position - 1
        return (self.kept[i] if i < len(self.kept) else 0.0), (self.reached[i] if i < len(self.reached) else 0.0)

    def at(self, position: int) -> float:
        """The measured chance that a draft at `position` (1-based) is kept, once the ones before it were."""
        kept, reached = self._counts(position)
        return (kept + PRIOR * PRIOR_WEIGHT) / (reached + PRIOR_WEIGHT)

    def hoped(self, positions: int, first_kind: str | None = None) -> list[float]:
        """What drafts not made yet at positions 1..`positions` may be worth: each position's measured chance with
        the chance at the position before it as its prior (PRIOR at the first), one standard error up. A first
        draft of `first_kind` is judged by how that kind's first drafts fared, the position's chance as their
        prior: copies kept in a row do not make the draft model's next first draft look sure (on prose beside the
        embedded target a model draft is kept less than half the time where a copy is kept most of the time).

        The prior chain expects a position rounds have rarely reached to keep drafts as the ones before it do, so
        rounds whose drafts are all kept lengthen quickly where drafting is cheap (a GPU's rounds); the standard
        error keeps a position few verdicts judge hopeful, the hope narrowing as they accumulate, so one rejected
        first draft (a chat preamble against a code fence, where draft and target disagree most) does not stop a
        code answer's drafting, while rejections in a row do."""
        hopes, chance = [], PRIOR
        for position in range(1, positions + 1):
            kept, reached = self._counts(position)
            chance = (kept + chance * PRIOR_WEIGHT) / (reached + PRIOR_WEIGHT)
            if position == 1 and first_kind is not None:
                kind_kept, kind_reached = self.first[first_kind]
                chance = (kind_kept + chance * PRIOR_WEIGHT) / (kind_reached + PRIOR_WEIGHT)
            hopes.append(min(1.0, chance + math.sqrt(chance * (1.0 - chance) / (reached + PRIOR_WEIGHT))))
        return hopes

    def copy_run(self, first: float, start: int, count: int) -> list[float]:
        """The chances that copies at places start..start + count - 1 of a run are kept, each once the ones before
        it were: each place's measured share, with the place before it as its prior (`first`, a copy's calibrated
        estimate, before the first place)."""
        chances, chance = [], first
        for place in range(1, start + count):
            i = place - 1
            kept, reached = (self.run_kept[i], self.run_reached[i]) if i < len(self.run_reached) else (0.0, 0.0)
            chance = (kept + chance * PRIOR_WEIGHT) / (reached + PRIOR_WEIGHT)
            if place >= start:
                chances.append(chance)
        return chances

    def calibrated(self, estimate: float, kind: str) -> float:
        kept, estimated = self.calibration[kind]
        return min(1.0, estimate * kept / estimated)

    def record(self, kinds: Sequence[str], estimates: Sequence[float], n_accepted: int, dropped: str | None = None
               ) -> None:
        """A verdict: the target kept the first `n_accepted` of drafts of these kinds and keep estimates.

        `dropped`: the kind of one more draft made after these but not verified, its own estimate too low to pay. For
        planning it is a draft that yielded no token: its position counts as reached and not kept (where the
        drafts before it were all kept), though the calibration, which needs the target's verdict, leaves it out.
        Otherwise a planner expecting drafts to pay at a position would draft there and drop the draft every round.

        A round that drafted nothing is a verdict on nothing, but older verdicts fade by it too (more slowly): a
        drafting judged not worth it is tried again once the evidence against it has faded (a reply's topic, and
        with it how often drafts are kept, changes)."""
        decay = DECAY if kinds or dropped else IDLE_DECAY
        for counts in (self.kept, self.reached, self.run_kept, self.run_reached):
            counts[:] = [c * decay for c in counts]
        for kind in KINDS:
            self.calibration[kind] = [c * decay for c in self.calibration[kind]]
            self.first[kind] = [c * decay for c in self.first[kind]]
        if kinds or dropped:
            first = self.first[kinds[0] if kinds else dropped]
            first[0] += n_accepted > 0
            first[1] += 1
        looked_at = min(n_accepted + 1, len(kinds))  # drafts after the first rejection were never judged
        reached = looked_at + (dropped is not None and n_accepted == len(kinds))
        while len(self.reached) < reached:
            self.kept.append(0.0)
            self.reached.append(0.0)
        for i in range(reached):
            self.reached[i] += 1
            self.kept[i] += i < n_accepted
        for i in range(looked_at):
            self.calibration[kinds[i]][0] += i < n_accepted
            self.calibration[kinds[i]][1] += estimates[i]
        for i, place in enumerate(run_places(kinds[:looked_at])):
            if place:
                while len(self.run_reached) < place:
                    self.run_kept.append(0.0)
                    self.run_reached.append(0.0)
                self.run_reached[place - 1] += 1
                self.run_kept[place - 1] += i < n_accepted


def expected_tokens(chances: Sequence[float]) -> float:
    """E(d): 1 + P_1 + ... + P_d for drafts kept with these conditional chances."""
    total, all_kept = 1.0, 1.0
    for chance in chances:
        all_kept *= chance
        total += all_kept
    return total


@dataclass
class RoundPlanner:
    """Decides, draft by draft, whether a round goes on drafting (see the module docstring)."""

    costs: CostModel
    acceptance: Acceptance = field(default_factory=Acceptance)
    positions: int = SCRATCH_POSITIONS  # what the round being planned attends to (the decoder sets it each round)
    # Greedy drafts are kept far more often than sampled ones: each decoding has its own acceptance, so replies of
    # one do not keep the other from drafting. `acceptance` is the current decoding's, `resting` the other's.
    greedy: bool | None = None
    resting: Acceptance | None = None
    # Per drafting kind ("model": rounds that ran the draft model, "copy": rounds of copies alone): the last such
    # rounds' (plain AR's time for their tokens and their own, by the costs; what they took), not judged yet; the
    # rounds without that kind to go before it is tried again; and the pause its next failed window earns
    # (_start_judging sets them).
    window: dict = field(init=False)
    paused: dict = field(init=False)
    next_pause: dict = field(init=False)
    # a round's time over its costs' price: drafted rounds' (True) and plain rounds' (False), the last DRIFT_ROUNDS
    overruns: dict = field(default_factory=lambda: {True: deque(maxlen=DRIFT_ROUNDS),
                                                    False: deque(maxlen=DRIFT_ROUNDS)})
    drift: float = 1.0  # what a drafted round costs over its price, against what a plain round does (_drift_of)
    plain_run: int = 0  # plain rounds since the last drafted one (DRIFT_FADE)
    # The reply's (_start_judging sets them): drafted rounds since the last plain one (PROBE_EVERY), its plain rounds
    # so far (EARLY_PROBE), whether a window lost to plain rounds measured before it (the next round is a plain
    # one), and per kind such a window's (plain AR's time by the costs, its time), judged again after that round.
    drafted_run: int = field(init=False)
    reply_plain: int = field(init=False)
    probe_now: bool = field(init=False)
    rejudged: dict = field(init=False)
    trying: str | None = None  # the kind whose window drafts at the bare costs (TRY_AFTER)

    def __post_init__(self) -> None:
        self._start_judging(earned=False)

    def _start_judging(self, earned: bool) -> None:
        """No round judged yet and no kind paused; the pauses the next failed windows earn back at PAUSE_ROUNDS
        unless `earned` (what the chat's drafts earned so far stands)."""
        self.window = {kind: [] for kind in KINDS}
        self.paused = dict.fromkeys(KINDS, 0)
        self.drafted_run = self.reply_plain = 0
        self.probe_now, self.rejudged = False, {}
        if not earned:
            self.next_pause = dict.fromkeys(KINDS, PAUSE_ROUNDS)
            self.trying = None

    def forget_acceptance(self) -> None:
        """A new chat, a new topic: its drafts are judged from the prior again, greedy and sampled alike, so
        one chat whose drafts were rarely kept does not leave the next drafting nothing. The costs stay."""
        self.acceptance, self.resting, self.greedy = Acceptance(), None, None
        self._start_judging(earned=False)

    def _drift_of(self) -> float:
        """`drift` from the rounds observed (1 until both kinds are known); kept, as every draft decision reads it."""
        drafted, plain = self.overruns[True], self.overruns[False]
        if len(drafted) < DRIFT_LEAST or len(plain) < DRIFT_LEAST:
            return 1.0
        low, high = DRIFT_BOUNDS
        return min(high, max(low, median(drafted) / median(plain)))

    def observe_round(self, drafted: str | None, ar_s: float, priced_s: float, took_s: float) -> None:
        """A round's outcome: what it drafted ("model" where it ran the draft model, "copy" for copies alone, None
        for nothing), plain AR's time for its tokens and its own, both by the costs, and what it took. Drafted
        rounds that did not pay, judged PAYING_WINDOW of a kind at a time at the drift's price, pause that kind
        (see PAYING_WINDOW)."""
        if priced_s > 0 and took_s > 0:
            self.overruns[drafted is not None].append(took_s / priced_s)
        self.plain_run = 0 if drafted is not None else self.plain_run + 1
        self.drafted_run = 0 if drafted is None else self.drafted_run + 1
        self.reply_plain += drafted is None
        if self.plain_run and self.plain_run % DRIFT_FADE == 0 and self.overruns[True]:
            self.overruns[True].popleft()
        self.drift = self._drift_of()
        for kind in KINDS:
            if kind != drafted:
                self.paused[kind] = max(0, self.paused[kind] - 1)
        if drafted is None:
            self.probe_now = False
            for kind, (ar_total, took_total) in self.rejudged.items():  # by this fresh plain round
                self._judge(kind, took_total <= ar_total * (self.plain_now() or 0.0))
            self.rejudged.clear()
            return
        window = self.window[drafted]
        window.append((ar_s, priced_s, took_s))
        if len(window) < PAYING_WINDOW:
            return
        ar_total, priced_total, took_total = (sum(column) for column in zip(*window))
        window.clear()
        plain_now = self.plain_now()
        if plain_now is None or took_total <= 0:
            self._judge(drafted, ar_total >= priced_total * self.drift)
        elif took_total <= ar_total * plain_now:
            self._judge(drafted, True)
        elif self.drafted_run > PAYING_WINDOW:
            # the plain rounds it lost to were measured before this window, maybe under another load: one plain
            # round now, and the window is judged again by it (a load that slowed both arms alike is no loss)
            self.rejudged[drafted] = (ar_total, took_total)
            self.probe_now = True
        else:
            self._judge(drafted, False)

    def _judge(self, kind: str, paid: bool) -> None:
        """A window of `kind`'s rounds paid, or it did not: that kind pauses, longer each time in a row. A trial's
        window that paid drops what priced drafting out (TRY_AFTER)."""
        if self.trying == kind:
            self.trying = None
            if paid:
                self.costs.per_draft_s = 0.0
                self.overruns[True].clear()
                self.drift = 1.0
        if paid:  # halved, not reset: on a busy machine a window pays by chance now and then
            self.next_pause[kind] = max(PAUSE_ROUNDS, self.next_pause[kind] // 2)
        else:
            self.paused[kind] = self.next_pause[kind]
            self.next_pause[kind] = min(2 * self.next_pause[kind], MAX_PAUSE_ROUNDS)

    def plain_now(self) -> float | None:
        """What plain rounds take now over their cost: the median of the last PLAIN_NOW (None: none seen)."""
        plain = list(self.overruns[False])[-PLAIN_NOW:]
        return median(plain) if plain else None

    @property
    def probe_due(self) -> bool:
        """Whether the next round is a plain one, to measure what plain decoding costs now (PROBE_EVERY)."""
        return (self.probe_now or self.drafted_run >= PROBE_EVERY
                or (self.reply_plain < MEASURED_PLAIN_ROUNDS and self.drafted_run >= EARLY_PROBE))

    def decode(self, greedy: bool) -> None:
        """Plan a reply's rounds for greedy or sampled decoding. It drafts at once (another prompt's pause would
        keep a code answer from drafting), and its drafted rounds are judged by their own outcome; but a pause it
        earns is as long as the chat's drafts have earned so far, so a pair whose drafts never pay loses one
        window of rounds a reply, not one per pause length (a new chat starts at PAUSE_ROUNDS again)."""
        self._start_judging(earned=True)
        if self.greedy is not None and greedy != self.greedy:
            self.acceptance, self.resting = self.resting or Acceptance(), self.acceptance
        self.greedy = greedy

    def best_length(self, kinds: Sequence[str], chances: Sequence[float]) -> int:
        """How many of the drafts made so far to verify: the d ≤ len(kinds) with the most tokens per second,
        their drafting being paid already."""
        return max(range(len(kinds) + 1), key=lambda d: self._rate(kinds, chances, d, bare=self._bare(kinds)))

    def _bare(self, kinds: Sequence[str]) -> bool:
        """Whether a round of `kinds` is priced at the bare costs: its first kind's trial (TRY_AFTER)."""
        return bool(kinds) and self.trying == kinds[0]

    def _try(self, kind: str) -> bool:
        """Whether a round drafting `kind` first tries it at the bare costs: priced out for TRY_AFTER plain rounds
        in a row (or its pause's length)."""
        if self.trying is None and self.plain_run >= max(TRY_AFTER, self.next_pause[kind]):
            self.trying = kind
        return self.trying == kind

    def planned_length(self, cap: int) -> int:
        """How many model drafts (up to `cap`) a round makes when it cannot read each before making the next (on a
        GPU): the length with the most tokens per second by the acceptance expected at each position."""
        if self.paused["model"] or self.probe_due:
            return 0
        chances = self.acceptance.hoped(cap, first_kind="model")
        best = max(range(cap + 1), key=lambda d: self._rate(["model"] * d, chances, d))
        if not best and self._try("model"):
            best = max(range(cap + 1), key=lambda d: self._rate(["model"] * d, chances, d, bare=True))
        return best

    def draft_more(self, kinds: Sequence[str], chances: Sequence[float], cap: int, next_kind: str = "model",
                   later_kind: str = "model", unread: int = 0) -> bool:
        """Whether drafting beyond these drafts (up to `cap` in all) can beat stopping now: the best rate of any
        longer round, its future drafts judged by the acceptance measured at their positions, against the best
        rate of verifying what is drafted. The next draft costs what `next_kind` costs, later ones `later_kind`
        (a drafter without a draft model only ever copies); a paused kind is not drafted, nor hoped for later.

        `unread`: the tokens the draft model must read before its first step. A round that would run it first pays
        that reading, spread over the PAYING_WINDOW rounds it serves before the outcome guard judges them: paid
        once, it is what resuming drafting costs, and beside a fast target it is dearer than a round's drafts (the
        embedded draft reads a 50-token prompt in ~7 ms, two target steps)."""
        if len(kinds) >= cap or self.paused[next_kind] or (not kinds and self.probe_due):
            return False
        if kinds:
            return self._longer_pays(kinds, chances, cap, next_kind, later_kind, unread, self._bare(kinds))
        return (self._longer_pays(kinds, chances, cap, next_kind, later_kind, unread, bare=False)
                or (self._try(next_kind)
                    and self._longer_pays(kinds, chances, cap, next_kind, later_kind, 0, bare=True)))

    def _longer_pays(self, kinds: Sequence[str], chances: Sequence[float], cap: int, next_kind: str,
                     later_kind: str, unread: int, bare: bool) -> bool:
        """draft_more's question, at the bare costs or not (a trial pays its reading: it is what it measures)."""
        stop = self._rate(kinds, chances, self.best_length(kinds, chances), bare=bare)
        reading_s = 0.0 if "model" in kinds else unread * self.costs.draft_read_s / PAYING_WINDOW
        future_kinds, future_chances = list(kinds), list(chances)
        hopes = self.acceptance.hoped(cap, first_kind=None if kinds else next_kind)
        last = cap if not self.paused[later_kind] else len(kinds) + 1
        for position in range(len(kinds) + 1, last + 1):
            future_kinds.append(next_kind if position == len(kinds) + 1 else later_kind)
            future_chances.append(hopes[position - 1])
            if self._rate(future_kinds, future_chances, len(future_kinds),
                          reading_s if "model" in future_kinds else 0.0, bare) > stop:
                return True
        return False

    def _rate(self, kinds: Sequence[str], chances: Sequence[float], verified: int, reading_s: float = 0.0,
              bare: bool = False) -> float:
        """Tokens per second of a round that makes `kinds` and verifies the first `verified`, at the drift's price
        where it drafts, with `reading_s` of the draft's reading; `bare`: at the draft steps' and the block's costs
        alone (TRY_AFTER)."""
        verify_s = self.costs.verify_s(verified + 1, "model" in kinds, self.positions)
        drafting_s = (self.costs.steps_s(kinds, self.positions) if bare
                      else self.costs.drafting_s(kinds, self.positions))
        round_s = drafting_s + verify_s + self.costs.overhead_s + reading_s
        return expected_tokens(chances[:verified]) / (round_s * (self.drift if kinds and not bare else 1.0))
