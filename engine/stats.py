"""Statistics computed from round events, and the seed's formulas (section 19.4.4). No torch here.

α is estimated as accepted / verified drafts: the target looks at the accepted prefix and the first rejected
draft, so this is the per-draft acceptance probability E_{x~q}[min(1, p(x)/q(x))] that the seed's
E = (1 − α^(γ+1)) / (1 − α) assumes. `acceptance_rate` (accepted / drafted) is reported beside it.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from bisect import insort
from statistics import median

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
    estimated_speedup: float  # vs plain AR (ar_time_s), over the rounds

    def as_dict(self) -> dict:
        return asdict(self)


PLAIN_ROUNDS = 8  # from this many plain target steps among a reply's rounds, what they took stands for AR's
LOCAL_PLAIN_ROUNDS = 32  # the last plain steps whose median prices a round: the machine's load near it in time
BUSY_FACTOR = 2.0  # a timing this many times the reference is a stall, not the model's speed
BUSY_SHARE = 0.2  # the share of a reply's time in stalled rounds above which its numbers are flagged
# A reply the machine's load stalled goes on with one thread (app.worker) and keeps it where, over its next
# LOADED_ROUNDS rounds, its tokens came ONE_THREAD_GAIN times as fast as over the LOADED_ROUNDS before: a smaller
# gain is one run's spread (±10 % here), and all threads are where every decode starts. (The twenty-fifth walk saw a
# reply stay on one thread, "faster", at 21.5-21.9 ms a step against 21.7 on two.)
LOADED_ROUNDS = 8
ONE_THREAD_GAIN = 1.1


def token_pace_s(events: Sequence[RoundEvent]) -> float:
    """Seconds a token over these rounds, their median round's: what a switch of threads is judged by."""
    return median(e.round_s / max(1, len(e.emitted)) for e in events) if events else 0.0


def went_faster(before: Sequence[RoundEvent], after: Sequence[RoundEvent]) -> bool:
    """Whether the rounds `after` a switch to one thread made their tokens enough faster than those `before` it."""
    return token_pace_s(after) * ONE_THREAD_GAIN < token_pace_s(before)


