"""Plain records of one chat session: what the window asks the worker for, and what comes back."""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.events import DecodeSettings, PairInfo, RoundEvent
from engine.stats import ReplyStats, reply_stats


@dataclass(frozen=True)
class ReplyRequest:
    """One turn: the whole conversation so far (ending with the user's message) and how to decode it."""

    messages: tuple[dict, ...]
    settings: DecodeSettings
    compare_ar: bool = False


@dataclass(frozen=True)
class Reply:
    """A finished (or stopped) reply and every round that produced it."""

    request: ReplyRequest
    events: tuple[RoundEvent, ...]
    text: str
    stopped: bool

    @property
    def stats(self) -> ReplyStats:
        return reply_stats(self.events)


@dataclass(frozen=True)
class Comparison:
    """The same messages decoded again with plain AR (same settings and seed), measured against the reply."""

    ar_events: tuple[RoundEvent, ...]
    ar_text: str
    spec_wall_s: float
    ar_wall_s: float
    spec_tokens_per_s: float
    ar_tokens_per_s: float
    identical: bool | None  # greedy only: did AR produce exactly the same tokens? None when sampling
    stopped: bool = False  # the user stopped the AR run early

    @property
    def speedup(self) -> float:
        """Measured speedup as a throughput ratio (equals the wall-time ratio when both replies match)."""
        return self.spec_tokens_per_s / self.ar_tokens_per_s if self.ar_tokens_per_s > 0 else 0.0


@dataclass
class Session:
    """Everything the exporter writes: the loaded pair and the replies in order, each with its comparison."""

    pair: PairInfo | None = None
    replies: list[Reply] = field(default_factory=list)
    comparisons: dict[int, Comparison] = field(default_factory=dict)  # reply index -> AR comparison
