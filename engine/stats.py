"""Statistics computed from round events, and the seed's formulas (section 19.4.4). No torch here.

α is estimated as accepted / verified drafts: the target looks at the accepted prefix and the first rejected
draft, so this is the per-draft acceptance probability E_{x~q}[min(1, p(x)/q(x))] that the seed's
E = (1 − α^(γ+1)) / (1 − α) assumes. `acceptance_rate` (accepted / drafted) is reported beside it.
"""
from __future__ import annotations

import math
from bisect import insort
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from statistics import median, quantiles

from engine.events import RoundEvent


def expected_tokens_per_round(alpha: float, gamma: int) -> float:
    """E[#tokens] = (1 − α^(γ+1)) / (1 − α): accepted drafts plus the correction or bonus token."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def modelled_speedup(alpha: float, gamma: int, draft_over_target: float) -> float:
    """The seed's speedup model E / (1 + γ·T_q/T_p)."""
    return expected_tokens_per_round(alpha, gamma) / (1.0 + gamma * draft_over_target)


@dataclass(frozen=True)
class ReplyStats:
    n_rounds: int
    n_tokens: int
    n_drafted: int
    n_verified: int
    n_accepted: int
    alpha: float  # accepted / verified
    acceptance_rate: float  # accepted / drafted
    tokens_per_round: float
    draft_s: float
    verify_s: float
    prefill_s: float  # reading the prompt
    decode_s: float  # all rounds
    wall_s: float  # prefill + all rounds
    tokens_per_s: float  # while decoding (n_tokens / decode_s): reading a long prompt is not the decoding's speed
    speedup: SpeedupFigure  # vs plain AR, measured against the reply's own plain rounds

    def as_dict(self) -> dict:
        return {**asdict(self), "speedup": self.speedup.as_dict()}


BUSY_FACTOR = 2.0  # a timing this many times the reference is a stall, not the model's speed
BUSY_SHARE = 0.2  # the share of a reply's time in stalled rounds above which its numbers are flagged
# A reply the machine's load stalled goes on with one thread (app.chat.worker) and keeps it where, over its next
# LOADED_ROUNDS rounds, its tokens came ONE_THREAD_GAIN times as fast as over the LOADED_ROUNDS before: a smaller
# gain is one run's spread (±10 % here), and all threads are where every decode starts.
LOADED_ROUNDS = 8
ONE_THREAD_GAIN = 1.1
# The live speedup is measured against the reply's own plain rounds (engine.decoding.costs probes them while it
# drafts): from MEASURED_PLAIN_ROUNDS of them on, and as a fair figure only while the band of their median's
# uncertainty (a notched box plot's: ±1.57·IQR/√n) stays within FAIR_SPREAD of the figure.
MEASURED_PLAIN_ROUNDS = 2
FAIR_SPREAD = 0.15
ABOVE_ROUNDS = 1.02
MEDIAN_NOTCH = 1.57


def token_pace_s(events: Sequence[RoundEvent]) -> float:
    """Seconds a token over these rounds, their median round's: what a switch of threads is judged by."""
    return median(e.round_s / max(1, len(e.emitted)) for e in events) if events else 0.0


def went_faster(before: Sequence[RoundEvent], after: Sequence[RoundEvent]) -> bool:
    """Whether the rounds `after` a switch to one thread made their tokens enough faster than those `before` it."""
    return token_pace_s(after) * ONE_THREAD_GAIN < token_pace_s(before)


def is_plain(event: RoundEvent) -> bool:
    """A round that drafted nothing: one plain target step, what plain AR runs for every token."""
    return not event.gamma and len(event.emitted) == 1


def plain_s(event: RoundEvent) -> float:
    """What a plain round's step took: its round without its drafting decision, which plain AR does not make."""
    return event.round_s - event.draft_s