class ArTime:
    """What plain AR would take for the tokens of the rounds added so far: the cost model's quiet-machine figure
    (RoundEvent.ar_equivalent_s) at the load the rounds met, or tokens × a reference single-token step for rounds
    without a cost model.

    Where the rounds hold at least PLAIN_ROUNDS plain target steps (rounds that drafted nothing), those steps
    price plain AR: each is the step plain AR would have run, on the same machine at the same moment, the
    window's drawing and its bursts beside it included (in the window a streamed plain AR reply ran at 114 tok/s,
    the same prompt undrawn at 155). A plain step is priced at what it took (its drafting decision left out), so
    a reply of plain steps reads 1x however the machine stalled; every other round at its quiet cost times the
    median load (time over quiet cost) of the last LOCAL_PLAIN_ROUNDS plain steps up to it, the load near it in
    time, and the rounds before at the first such median. A load that moved during a reply (a host taking back a
    virtual machine's cores) prices plain AR as it would have run at each moment (one load for the whole reply
    read 2.4x for rounds at 1.03 tokens each); a median, as one plain step stalled 81 times over its quiet cost
    by another program must not price the 31 rounds after it (a mean read 1.84x for 35 plain steps).
    Otherwise every round is priced at the median of the rounds' loads as a plain step met them
    (RoundEvent.plain_load: a drafted block's load carried over by how much more the pair's recent plain steps
    were slowed), which leaves out what slowed the rest of a drafted round: a median, as a drafted round slowed by
    what only it met (the draft's run evicting the target's weights) must not make plain AR look dearer. Each round is added in O(log n) for the
    window's running estimate.

    A continued reply's parts were decoded at other moments (a part's rounds are numbered from 0 again): each part
    is priced at its own loads. One load for all had priced a quiet continuation's rounds at a busy first part's
    4.9x, and the whole reply read 1.76x where its parts read 0.93x and 1.88x over 8.2 s and 1.1 s."""

    def __init__(self, events: Iterable[RoundEvent] = ()):
        self.rounds_s = 0.0  # every part's rounds, in full
        self.stalled_unpriced_s = 0.0  # ... and those of its rounds that drafted and stalled (BUSY_FACTOR)
        self.earlier_s = 0.0  # the earlier parts' plain AR time, each at its own loads
        self.earlier_unmodelled = 0
        self.earlier_priced_by_plain_steps = True
        self._start_part()
        for event in events:
            self.add(event)

    def _start_part(self) -> None:
        self.loads: list[float] = []  # sorted
        self.plain_load_sum = 0.0
        self.plain_rounds = 0
        self.recent_plain: deque[float] = deque(maxlen=LOCAL_PLAIN_ROUNDS)
        self.quiet: list[float] = []  # per round of the part: its quiet plain AR seconds
        self.plain_s: list[float] = []  # ... and, for a plain step, what it took (0 for the other rounds)
        self.quiet_s = 0.0
        self.prices: list[float] = []  # and those at its load, from when the part's plain steps price it
        self.priced_s = 0.0
        self.unmodelled_tokens = 0

    def add(self, event: RoundEvent) -> None:
        if event.index == 0 and self.loads:  # a continuation's first round
            self.earlier_s += self._part_s
            self.earlier_unmodelled += self.unmodelled_tokens
            self.earlier_priced_by_plain_steps &= self._part_priced_by_plain_steps
            self._start_part()
        insort(self.loads, event.plain_load or event.load)
        quiet = event.ar_equivalent_s
        plain_s = 0.0
        if not quiet:
            self.unmodelled_tokens += len(event.emitted)
        elif not event.gamma and len(event.emitted) == 1:
            plain_s = event.round_s - event.draft_s
            self.plain_load_sum += plain_s / quiet
            self.plain_rounds += 1
            self.recent_plain.append(plain_s / quiet)
        elif event.load > BUSY_FACTOR:
            self.stalled_unpriced_s += event.round_s
        self.rounds_s += event.round_s
        self.quiet.append(quiet)
        self.plain_s.append(plain_s)
        self.quiet_s += quiet
        if self._part_priced_by_plain_steps:  # this round, and the first time those before it, at the recent load
            load = median(self.recent_plain)
            start = len(self.prices)
            priced = [own or q * load for q, own in zip(self.quiet[start:], self.plain_s[start:])]
            self.prices += priced
            self.priced_s += sum(priced)

    @property
    def part_prices(self) -> list[float]:
        """The last part's rounds' plain AR seconds, cost model's rounds only (0 for the others)."""
        if self._part_priced_by_plain_steps:
            return self.prices
        load = self.typical_load
        return [q * load for q in self.quiet]

    @property
    def _part_s(self) -> float:
        return self.priced_s if self._part_priced_by_plain_steps else self.quiet_s * self.typical_load

    @property
    def priced_by_plain_steps(self) -> bool:
        """Whether plain AR is priced as the rounds' own plain steps ran, in every part: a busy moment then slowed
        both alike."""
        return self.earlier_priced_by_plain_steps and self._part_priced_by_plain_steps

    @property
    def load_priced(self) -> bool:
        """Whether plain AR is priced at the load the rounds met: by their own plain steps (priced_by_plain_steps)
        and with no more than BUSY_SHARE of their time in drafted rounds that stalled, a load no plain step met
        (a reply whose first round stalled 830 ms of its 1.26 s read 0.57x beside 1.74x for the same rounds)."""
        return self.priced_by_plain_steps and self.stalled_unpriced_s <= BUSY_SHARE * self.rounds_s

    @property
    def _part_priced_by_plain_steps(self) -> bool:
        return self.plain_rounds >= PLAIN_ROUNDS

    @property
    def typical_load(self) -> float:
        """The last part's, over all its rounds."""
        if self._part_priced_by_plain_steps:
            return self.plain_load_sum / self.plain_rounds
        n = len(self.loads)
        if not n:
            return 1.0
        return self.loads[n // 2] if n % 2 else (self.loads[n // 2 - 1] + self.loads[n // 2]) / 2

    def seconds(self, reference_s: float) -> float:
        return self.earlier_s + self._part_s + (self.earlier_unmodelled + self.unmodelled_tokens) * reference_s


def reply_stats(events: Sequence[RoundEvent]) -> ReplyStats:
    n_tokens = sum(len(e.emitted) for e in events)
    n_drafted = sum(e.gamma for e in events)
    n_verified = sum(len(e.drafted) for e in events)
    n_accepted = sum(e.n_accepted for e in events)
    prefill_s = sum(e.prefill_s for e in events)
    rounds_s = sum(e.round_s for e in events)
    wall_s = prefill_s + rounds_s
    ar_s = ArTime(events).seconds(events[-1].target_step_s if events else 0.0)
    return ReplyStats(
        n_rounds=len(events), n_tokens=n_tokens, n_drafted=n_drafted, n_verified=n_verified, n_accepted=n_accepted,
        alpha=n_accepted / n_verified if n_verified else 0.0,
        acceptance_rate=n_accepted / n_drafted if n_drafted else 0.0,
        tokens_per_round=n_tokens / len(events) if events else 0.0,
        draft_s=sum(e.draft_s for e in events), verify_s=sum(e.verify_s for e in events),
        prefill_s=prefill_s, decode_s=rounds_s, wall_s=wall_s,
        tokens_per_s=n_tokens / rounds_s if rounds_s > 0 else 0.0,
        estimated_speedup=ar_s / rounds_s if rounds_s > 0 else 0.0,
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


def session_acceptance(replies: Iterable[Sequence[RoundEvent]]) -> PositionAcceptance:
    """Acceptance by draft position over every round of these replies together (a session)."""
    return position_acceptance(event for reply in replies for event in reply)


def round_alpha(event: RoundEvent) -> float | None:
    """α of one round (accepted / verified), None for AR steps."""
    return event.n_accepted / len(event.drafted) if event.drafted else None
