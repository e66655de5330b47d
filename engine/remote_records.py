"""A remote engine's replies as plain records, what they say of a stream that went wrong, and what the engine
reports of its speculative decoding as statistics: vLLM's counters read from its /metrics (Prometheus' text format,
parsed by prometheus_client) and llama-server's per-reply timings. No HTTP, torch or Qt here: engine.remote talks to
the engine; the UI thread imports only these."""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

URL_EXAMPLE = "http://127.0.0.1:8000/v1"
LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # a JSON \uD8xx escape alone, or a command line's non-UTF-8 byte
CUT = "cut"  # RemoteReply.finish_reason of a stream that ended without a finish_reason

# vLLM's counters (vllm/v1/spec_decode/metrics.py); all are totals since the server started
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
REQUESTS_DONE = "vllm:request_success_total"



def is_url(text: str | None) -> bool:
    return bool(text) and text.startswith(("http://", "https://"))


def public_url(url: str) -> str:
    """The URL as it may be shown, saved and exported: without a user name, password, query or fragment (a key
    can hide in any of them)."""
    parts = urlsplit(url.strip())
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address keeps its brackets
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return f"{parts.scheme}://{netloc}{parts.path}".rstrip("/")


@dataclass(frozen=True)
class Sample:
    """One line of the Prometheus text format: `name{labels} value`."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


def parse_metrics(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition, read by prometheus_client's parser a line at a time: it refuses
    a whole exposition at its first line it cannot read, and one odd line from a newer server must not hide the
    counters we need, so such a line alone is skipped. Comments (# HELP, # TYPE) carry no samples."""
    samples = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            families = list(text_string_to_metric_families(line + "\n"))
        except ValueError:
            continue
        samples += [Sample(s.name, tuple(s.labels.items()), s.value) for family in families for s in family.samples]
    return samples


@dataclass(frozen=True)
class SpecCounters:
    """vLLM's speculative-decoding totals for one served model at one moment; subtract two for a reply's share."""

    drafts: float
    draft_tokens: float
    accepted: float
    accepted_per_position: tuple[float, ...]  # drafts whose token at position i (0-based) was accepted
    requests_done: float  # finished requests, any finish reason: tells whether a delta is one reply's alone

    @classmethod
    def from_samples(cls, samples: Sequence[Sample], model: str | None = None) -> SpecCounters | None:
        """The counters summed over engines (data-parallel ranks); None where the engine reports none (it runs
        without a speculative config, or is not vLLM). `model` keeps only that served model's samples."""
        chosen = [s for s in samples if model is None or s.label("model_name") in (None, model)]
        totals: dict[str, float] = {}
        positions: dict[int, float] = {}
        for sample in chosen:
            if sample.name == ACCEPTED_PER_POSITION:
                position = int(sample.label("position") or 0)
                positions[position] = positions.get(position, 0.0) + sample.value
            else:
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
        if DRAFTS not in totals:
            return None
        per_position = tuple(positions.get(i, 0.0) for i in range(max(positions, default=-1) + 1))
        return cls(drafts=totals[DRAFTS], draft_tokens=totals.get(DRAFT_TOKENS, 0.0),
                   accepted=totals.get(ACCEPTED, 0.0), accepted_per_position=per_position,
                   requests_done=totals.get(REQUESTS_DONE, 0.0))

    def since(self, before: SpecCounters) -> EngineSpecStats:
        """What happened between `before` and these counters, as statistics."""
        width = max(len(self.accepted_per_position), len(before.accepted_per_position))
        now = self.accepted_per_position + (0.0,) * (width - len(self.accepted_per_position))
        then = before.accepted_per_position + (0.0,) * (width - len(before.accepted_per_position))
        return EngineSpecStats(
            drafts=round(self.drafts - before.drafts), draft_tokens=round(self.draft_tokens - before.draft_tokens),
            accepted=round(self.accepted - before.accepted),
            accepted_per_position=tuple(round(a - b) for a, b in zip(now, then)),
            requests=round(self.requests_done - before.requests_done), source="vLLM /metrics",
        )