@dataclass(frozen=True)
class SpeedupFigure:
    """A reply's speedup over plain AR, measured: its tokens per second over its rounds against its own plain
    rounds' under the same load. `value` is None where it is not measured yet; `note` says why a figure is not a
    fair one (empty where it is)."""

    value: float | None
    low: float = 0.0
    high: float = 0.0
    plain_rounds: int = 0
    note: str = ""

    @property
    def fair(self) -> bool:
        return self.value is not None and not self.note

    def as_dict(self) -> dict:
        return {"value": self.value, "low": self.low, "high": self.high, "plain_rounds": self.plain_rounds,
                "fair": self.fair, "note": self.note}


def _median_band(sorted_values: list[float]) -> tuple[float, float, float]:
    """The median of these sorted values and its uncertainty band (a notched box plot's)."""
    n = len(sorted_values)
    mid = median(sorted_values)
    q1, q3 = (quantiles(sorted_values, n=4, method="inclusive")[i] for i in (0, 2)) if n > 1 else (mid, mid)
    half = MEDIAN_NOTCH * (q3 - q1) / math.sqrt(n)
    return mid, max(0.0, mid - half), mid + half


class SpeedupMeter:
    """The live speedup of one reply, added round by round: the one place the figure is computed (the CLI's
    --json, the window's charts and footer, the export and the bench all read it).

    Plain AR's time for the reply's tokens is measured, not predicted: each plain round (a round that drafted
    nothing is a plain AR step, its drafting decision left out) took what it took, and every other round's tokens
    are priced at the plain rounds' median load (time over the cost model's quiet price for the step, which follows
    the cached positions; one unit per token without a cost model) times their quiet price. A continued reply's
    parts were decoded at other moments: each part is measured by its own plain rounds."""

    def __init__(self, events: Iterable[RoundEvent] = ()):
        self.parts: list[tuple[float, float, float, int]] = []  # finished parts: AR seconds (mid, low, high), plain n
        self.rounds_s = 0.0
        self.stalled_s = 0.0  # drafted rounds' time that stalled (BUSY_FACTOR): a load no plain round met
        self.tokens = 0
        self.rounds = 0
        self._start_part()
        for event in events:
            self.add(event)

    def _start_part(self) -> None:
        self.plain_own_s = 0.0  # the part's plain rounds' own time
        self.loads: list[float] = []  # sorted: each plain round's time over its quiet price
        self.priced = 0.0  # the quiet price of the part's other rounds' tokens

    def add(self, event: RoundEvent) -> None:
        if event.index == 0 and self.rounds:  # a continuation's first round
            self.parts.append((*self._part_ar_s(), len(self.loads)))
            self._start_part()
        quiet = event.ar_equivalent_s or len(event.emitted)
        if is_plain(event):
            self.plain_own_s += plain_s(event)
            insort(self.loads, plain_s(event) / quiet)
        else:
            self.priced += quiet
            self.stalled_s += event.round_s if event.ar_equivalent_s and event.load > BUSY_FACTOR else 0.0
        self.rounds_s += event.round_s
        self.tokens += len(event.emitted)
        self.rounds += 1

    def _part_ar_s(self) -> tuple[float, float, float]:
        if not self.loads:
            return 0.0, 0.0, 0.0
        mid, low, high = _median_band(self.loads)
        return tuple(self.plain_own_s + self.priced * load for load in (mid, low, high))

    def round_speedup(self, event: RoundEvent) -> float:
        """One round's own figure at the part's plain load so far (0 before a plain round is measured)."""
        if not self.loads or event.round_s <= 0:
            return 0.0
        if is_plain(event):
            return plain_s(event) / event.round_s
        return (event.ar_equivalent_s or len(event.emitted)) * median(self.loads) / event.round_s

    @property
    def figure(self) -> SpeedupFigure:
        parts = [*self.parts, (*self._part_ar_s(), len(self.loads))]
        fewest = min(n for *_, n in parts)
        if self.rounds_s <= 0 or fewest < MEASURED_PLAIN_ROUNDS:
            return SpeedupFigure(None, plain_rounds=fewest, note="not measured yet")
        mid, low, high = (sum(column) / self.rounds_s for column in list(zip(*parts))[:3])
        note = ""
        if (high - low) / 2 > FAIR_SPREAD * mid or self.stalled_s > BUSY_SHARE * self.rounds_s:
            note = "machine busy"  # its plain rounds varied (the band says how much), or drafted rounds stalled
        elif above_its_rounds(mid, self.tokens / self.rounds):
            note = "above its tokens per round"
        return SpeedupFigure(mid, low, high, fewest, note)


