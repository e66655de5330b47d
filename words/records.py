"""Plain records of one chat session: what the window asks the worker for, and what comes back."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from engine.events import DecodeSettings, Drafting, EmittedToken, Mode, PairInfo, RoundEvent
from engine.remote_records import RemoteReply
from engine.stats import ReplyStats, SpeedupFigure, reply_stats

# Seeds the window's seed box can hold (a QSpinBox is a signed 32-bit int); Regenerate's next seed wraps below it
SEED_LIMIT = 2 ** 31
# The fewest plain AR tokens whose time a measured speedup is read from: about 0.2 s here, where one slow step
# after the reply (36 ms beside 6-7 ms steps) still moves a 20-token run's figure by a fifth
MEASURED_TOKENS = 32
# A speculative run that drafted fewer tokens than this share of its own (1 draft in 40 tokens, rejected, read 0.88x)
# did nearly plain AR's work: what drafting costs or saves is then below one run's spread
DRAFTED_SHARE = 0.05


def beyond_rounds(speedup: float, tokens_per_round: float) -> bool:
    """Whether `speedup` is more than rounds of `tokens_per_round` tokens can give. Every round costs at least one
    plain target step (a block of two rows costs more), so a run is less than its tokens per round times faster than
    plain AR's; a measured speedup above that says the two runs met the machine differently (a plain AR run at 104
    tok/s beside 150-200 in the same chat made copying read 1.92x at 1.38 tok/round)."""
    return speedup > tokens_per_round


@dataclass(frozen=True)
class Runtime:
    """What runs a loaded pair on this machine, as plain data (app.pair.machine asks torch and the loaded models): with
    it the export says which machine and kernels produced its figures."""

    cpu_capability: str  # the vector instructions torch's CPU kernels use (torch.backends.cpu.get_cpu_capability)
    threads: int  # torch's threads for one operation
    target_kernel: str  # what multiplies the target's weights
    draft_weights: str | None  # the draft's linear layers as they run; None without a draft model


@dataclass(frozen=True)
class ReplyRequest:
    """One turn: the whole conversation so far (ending with the user's message) and how to decode it."""

    messages: tuple[dict, ...]
    settings: DecodeSettings
    compare_ar: bool = False

    @property
    def continues(self) -> bool:
        """It goes on with the reply it ends with (Continue), instead of answering a message."""
        return self.messages[-1]["role"] == "assistant"


@dataclass(frozen=True)
class TurnOptions:
    """How the window asks for the next turn: the decoding settings, whether to compare with plain AR, and the
    system prompt sent first."""

    settings: DecodeSettings
    compare_ar: bool = False
    system_prompt: str = ""


@dataclass(frozen=True)
class EngineTarget:
    """A running OpenAI-compatible engine the chat talks to instead of the local pair."""

    url: str  # engine.remote.public_url: never a password, key or query
    model: str  # the served model's name


@dataclass(frozen=True)
class RemoteSource:
    """Where a remote engine's reply came from and what the engine reported about it (counts, no fates)."""

    url: str  # as EngineTarget.url
    model: str
    reply: RemoteReply | None = None  # None: stopped before the engine finished it


# Other programs' CPU use while a reply was decoded, in cores on average, at or under which its slow steps were
# this window's own (its drawing and the display server's, beside the decode on few cores): the machine was not busy.
OTHERS_IDLE_CORES = 0.5
# Steal time at or above this, in cores on average, is named among a slow reply's causes: a quiet decode on 2
# virtual cores saw 0.04 (and once 0.23), slowed replies about 0.46.
HOST_NOTABLE_CORES = 0.3


@dataclass(frozen=True)
class Reply:
    """A finished (or stopped) reply and every round that produced it; a remote engine's reply has no rounds, only
    its text and `remote`."""

    request: ReplyRequest
    events: tuple[RoundEvent, ...]
    text: str
    stopped: bool
    reference_s: float = 0.0  # the single-token target step its estimate uses; 0: the one measured with it
    machine_busy: bool = False  # its timings ran far slower than the machine's quiet speed: not a fair number
    remote: RemoteSource | None = None  # written by a remote engine, not by the local pair
    others_cores: float | None = None  # other programs' CPU use while it decoded, cores on average; None: unknown
    host_cores: float | None = None  # the cores a virtual machine's host withheld meanwhile (steal); None: unknown
    # A continued reply's parts as each was decoded (extended_by), each with its own load; () for a reply sent once.
    parts: tuple["Reply", ...] = ()

    @property
    def finish_reason(self) -> str | None:
        if self.events:
            return self.events[-1].finish_reason
        return self.remote.reply.finish_reason if self.remote is not None and self.remote.reply else None

    @property
    def tokens(self) -> tuple[EmittedToken, ...]:
        """Every token that joined the reply, in order."""
        return tuple(t for e in self.events for t in e.emitted)

    @property
    def stats(self) -> ReplyStats:
        return reply_stats(self.events)

    @property
    def reference(self) -> float:
        return self.reference_s or (self.events[0].target_step_s if self.events else 0.0)

    def extended_by(self, part: "Reply") -> "Reply":
        """This reply with a continuation's part after it, as one reply (the part's reference step and end; the
        larger of the parts' loads, each part's own in `parts`)."""
        def most(a: float | None, b: float | None) -> float | None:
            return max((cores for cores in (a, b) if cores is not None), default=None)

        return Reply(self.request, self.events + part.events, self.text + part.text, part.stopped, part.reference,
                     self.machine_busy or part.machine_busy, part.remote or self.remote,
                     most(self.others_cores, part.others_cores), most(self.host_cores, part.host_cores),
                     (self.parts or (self,)) + (part,))

    @property
    def speculative(self) -> bool:
        """Decoded by drafts and verification, not plain AR: only then has it a speedup vs AR to estimate."""
        return self.request.settings.mode is Mode.SPEC

    @property
    def gamma(self) -> int:
        """The largest γ it ran with (γ may rise mid-reply): the cap on its estimate is γ + 1."""
        return max([self.request.settings.gamma] + [e.gamma for e in self.events])

    @property
    def speedup(self) -> SpeedupFigure:
        """The speedup vs plain AR its rounds measured (engine.stats.SpeedupMeter): what the window shows and the
        export writes."""
        return self.stats.speedup


@dataclass(frozen=True)
class Comparison:
    """The same messages decoded again with plain AR (same settings and seed), measured against the reply."""

    ar_events: tuple[RoundEvent, ...]
    ar_text: str
    spec_wall_s: float  # reading the prompt and decoding
    ar_wall_s: float
    spec_tokens_per_s: float  # while decoding
    ar_tokens_per_s: float
    identical: bool | None  # greedy only: did AR produce exactly the same tokens? None when sampling
    stopped: bool = False  # the user stopped the AR run early
    machine_busy: bool = False  # the AR steps ran far slower than the machine's quiet speed: not a fair number
    unequal_loads: bool = False  # the reply and the AR run met the machine at different loads: not a fair number
    # Reading the prompt (both models for the reply, the target alone for AR); 0 in chats saved before they were
    # kept apart, whose tokens/s counted it in.
    spec_prefill_s: float = 0.0
    ar_prefill_s: float = 0.0
    # The reply decoded again undrawn, as the AR run is, whose speed the spec_ figures are: empty where the reply's
    # own (streamed) speed stands, as in chats saved before the rerun, or where the rerun was stopped.
    spec_events: tuple[RoundEvent, ...] = ()

    @property
    def spec_decode_s(self) -> float:
        return self.spec_wall_s - self.spec_prefill_s

    @property
    def ar_decode_s(self) -> float:
        return self.ar_wall_s - self.ar_prefill_s

    @property
    def ar_tokens(self) -> tuple[EmittedToken, ...]:
        return tuple(t for e in self.ar_events for t in e.emitted)

    @property
    def spec_tokens(self) -> tuple[EmittedToken, ...]:
        """The undrawn rerun's tokens (none where the reply's own speed stands)."""
        return tuple(t for e in self.spec_events for t in e.emitted)

    @property
    def short(self) -> bool:
        """Too few tokens for a speed on either side (a sampled rerun is its own length): a few tens of
        milliseconds, which one scheduler hiccup doubles."""
        rerun = len(self.spec_tokens) if self.spec_events else MEASURED_TOKENS
        return min(len(self.ar_tokens), rerun) < MEASURED_TOKENS

    @property
    def drafted_little(self) -> bool:
        """Its speculative rerun drafted fewer than DRAFTED_SHARE of its tokens: both runs did (nearly) plain AR's
        work, and their ratio is the machine's spread between two runs (±10 % here), not speculation's."""
        rerun = reply_stats(self.spec_events)
        return bool(self.spec_events) and rerun.n_drafted < DRAFTED_SHARE * rerun.n_tokens

    @property
    def beyond_rounds(self) -> bool:
        """Its speedup is more than its undrawn rerun's tokens per round allow."""
        return bool(self.spec_events) and beyond_rounds(self.speedup, reply_stats(self.spec_events).tokens_per_round)

    @property
    def fair(self) -> bool:
        """Ran to its end, long enough, on a machine that met both runs alike, with drafts to measure."""
        return not (self.stopped or self.machine_busy or self.unequal_loads or self.short
                    or self.drafted_little or self.beyond_rounds) and self.speedup > 0

    @property
    def speedup(self) -> float:
        """Measured speedup of the decoding as a throughput ratio (the decode-time ratio when both replies match).
        Reading the prompt is left out, as in the estimate: it is the same work at any γ but for the draft's share."""
        return self.spec_tokens_per_s / self.ar_tokens_per_s if self.ar_tokens_per_s > 0 else 0.0


@dataclass
class Session:
    """Everything the exporter writes: the loaded pair and the replies in order, each with its comparison."""

    pair: PairInfo | None = None
    replies: list[Reply] = field(default_factory=list)
    comparisons: dict[int, Comparison] = field(default_factory=dict)  # reply index -> AR comparison
    title: str = ""  # the chat's title
    # reply index -> the ContextNotice message shown under it (the conversation was fitted into the model's window)
    context_notices: dict[int, str] = field(default_factory=dict)
    runtime: Runtime | None = None  # what ran the pair; None where not known (chats saved before it was recorded)
    drafters: tuple[DrafterComparison, ...] = ()  # the chat's last Compare drafters of each draft-length rule
    reply_pairs: dict[int, PairInfo] = field(default_factory=dict)  # reply index -> the local pair that decoded it

    def reply_groups(self) -> list[list[int]]:
        """The replies as the chat shows them, each as the indices of its parts: the reply first sent, then each
        continuation of it."""
        groups: list[list[int]] = []
        for index, reply in enumerate(self.replies):
            if groups and reply.request.continues:
                groups[-1].append(index)
            else:
                groups.append([index])
        return groups

    def shown_replies(self) -> list[tuple[Reply, Comparison | None]]:
        """The replies as the chat shows them: a continuation joined to the reply it continues, each with the
        comparison of its last part."""
        shown: list[tuple[Reply, Comparison | None]] = []
        for group in self.reply_groups():
            whole = self.replies[group[0]]
            for index in group[1:]:
                whole = whole.extended_by(self.replies[index])
            shown.append((whole, self.comparisons.get(group[-1])))
        return shown



@dataclass(frozen=True)
class NumberedReply:
    """A reply as the chat shows it, a continued one whole, under the number every export gives it."""

    number: int  # 1, 2, ... in the chat's order: the PNG's "reply N" and every file's `reply`
    whole: Reply  # its parts joined (Reply.extended_by), as the window shows it
    comparisons: tuple[Comparison | None, ...]  # each part's AR comparison, where it has one
    context_notice: str  # its last part's (Session.context_notices), "" if none
    pair: PairInfo | None = None  # the local pair that decoded its last part, where known (Session.reply_pairs)

    @property
    def parts(self) -> tuple[Reply, ...]:
        """The reply first sent, then each continuation of it (part 1, 2, ...), as the whole keeps them."""
        return self.whole.parts or (self.whole,)

    @property
    def comparison(self) -> Comparison | None:
        """Its last part's: the one the chat's figures for the reply end on."""
        return self.comparisons[-1]


def same_models(one: PairInfo | None, other: PairInfo | None) -> bool:
    """The same models, weights, device and dtype, whatever their costs were timed at."""
    untimed = lambda pair: pair and dataclasses.replace(pair, costs={}, target_step_s=0.0)  # noqa: E731
    return untimed(one) == untimed(other)


def numbered_replies(session: Session) -> list[NumberedReply]:
    """The session's replies as `Session.shown_replies` joins them, each with its number and its parts."""
    groups = session.reply_groups()
    return [NumberedReply(number, whole, tuple(session.comparisons.get(i) for i in group),
                          session.context_notices.get(group[-1], ""), session.reply_pairs.get(group[-1]))
            for number, (group, (whole, _)) in enumerate(zip(groups, session.shown_replies(), strict=True), start=1)]

# What the chat controller (app/chat/controller.py) tells the window: the turn's state, and the conversation as it
# happens.

class TurnState(Enum):
    IDLE = "idle"  # waiting for a command (whether a pair answers is `ChatStatus.ready`)
    LOADING = "loading"  # a model pair is being loaded
    REPLYING = "replying"  # the worker is decoding a reply
    COMPARING = "comparing"  # the reply is in; plain AR decodes the same messages to measure the speedup
    STOPPING = "stopping"  # Stop was asked for; the worker finishes its round or prefill chunk


@dataclass(frozen=True)
class ChatStatus:
    """What the window enables its commands from."""

    state: TurnState
    ready: bool  # a pair is loaded and answers
    n_turns: int  # a continuation's part counted apart (commands take a turn's index)
    can_continue: bool  # the last reply was cut at max new tokens or stopped, with text to carry on from
    editing: int | None  # the turn whose message is being edited and resent
    title: str = ""  # the chat's title (its first message), for an export's file name
    remote: bool = False  # replies come from a remote engine: the local pair's own commands rest
    continuations: tuple[int, ...] = ()  # the turns that go on with the reply before them (Continue)

    def replies_after(self, turn: int) -> int:
        """The replies after turn `turn` as the chat shows them: a continued reply is one."""
        return sum(1 for later in range(turn + 1, self.n_turns) if later not in self.continuations)

    @property
    def busy(self) -> bool:
        return self.state is not TurnState.IDLE and self.state is not TurnState.LOADING


@dataclass(frozen=True)
class TurnStarted:
    index: int
    request: ReplyRequest
    live: bool  # False while a reopened chat is replayed


@dataclass(frozen=True)
class RoundShown:
    event: RoundEvent
    live: bool


@dataclass(frozen=True)
class ReplyShown:
    index: int
    reply: Reply  # this turn's part of the reply
    whole: Reply  # the reply as shown: with the parts it continues, when it is a continuation
    can_continue: bool
    live: bool
    pair: PairInfo | None = None  # the local pair that decoded it (None: a remote engine's, or not known)


@dataclass(frozen=True)
class ComparisonShown:
    index: int
    comparison: Comparison
    reply: Reply
    pair: PairInfo | None
    chat_measured: tuple[float, ...] = ()  # the measured speedups of the chat's fair comparisons up to this one
    part: int = 1  # the compared part's number in the reply shown (a continuation's is 2 or more)


@dataclass(frozen=True)
class DrafterRun:
    """The last prompt decoded with one drafting choice (Compare drafters)."""

    drafting: Drafting
    events: tuple[RoundEvent, ...]
    stopped: bool = False
    skipped: str = ""  # why this drafting could not run here (no draft model), else ""
    others_tokens_per_s: tuple[float, ...] = ()  # the same drafting's other whole runs, slower than this one

    @property
    def stats(self) -> ReplyStats:
        return reply_stats(self.events)

    @property
    def spread(self) -> float:
        """How much faster this run was than the slowest of the same drafting's runs (0: one run)."""
        slowest = min(self.others_tokens_per_s, default=0.0)
        return self.stats.tokens_per_s / slowest - 1 if slowest > 0 else 0.0

    @staticmethod
    def fastest(drafting: Drafting, attempts: Sequence[DrafterRun]) -> DrafterRun:
        """Of a drafting's runs, the fastest whole one (a stopped run only where none is whole), with the others'
        speeds: of runs of the same work, the fastest met the least of the machine's other load."""
        whole = [run for run in attempts if not run.stopped and run.events]
        if not whole:
            return next((run for run in attempts if run.events), attempts[0])
        best = max(whole, key=lambda run: run.stats.tokens_per_s)
        return dataclasses.replace(best, others_tokens_per_s=tuple(run.stats.tokens_per_s for run in whole
                                                                   if run is not best))


@dataclass(frozen=True)
class DrafterComparison:
    """The same messages and settings with the draft model, copying only, both, and none (plain AR)."""

    request: ReplyRequest
    runs: tuple[DrafterRun, ...]

    @property
    def stopped(self) -> bool:
        return any(run.stopped for run in self.runs)

    @property
    def cost_aware(self) -> bool:
        """Its draft-length rule: cost-aware rounds, else the confidence stop."""
        return self.request.settings.cost_aware

    def rows(self) -> list[dict]:
        """The table: tokens/s, α and tokens per round for each drafting, and its speed over plain AR's."""
        ar = next((r.stats.tokens_per_s for r in self.runs if r.drafting is Drafting.NONE and not r.skipped), 0.0)
        rows = []
        for run in self.runs:
            stats = run.stats
            vs_ar = stats.tokens_per_s / ar if ar > 0 and not run.skipped else None
            rows.append({"drafting": run.drafting.value, "tokens": stats.n_tokens, "drafted": stats.n_drafted,
                         "tokens_per_s": stats.tokens_per_s,
                         "alpha": stats.alpha if run.drafting is not Drafting.NONE and stats.n_verified else None,
                         "tokens_per_round": stats.tokens_per_round, "vs_ar": vs_ar,
                         "beyond_rounds": vs_ar is not None and beyond_rounds(vs_ar, stats.tokens_per_round),
                         "stopped": run.stopped, "skipped": run.skipped, "runs": 1 + len(run.others_tokens_per_s),
                         "spread": run.spread})
        return rows


@dataclass(frozen=True)
class DraftersShown:
    """A Compare drafters as the chat reports it: the table, the chat's last one of the same messages and settings
    before it, whose rows it may be read against, and how fast the chat's own plain AR reply to them ran."""

    comparison: DrafterComparison
    previous: DrafterComparison | None = None
    drawn_ar_tokens_per_s: float = 0.0  # the chat's last plain AR reply to the same messages, as drawn (0: none)


def kept_drafters(kept: tuple[DrafterComparison, ...], comparison: DrafterComparison) -> tuple[DrafterComparison, ...]:
    """The chat's last Compare drafters of each draft-length rule once `comparison` has run: it replaces the last
    run of its own rule only, since a confidence-stop run says nothing of the cost-aware lines its other keeps."""
    return tuple(k for k in kept if k.cost_aware != comparison.cost_aware) + (comparison,)


@dataclass(frozen=True)
class Turn:
    """One request and what came of it. A continuation is a turn whose request ends with the reply it extends."""

    request: ReplyRequest
    reply: Reply | None = None  # None while it streams
    comparison: Comparison | None = None
    stored_id: int | None = None  # its row in the chats database (None: not saved, or reopened from it)
    context_notice: str = ""  # the ContextNotice message shown under its reply, when the conversation was fitted
    # The local pair that decoded it and what ran it (None: a remote engine's, or not known); a reopened chat's
    # turns have the pair its last turn was saved with
    pair: PairInfo | None = None
    runtime: Runtime | None = None

    @property
    def continues(self) -> bool:
        return self.request.continues