@dataclass(frozen=True)
class EngineSpecStats:
    """A reply's speculative decoding as the engine counts it: drafts (one per engine step that proposed any),
    their tokens, and how many were accepted, overall and by position. No per-token fates."""

    drafts: int
    draft_tokens: int
    accepted: int
    accepted_per_position: tuple[int, ...]  # () where the engine gives no positions (llama-server)
    requests: int | None  # requests the engine finished meanwhile; 1 means the counts are this reply's alone
    source: str  # "vLLM /metrics" or "llama-server timings"

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted tokens (vLLM's "draft acceptance rate")."""
        return self.accepted / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens per drafting step: its accepted drafts plus the target's own token (vLLM's definition)."""
        return 1.0 + self.accepted / self.drafts if self.drafts else None

    @property
    def per_position_acceptance(self) -> list[float]:
        """P(draft i accepted | drafts before it accepted), as engine.stats.per_position_acceptance."""
        result, reached = [], self.drafts
        for accepted in self.accepted_per_position:
            result.append(accepted / reached if reached else 0.0)
            reached = accepted
        return result

    @property
    def alpha(self) -> float | None:
        """Accepted / verified drafts (the accepted prefix and the first rejection), as engine.stats' α. Known
        only when every draft had all its positions: then a draft with a rejection is one not accepted to the
        end."""
        k = len(self.accepted_per_position)
        if not self.drafts or not k or self.draft_tokens != self.drafts * k:
            return None
        rejections = self.drafts - self.accepted_per_position[-1]
        return self.accepted / (self.accepted + rejections) if self.accepted + rejections else None

    @property
    def shared(self) -> bool:
        """Other requests finished while this reply ran, so the counts are not this reply's alone."""
        return self.requests is not None and self.requests > 1

    def rounds(self, tokens: int) -> int:
        """Engine steps that produced `tokens`: every step gives one token of the target's plus its accepted
        drafts."""
        return max(tokens - self.accepted, 0)

    def as_dict(self) -> dict:
        return {"drafts": self.drafts, "draft_tokens": self.draft_tokens, "accepted": self.accepted,
                "accepted_per_position": list(self.accepted_per_position), "requests": self.requests,
                "source": self.source, "acceptance_rate": self.acceptance_rate, "alpha": self.alpha,
                "mean_acceptance_length": self.mean_acceptance_length,
                "per_position_acceptance": self.per_position_acceptance}


def llama_server_stats(timings: dict) -> EngineSpecStats | None:
    """llama-server's per-reply `timings.draft_n` / `draft_n_accepted`; None without a draft."""
    if not timings or "draft_n" not in timings:
        return None
    return EngineSpecStats(drafts=0, draft_tokens=int(timings["draft_n"]),
                           accepted=int(timings.get("draft_n_accepted", 0)), accepted_per_position=(),
                           requests=1, source="llama-server timings")


@dataclass(frozen=True)
class TextDelta:
    """One streamed piece of a reply: one engine step's tokens (several when drafts were accepted)."""

    text: str
    n_tokens: int | None  # from the engine's token ids where it sends them (vLLM), else None
    at_s: float  # since the request was sent


@dataclass(frozen=True)
class RemoteReply:
    """A finished reply from a remote engine, with what we measured and what the engine reported."""

    text: str
    token_ids: tuple[int, ...] | None  # where the engine sends them
    n_tokens: int  # the engine's completion_tokens (or, without usage, the streamed pieces' count)
    wall_s: float  # request sent → last byte, measured by us
    first_token_s: float | None
    finish_reason: str | None
    model: str
    spec: EngineSpecStats | None
    note: str | None  # one line for the user: no speculative metrics, or counts shared with other requests

    @property
    def tokens_per_s(self) -> float:
        return self.n_tokens / self.wall_s if self.wall_s > 0 else 0.0


@dataclass
class StreamState:
    """What a reply's stream did besides its text: whether it broke off at an event that was not JSON, and how many
    pieces' text was not valid Unicode (a lone surrogate cannot be written out); and how that is said."""

    malformed: bool = False
    invalid_text: int = 0

    def valid_text(self, text: str) -> str:
        """`text` with each lone surrogate replaced by U+FFFD (a piece with any is counted)."""
        text, replaced = LONE_SURROGATE.subn("\ufffd", text)
        self.invalid_text += replaced > 0
        return text

    def problems(self, cut: bool) -> str | None:
        said = []
        if self.malformed:
            said.append("the engine sent an event that is not JSON before the reply ended: the text is what came "
                        "before it")
        elif cut:
            said.append("the engine closed the stream before the reply ended (no finish reason): the text is what "
                        "came before")
        if self.invalid_text:
            said.append("the engine sent text that is not valid Unicode (a lone surrogate), shown as \ufffd")
        return "; ".join(said) or None


def error_detail(body: object) -> str:
    """The message of an OpenAI-style error body (as the client parsed it), on one line and short."""
    error = body.get("error", body) if isinstance(body, dict) else body
    message = (error.get("message") or error.get("detail") or "") if isinstance(error, dict) else str(error or "")
    message = " ".join(str(message).split())
    return message[:200] + ("…" if len(message) > 200 else "")


def describe(reply: RemoteReply) -> str:
    """One line on a reply for the terminal: our tokens/s and the engine's acceptance."""
    line = f"{reply.n_tokens} tokens in {reply.wall_s:.2f}s = {reply.tokens_per_s:.1f} tok/s (measured here)"
    spec = reply.spec
    if spec is not None and spec.draft_tokens:
        parts = [f"acceptance {spec.acceptance_rate:.2f} ({spec.accepted}/{spec.draft_tokens} drafts)"]
        if spec.mean_acceptance_length is not None:
            parts.append(f"mean acceptance length {spec.mean_acceptance_length:.2f}")
        if spec.accepted_per_position:
            parts.append("by position " + " ".join(f"{a:.2f}" for a in spec.per_position_acceptance))
        line += f"; {spec.source}: " + ", ".join(parts)
    elif spec is not None:
        line += f"; {spec.source}: nothing was drafted"
    return line