def above_its_rounds(speedup: float, tokens_per_round: float) -> bool:
    """Whether a speedup over plain AR is more than its rounds allow: every round costs a plain step at least, so
    speculation cannot beat plain AR by more than its tokens per round (by more than ABOVE_ROUNDS, for rounding); a
    figure above that met another load than the plain run it is measured against. The live figure and Find best
    draft's ranking (engine.benchmark.ranking) both apply it."""
    return speedup > tokens_per_round * ABOVE_ROUNDS


def typical_load(events: Sequence[RoundEvent]) -> float:
    """The load these rounds met, their median's: a plain round's time over its quiet price, a drafted round's
    RoundEvent.plain_load (its block's, as a plain step would have met it) or, where not recorded, its load."""
    loads = [plain_s(e) / e.ar_equivalent_s if is_plain(e) and e.ar_equivalent_s else e.plain_load or e.load
             for e in events]
    return median(loads) if loads else 1.0


def measured_speedup(events: Iterable[RoundEvent]) -> SpeedupFigure:
    """The speedup over plain AR these rounds measure (SpeedupMeter)."""
    return SpeedupMeter(events).figure


def reply_stats(events: Sequence[RoundEvent]) -> ReplyStats:
    n_tokens = sum(len(e.emitted) for e in events)
    n_drafted = sum(e.gamma for e in events)
    n_verified = sum(len(e.drafted) for e in events)
    n_accepted = sum(e.n_accepted for e in events)
    prefill_s = sum(e.prefill_s for e in events)
    rounds_s = sum(e.round_s for e in events)
    wall_s = prefill_s + rounds_s
    return ReplyStats(
        n_rounds=len(events), n_tokens=n_tokens, n_drafted=n_drafted, n_verified=n_verified, n_accepted=n_accepted,
        alpha=n_accepted / n_verified if n_verified else 0.0,
        acceptance_rate=n_accepted / n_drafted if n_drafted else 0.0,
        tokens_per_round=n_tokens / len(events) if events else 0.0,
        draft_s=sum(e.draft_s for e in events), verify_s=sum(e.verify_s for e in events),
        prefill_s=prefill_s, decode_s=rounds_s, wall_s=wall_s,
        tokens_per_s=n_tokens / rounds_s if rounds_s > 0 else 0.0,
        speedup=measured_speedup(events),
    )


def per_position_acceptance(events: Iterable[RoundEvent]) -> list[float]:
    """P(draft i accepted | drafts before it accepted), for i = 1..max γ: how α decays along the draft."""
    accepted: list[int] = []
    verified: list[int] = []
    for event in events:
        for i, token in enumerate(event.drafted):
            while len(verified) <= i:
                verified.append(0)
                accepted.append(0)
            verified[i] += 1
            accepted[i] += token.accepted
    return [a / v for a, v in zip(accepted, verified)]


@dataclass(frozen=True)
class PositionAcceptance:
    """Acceptance along the draft, from a reply's or a session's rounds; lists are indexed by draft position − 1.

    Every share is over all rounds (a round that drafted nothing counts too), so 1 + Σ kept is the tokens per
    round the drafts bought, and `mean_accepted` is Σ kept.
    """

    n_rounds: int
    drafted: tuple[float, ...]  # share of rounds that made an i-th draft
    copied: tuple[float, ...]  # share of rounds whose i-th draft was a copy (prompt lookup), not a model step
    kept: tuple[float, ...]  # share of rounds whose i-th draft was kept (the first i all accepted)
    conditional: tuple[float, ...]  # P(i-th kept | the ones before it kept): per_position_acceptance
    alpha: float  # accepted / verified drafts
    mean_accepted: float  # accepted drafts per round (the mean acceptance length)
    tokens_per_round: float  # measured
    # The seed's E = (1 − α^(γ+1)) / (1 − α) at this α, averaged over the rounds' own γ (γ = 0: 1 token)
    seed_tokens_per_round: float

    def as_dict(self) -> dict:
        return asdict(self)


