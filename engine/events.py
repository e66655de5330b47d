"""Plain, immutable records that leave the engine: settings in, one event per decoding round out (before the first
round: a notice if the conversation was fitted into the window, and the prefill's progress).

Nothing here imports torch, so the UI thread and the exporters can use these types freely.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum


class Fate(str, Enum):
    """What happened to one token shown in a reply (the seed's figure 19-6)."""

    ACCEPTED = "accepted"  # drafted by q, kept by the target
    REJECTED = "rejected"  # drafted by q, thrown away by the target
    RESAMPLED = "resampled"  # sampled from norm(max(0, p - q)) after a rejection
    CORRECTED = "corrected"  # greedy mode: the target's argmax after a rejection
    BONUS = "bonus"  # every draft accepted: one extra token from the target's next position
    TARGET = "target"  # plain autoregressive decoding: one token from the target
    UNKNOWN = "unknown"  # a remote engine's text: it reports counts, not which of its tokens were drafts


class Mode(str, Enum):
    """How a reply is decoded. A str, so settings written as "spec" / "ar" compare and load as before."""

    SPEC = "spec"  # speculative: the drafter proposes, the target verifies
    AR = "ar"  # plain autoregressive: one target step per token


class Drafting(str, Enum):
    """Which drafters a round may use: the draft model, prompt lookup (copying), both, or none (plain AR)."""

    MODEL = "model"
    LOOKUP = "lookup"
    BOTH = "both"
    NONE = "none"

    @property
    def label(self) -> str:
        """How the window, the bench and the recommendation name it."""
        return {"model": "draft model", "lookup": "copying only", "both": "draft model + copying",
                "none": "none (plain AR)"}[self.value]

    @property
    def draft_model(self) -> bool:
        return self in (Drafting.MODEL, Drafting.BOTH)

    @property
    def lookup(self) -> bool:
        return self in (Drafting.LOOKUP, Drafting.BOTH)


@dataclass(frozen=True)
class DecodeSettings:
    mode: Mode = Mode.SPEC
    # The most drafts per round (the γ slider is this cap).
    gamma: int = 6
    greedy: bool = True
    temperature: float = 1.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    seed: int = 0
    max_new_tokens: int = 128
    lookup: bool = True  # also draft by copying what followed an earlier occurrence of the last tokens
    # How long a round drafts. Cost-aware (the default): one more draft while it can raise the round's tokens per
    # second, from the pair's measured costs and the drafts' calibrated acceptance (engine.decoding.costs); a round
    # may draft nothing (a plain target step). Otherwise the confidence stop: drafting ends once the drafter's
    # estimate that all its drafts so far will be kept falls below `stop_below` (0: always γ drafts). Either rule
    # uses this round's drafts and earlier rounds' verdicts, never this round's p, so every token is still
    # distributed as the target's.
    cost_aware: bool = True
    stop_below: float = 0.3
    # End the reply once it repeats one span over and over (engine.decoding.repetition); the window turns it on.
    stop_repeating: bool = False

    def __post_init__(self) -> None:
        # NaN passes every comparison below unnoticed, and an infinite temperature samples uniformly at random
        for name in ("temperature", "top_p", "stop_below"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be a finite number, not {getattr(self, name)}")
        if self.mode not in tuple(Mode):
            raise ValueError(f"mode must be 'spec' or 'ar', not {self.mode!r}")
        object.__setattr__(self, "mode", Mode(self.mode))
        if not 1 <= self.gamma <= 64:
            raise ValueError(f"gamma must be between 1 and 64, not {self.gamma}")
        if not self.greedy and self.temperature <= 0:
            raise ValueError("temperature must be positive when sampling (use greedy mode instead)")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top_p must be in (0, 1]")
        if not 0.0 <= self.stop_below < 1.0:
            raise ValueError("stop_below must be in [0, 1)")
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")


@dataclass(frozen=True)
class TokenProb:
    token_id: int
    text: str
    prob: float


@dataclass(frozen=True)
class DraftedToken:
    """One of the γ draft proposals and its verification."""

    token_id: int
    text: str
    p: float  # target probability of this token (after temperature/top-k/top-p); 1/0 for greedy argmax match
    q: float  # draft probability of this token (same warping)
    r: float | None  # the uniform draw compared with min(1, p/q); None in greedy mode
    accepted: bool
    # Only for rejections: the leading tokens of p and of q at this position, for the inspector.
    top_p: tuple[TokenProb, ...] = ()
    top_q: tuple[TokenProb, ...] = ()

    @property
    def accept_prob(self) -> float:
        return 1.0 if self.q <= 0 else min(1.0, self.p / self.q)


@dataclass(frozen=True)
class EmittedToken:
    """A token that became part of the reply, with its fate."""

    token_id: int
    text: str
    fate: Fate
    p: float  # target probability of the token where it was chosen


@dataclass(frozen=True)
class RoundEvent:
    """One speculative round (or one AR step): everything the UI, the CLI and the statistics need.

    `drafted` holds the proposals in order: the accepted prefix, then at most one rejected token (later
    drafts are never looked at). `emitted` is what joined the reply: the accepted drafts plus the
    correction/bonus/target token, cut at EOS or at the token budget.
    """

    index: int
    gamma: int  # drafts proposed this round (at most the γ asked for); 0 for AR
    drafted: tuple[DraftedToken, ...]
    emitted: tuple[EmittedToken, ...]
    text_delta: str
    draft_s: float
    verify_s: float
    round_s: float  # wall time of the whole round, bookkeeping included
    prefill_s: float = 0.0  # only the first round of a reply: prompt prefill of both models
    target_step_s: float = 0.0  # current estimate of one single-token target forward (for the AR-speedup estimate)
    # What plain AR on this target would take to emit this round's tokens on a quiet machine, from the pair's cost
    # model (engine.decoding.costs): tokens × one AR step. 0 where no cost model is known.
    ar_equivalent_s: float = 0.0
    # This round's target forward over what the cost model says it costs on a quiet machine (≥ 1): how much slower
    # the machine ran it (other programs, or the window drawing beside the worker on few cores). Plain AR would
    # run as slowly, so the speedup estimate is Σ ar_equivalent_s × load / Σ round_s.
    load: float = 1.0
    # The load a plain target step met at this round: a plain round's own (its time, its drafting decision left out,
    # over ar_equivalent_s), a drafted round's load times how much more the pair's recent plain steps were slowed
    # than its drafted blocks (engine.decoding.costs.LoadGap). What prices plain AR for a reply with too few plain
    # steps of its own (0: not recorded, as in chats kept before it was: `load` then).
    plain_load: float = 0.0
    planned_s: float = 0.0  # what the cost model predicted this round would take (its drafts and block)
    draft_kinds: tuple[str, ...] = ()  # "model" or "copy" for each of the γ drafts: what making each one cost
    positions: int = 0  # cached positions the round's block attended to besides itself (the conversation so far)
    finish_reason: str | None = None  # "eos", "length" or "repeating" on the last round of a reply; else None
    # On the last round: a one-line note when the reply ended part-way through a character (its bytes left out)
    text_notice: str | None = None
    threads: int = 0  # the CPU threads its forward passes ran on, where the app recorded them (0: not recorded)

    @property
    def n_drafted(self) -> int:
        return self.gamma

    @property
    def n_accepted(self) -> int:
        return sum(1 for t in self.drafted if t.accepted)


@dataclass(frozen=True)
class PrefillProgress:
    """Yielded between the chunks of a reply's prompt prefill: `done` of `total` prompt positions are cached, those
    from `start` on read in `read_s` seconds, the last `chunk` of them in `chunk_s` (both models' share, measured)."""

    done: int
    total: int
    start: int = 0  # what was cached before this read-in (an earlier reply's prefix) is not read again
    read_s: float = 0.0
    chunk: int = 0
    chunk_s: float = 0.0

    def chunk_read(self, done: int, rows: int, seconds: float) -> PrefillProgress:
        """This read-in after one more chunk: `rows` more positions, up to `done`, read in `seconds`."""
        start = self.start if self.chunk else done - rows
        return PrefillProgress(done, self.total, start, self.read_s + seconds, rows, seconds)

    @property
    def seconds_left(self) -> float | None:
        """The time the rest will take at the rate measured so far, or None before a chunk is timed. A position
        costs more the further in it is (its attention reads all before it): the cost per position is taken to
        grow in a line through the chunks before the last and the last, and never faster than in proportion to
        the position (which a position's fixed matrix products rule out), so a stalled chunk cannot run it away."""
        if self.chunk_s <= 0 or self.chunk <= 0 or self.done >= self.total:
            return None
        last_rate, last_at = self.chunk_s / self.chunk, self.done - self.chunk / 2
        growth = 0.0
        if (earlier := self.done - self.chunk - self.start) > 0:
            earlier_rate = (self.read_s - self.chunk_s) / earlier
            growth = max(0.0, (last_rate - earlier_rate) / ((self.done - self.start) / 2))
        growth = min(growth, last_rate / last_at)
        return (self.total - self.done) * (last_rate + growth * ((self.done + self.total) / 2 - last_at))


@dataclass(frozen=True)
class ContextNotice:
    """The conversation was fitted into the model's window (engine.decoding.context): the oldest messages were
    left out and/or the token budget was cut. Shown to the user, never applied silently."""

    window: int  # positions the model can attend to
    prompt_tokens: int  # the prompt as decoded, after dropping
    dropped_messages: int
    max_new_tokens: int  # the budget used
    requested_max_new_tokens: int

    @property
    def message(self) -> str:
        parts = []
        if self.dropped_messages:
            plural = "s" if self.dropped_messages != 1 else ""
            parts.append(f"left out the oldest {self.dropped_messages} message{plural} of the conversation")
        if self.max_new_tokens < self.requested_max_new_tokens:
            parts.append(f"cut the reply to at most {self.max_new_tokens} new tokens "
                         f"(asked for {self.requested_max_new_tokens})")
        return (f"{' and '.join(parts)}: the prompt ({self.prompt_tokens} tokens) and the reply must fit the "
                f"model's window of {self.window} positions")


@dataclass(frozen=True)
class ModelInfo:
    name: str  # what the user asked for: 'embedded', a hub id, a path
    path: str  # what was loaded
    n_params: int
    vocab_size: int
    # "native": a GGUF model's own blocks (engine.models.loading.LoadedModel.weights); "int8" or "4-bit": a draft's
    # projections made compact (Decoder.info)
    weights: str = "dtype"


@dataclass(frozen=True)
class PairInfo:
    target: ModelInfo
    draft: ModelInfo | None
    device: str
    dtype: str
    # Greedy speculative output is exactly greedy AR's (the target's batch-invariant fast forward); False where
    # the target runs on transformers' forward, whose blocks and single steps agree only up to rounding.
    greedy_exact: bool = False
    # A single-token target step timed when the pair was warmed up (0: not yet): the window's first speedup
    # estimate then rests on two timings, not on the one taken just before the reply.
    target_step_s: float = 0.0
    # The pair's cost model as measured at warm-up (engine.decoding.costs.CostModel.as_dict); empty: not yet.
    costs: dict = field(default_factory=dict)
    # What the target's chat template sends as the system prompt where the chat sets none ("": nothing)
    default_system_prompt: str = ""