def position_acceptance(events: Iterable[RoundEvent]) -> PositionAcceptance:
    """Acceptance by draft position of these rounds (one reply's, or a session's: see session_acceptance)."""
    events = list(events)
    n = len(events)
    longest = max((e.gamma for e in events), default=0)
    drafted, copied, kept = [0] * longest, [0] * longest, [0] * longest
    for event in events:
        for i in range(event.gamma):
            drafted[i] += 1
            copied[i] += i < len(event.draft_kinds) and event.draft_kinds[i] == "copy"
        for i in range(event.n_accepted):
            kept[i] += 1
    stats = reply_stats(events)
    share = (lambda counts: tuple(c / n for c in counts)) if n else (lambda counts: ())
    return PositionAcceptance(
        n_rounds=n, drafted=share(drafted), copied=share(copied), kept=share(kept),
        conditional=tuple(per_position_acceptance(events)), alpha=stats.alpha,
        mean_accepted=stats.n_accepted / n if n else 0.0, tokens_per_round=stats.tokens_per_round,
        seed_tokens_per_round=sum(expected_tokens_per_round(stats.alpha, e.gamma) for e in events) / n if n else 0.0,
    )


@dataclass(frozen=True)
class CopyRunAcceptance:
    """How copies fare along a run of copies: of the copied drafts the target checked at place j of a run (a
    round's copies in a row, places counted from the run's first copy, so a copy after a model draft is at place 1),
    how many it kept. Lists are indexed by place − 1; where no copy was checked they are empty. A copy that starts a
    run is a guess from a few matching tokens; once the target keeps one, the next ones mostly follow (the cost
    model prices a copy by the same places: engine.decoding.costs.Acceptance.copy_run)."""

    checked: tuple[int, ...] = ()
    kept: tuple[int, ...] = ()

    @property
    def shares(self) -> tuple[float, ...]:
        return tuple(k / c for k, c in zip(self.kept, self.checked))

    def as_dict(self) -> dict:
        return {"checked": list(self.checked), "kept": list(self.kept), "shares": list(self.shares)}


def run_places(kinds: Sequence[str]) -> list[int]:
    """Each draft's place in its run of copies (1 for a run's first copy), 0 for a model draft: a round's copies in
    a row make a run, and a model draft ends one. The planner (engine.decoding.costs.Acceptance) and the why-γ tab
    count copies kept by these places."""
    places, place = [], 0
    for kind in kinds:
        place = place + 1 if kind == "copy" else 0
        places.append(place)
    return places


def copy_run_acceptance(events: Iterable[RoundEvent]) -> CopyRunAcceptance:
    """Acceptance of copies by their place in a run of copies, over these rounds' checked drafts (rounds that do
    not say their drafts' kinds count none)."""
    checked: list[int] = []
    kept: list[int] = []
    for event in events:
        for token, place in zip(event.drafted, run_places(event.draft_kinds)):
            if not place:
                continue
            if len(checked) < place:
                checked.append(0)
                kept.append(0)
            checked[place - 1] += 1
            kept[place - 1] += token.accepted
    return CopyRunAcceptance(tuple(checked), tuple(kept))


def session_acceptance(replies: Iterable[Sequence[RoundEvent]]) -> PositionAcceptance:
    """Acceptance by draft position over every round of these replies together (a session)."""
    return position_acceptance(event for reply in replies for event in reply)


def round_alpha(event: RoundEvent) -> float | None:
    """α of one round (accepted / verified), None for AR steps."""
    return event.n_accepted / len(event.drafted) if event.drafted else None
