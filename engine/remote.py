"""The studio as a client of a running OpenAI-compatible engine (vLLM, SGLang, llama-server): streamed chat
completions, and the engine's own speculative-decoding counters turned into per-reply statistics.

HTTP by httpx; no torch and no Qt here, so the UI thread, the CLI and the bench can all use it. What a remote engine
does not report (which token was drafted, accepted or resampled) is not invented: a reply carries the engine's
counts, and `EngineSpecStats.source` says where they came from.

Two pieces are kept by hand. The stream is split into lines at "\n" alone: httpx's `iter_lines` splits as
str.splitlines does, also at U+0085, U+2028 and U+2029, which vLLM's JSON leaves unescaped inside a string, so an
event holding one would be lost as not JSON. A request's body is json.dumps' ASCII, not httpx's `json=`, whose UTF-8
cannot hold a lone surrogate (a command line's bytes that are not UTF-8 become those).
"""
from __future__ import annotations

import json
import os
import re
import socket
import ssl
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families

from engine.events import DecodeSettings

API_KEY_ENV = "SPECDEC_API_KEY"  # sent as a bearer token; read from the environment on every request, never stored
DEFAULT_TIMEOUT_S = 60.0  # the longest silence (connecting, or between two streamed pieces) before "too slow"
URL_EXAMPLE = "http://127.0.0.1:8000/v1"

# vLLM's counters (vllm/v1/spec_decode/metrics.py); all are totals since the server started
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
REQUESTS_DONE = "vllm:request_success_total"
METRICS_SETTLE_TRIES = 20  # the counters are recorded just after the last byte of a reply is sent
METRICS_SETTLE_S = 0.05


class RemoteError(Exception):
    """A remote engine could not be used; the message is one line for the user."""


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


# ---------------------------------------------------------------------------------------------------- /metrics


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


# ---------------------------------------------------------------------------------------------------- replies


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


# ---------------------------------------------------------------------------------------------------- the client


class RemoteEngine:
    """One OpenAI-compatible server. `base_url` ends in /v1 (`http://127.0.0.1:8000/v1`); its /metrics is read
    at the root of the same host. `model` is the served name to use (None: the only one it serves)."""

    def __init__(self, base_url: str, model: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RemoteError(f"{base_url!r} is not an engine URL: give one like {URL_EXAMPLE}")
        self.url = public_url(base_url)  # what error messages name: never a password or query
        self.api_path = parts.path.rstrip("/") or "/v1"
        root = self.api_path[: -len("/v1")] if self.api_path.endswith("/v1") else self.api_path
        self.metrics_path = root + "/metrics"
        self.timeout_s = timeout_s
        self.requested_model = model
        self.model: str | None = None  # resolved by connect()
        self.engine: str | None = None  # "vllm" where /v1/models says so
        # The origin without the URL's user info (httpx would send it as a password); a timeout for each wait
        # (connecting, every read), not a whole reply. As http.client did: no proxy from the environment, the
        # system's certificates (not certifi's), a connection per request (none left open between replies).
        self._client = httpx.Client(base_url=public_url(f"{parts.scheme}://{parts.netloc}"), timeout=timeout_s,
                                    trust_env=False, verify=ssl.create_default_context(),
                                    limits=httpx.Limits(max_keepalive_connections=0))

    # -- HTTP

    def _headers(self) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = os.environ.get(API_KEY_ENV)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    @contextmanager
    def _response(self, method: str, path: str, body: dict | None = None) -> Iterator[httpx.Response]:
        """The response to a request, its status checked and its body not yet read; every failure, also while the
        body is read inside the `with`, is a RemoteError. Leaving the `with` early closes the connection."""
        try:
            with self._client.stream(method, path, content=None if body is None else json.dumps(body),
                                     headers=self._headers()) as response:
                if response.status_code != 200:
                    detail = _error_detail(next(response.iter_bytes(4096), b""))
                    raise RemoteError(self._status_message(response.status_code, path, detail))
                yield response
        except httpx.TimeoutException:
            raise RemoteError(self._slow_message()) from None
        except httpx.HTTPError as exc:
            cause = _socket_error(exc)
            if isinstance(cause, (ConnectionRefusedError, socket.gaierror)):
                reason = "connection refused" if isinstance(cause, ConnectionRefusedError) else "unknown host"
                raise RemoteError(f"no engine answers at {self.url} ({reason}): is the server running?") from None
            raise RemoteError(f"cannot reach the engine at {self.url}: {cause and cause.strerror or exc}") from None

    def _get_text(self, path: str) -> str:
        with self._response("GET", path) as response:
            return response.read().decode("utf-8", "replace")

    def _post_json(self, path: str, body: dict) -> dict:
        with self._response("POST", path, body) as response:
            try:
                return json.loads(response.read())
            except ValueError:
                raise RemoteError(f"the engine at {self.url} sent something that is not JSON for {path}") from None

    def _slow_message(self) -> str:
        return f"the engine at {self.url} sent nothing for {self.timeout_s:g} s (busy or stuck); try again or raise --timeout"

    def _status_message(self, status: int, path: str, detail: str) -> str:
        if status in (401, 403):
            return (f"the engine at {self.url} refused the request ({status}): set its API key in "
                    f"{API_KEY_ENV}")
        if status == 404 and path.endswith("/models"):
            return (f"{self.url} is not an OpenAI-compatible API (GET {path} gave 404): the URL ends in /v1, like "
                    f"{URL_EXAMPLE}")
        return f"the engine at {self.url} answered {status} to {path}" + (f": {detail}" if detail else "")

    # -- what is served

    def connect(self) -> str:
        """Ask the server what it serves and settle the model name; returns it."""
        try:
            listing = json.loads(self._get_text(self.api_path + "/models"))
            served = [entry["id"] for entry in listing["data"]]
        except (ValueError, KeyError, TypeError):
            raise RemoteError(f"{self.url} is not an OpenAI-compatible API (GET {self.api_path}/models is not a "
                              "model list)") from None
        owners = {entry.get("owned_by") for entry in listing["data"] if isinstance(entry, dict)}
        self.engine = "vllm" if "vllm" in owners else None
        if not served:
            raise RemoteError(f"the engine at {self.url} serves no model")
        if self.requested_model is None:
            if len(served) > 1:
                raise RemoteError(f"the engine at {self.url} serves {len(served)} models ({', '.join(served)}): "
                                  "name one")
            self.model = served[0]
        elif self.requested_model in served:
            self.model = self.requested_model
        else:
            raise RemoteError(f"the engine at {self.url} serves {', '.join(map(repr, served))}, not "
                              f"{self.requested_model!r}")
        return self.model

    def counters(self) -> SpecCounters | None:
        """The engine's speculative-decoding totals now; None where it has no /metrics or no such counters."""
        try:
            text = self._get_text(self.metrics_path)
        except RemoteError:
            return None
        return SpecCounters.from_samples(parse_metrics(text), self.model)

    def _settled_counters(self, before: SpecCounters) -> SpecCounters | None:
        """Counters that include the reply just finished (vLLM records them a moment after the last byte)."""
        after = None
        for _ in range(METRICS_SETTLE_TRIES):
            after = self.counters()
            if after is None or after.requests_done > before.requests_done:
                break
            time.sleep(METRICS_SETTLE_S)
        return after

    # -- replies

    def _sampling(self, settings: DecodeSettings) -> dict:
        if settings.greedy:
            return {"temperature": 0.0, "max_tokens": settings.max_new_tokens}
        body = {"temperature": settings.temperature, "top_p": settings.top_p, "seed": settings.seed,
                "max_tokens": settings.max_new_tokens}
        if settings.top_k:
            body["top_k"] = settings.top_k  # not OpenAI's, but vLLM, SGLang and llama-server all take it
        return body

    def stream_chat(self, messages: list[dict], settings: DecodeSettings) -> Iterator[TextDelta | RemoteReply]:
        """Yield the reply as it streams (`TextDelta`s), then one `RemoteReply`. The server applies its own chat
        template to `messages`."""
        if self.model is None:
            self.connect()
        before = self.counters()
        body = {"model": self.model, "messages": messages, "stream": True,
                "stream_options": {"include_usage": True}, **self._sampling(settings)}
        if self.engine == "vllm":
            body["return_token_ids"] = True  # vLLM's extension: a piece's token ids, so its token count
        if messages and messages[-1]["role"] == "assistant":
            # carry on the last assistant message instead of answering it (vLLM's and SGLang's chat extension;
            # llama-server continues a final assistant message by itself)
            body.update(continue_final_message=True, add_generation_prompt=False)
        start = time.perf_counter()
        pieces, token_ids, first_token_s = [], [], None
        usage, finish_reason, timings = None, None, None
        stream = StreamState()
        with self._response("POST", self.api_path + "/chat/completions", body) as response:
            for chunk in _server_sent_events(response, stream):
                usage = chunk.get("usage") or usage
                timings = chunk.get("timings") or timings
                for choice in chunk.get("choices") or []:
                    finish_reason = choice.get("finish_reason") or finish_reason
                    text = stream.valid_text((choice.get("delta") or {}).get("content") or "")
                    ids = choice.get("token_ids")
                    if ids:
                        token_ids += ids
                    if text or ids:
                        at_s = time.perf_counter() - start
                        first_token_s = at_s if first_token_s is None else first_token_s
                        pieces.append(text)
                        yield TextDelta(text, len(ids) if ids else None, at_s)
        wall_s = time.perf_counter() - start
        n_tokens = (usage or {}).get("completion_tokens") or len(token_ids) or len(pieces)
        spec, note = self._reply_stats(before, timings)
        if not (stream.done or finish_reason):
            finish_reason = CUT
        note = "; ".join(n for n in (stream.problems(finish_reason == CUT), note) if n) or None
        yield RemoteReply(text="".join(pieces), token_ids=tuple(token_ids) if token_ids else None,
                          n_tokens=n_tokens, wall_s=wall_s, first_token_s=first_token_s,
                          finish_reason=finish_reason, model=self.model, spec=spec, note=note)

    def complete_ids(self, prompt_ids: Sequence[int], settings: DecodeSettings,
                     stop_ids: Sequence[int] = ()) -> tuple[list[int], float, EngineSpecStats | None]:
        """A completion of exactly these prompt token ids (our own chat template's), not streamed: the
        generated ids, the wall time from request to response, and the engine's speculative counts."""
        if self.model is None:
            self.connect()
        before = self.counters()
        body = {"model": self.model, "prompt": list(prompt_ids), "return_token_ids": True,
                "stop_token_ids": list(stop_ids), **self._sampling(settings)}
        start = time.perf_counter()
        answer = self._post_json(self.api_path + "/completions", body)
        wall_s = time.perf_counter() - start
        try:
            token_ids = list(answer["choices"][0]["token_ids"])
        except (KeyError, IndexError, TypeError):
            raise RemoteError(f"the engine at {self.url} returned no token ids (a vLLM server is needed)") from None
        spec, _ = self._reply_stats(before, None)
        return token_ids, wall_s, spec

    def _reply_stats(self, before: SpecCounters | None, timings: dict | None) -> tuple[EngineSpecStats | None,
                                                                                          str | None]:
        from_timings = llama_server_stats(timings or {})
        if from_timings is not None:
            return from_timings, None
        after = self._settled_counters(before) if before is not None else None
        if before is None or after is None:
            return None, (f"the engine at {self.url} reports no speculative-decoding metrics: tokens/s only, no "
                          "acceptance")
        spec = after.since(before)
        note = (f"{spec.requests} requests finished on the engine during this reply: its acceptance counts "
                "include theirs") if spec.shared else None
        return spec, note


LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # json.loads leaves an unpaired \\uD8xx escape as one
CUT = "cut"  # RemoteReply.finish_reason of a stream that closed before [DONE] or a finish_reason


@dataclass
class StreamState:
    """What a reply's stream did besides its text: whether it ended with [DONE], the events that were not JSON,
    and the pieces whose text was not valid Unicode (a lone surrogate, U+D800 to U+DFFF, cannot be written out)."""

    done: bool = False
    malformed: int = 0
    invalid_text: int = 0

    def valid_text(self, text: str) -> str:
        """`text` with each lone surrogate replaced by U+FFFD (a piece with any is counted)."""
        text, replaced = LONE_SURROGATE.subn("\ufffd", text)
        self.invalid_text += replaced > 0
        return text

    def problems(self, cut: bool) -> str | None:
        said = []
        if cut:
            said.append("the engine closed the stream before the reply ended (no [DONE], no finish reason): the "
                        "text is what came before")
        if self.malformed:
            said.append(f"{self.malformed} event{'s' if self.malformed > 1 else ''} of the stream were not JSON "
                        "and were skipped")
        if self.invalid_text:
            said.append("the engine sent text that is not valid Unicode (a lone surrogate), shown as �")
        return "; ".join(said) or None


def _server_sent_events(response: httpx.Response, state: StreamState) -> Iterator[dict]:
    """The JSON objects of an SSE stream (`data: {...}` lines) up to `data: [DONE]`; `state` learns whether that
    came and how many events were no JSON."""
    for line in _lines(response):
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[len(b"data:"):].strip()
        if data == b"[DONE]":
            state.done = True
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            state.malformed += 1
            continue
        if isinstance(chunk, dict) and "error" in chunk:
            error = chunk["error"]
            raise RemoteError(f"the engine stopped the reply: {error.get('message', error) if isinstance(error, dict) else error}")
        if isinstance(chunk, dict):
            yield chunk


def _lines(response: httpx.Response) -> Iterator[bytes]:
    """The body's lines, split at b"\\n" alone (the module's docstring says why). A connection lost midway (an
    engine that died sends no end of its chunked body) ends them as a closed stream does: the reply is cut."""
    rest = b""
    try:
        for piece in response.iter_bytes():
            *lines, rest = (rest + piece).split(b"\n")
            yield from lines
    except (httpx.RemoteProtocolError, httpx.ReadError):
        pass
    yield rest  # a last line without its newline


def _socket_error(exc: httpx.HTTPError) -> OSError | None:
    """The socket's own error, where the kind of failure shows, or None where the failure was none of the socket's.
    httpx raises its error from httpcore's, which holds the socket's as its argument (its `from` is dropped on the
    way out of httpcore's pool; the context is no guide, as it may be any error being handled around the call)."""
    below = exc.__cause__
    cause = below.args[0] if below is not None and below.args else None
    return cause if isinstance(cause, OSError) else None


def _error_detail(raw: bytes) -> str:
    """The message of an OpenAI-style error body, on one line and short."""
    try:
        error = json.loads(raw).get("error", {})
        message = error.get("message", "") if isinstance(error, dict) else str(error)
    except (ValueError, AttributeError):
        message = raw.decode("utf-8", "replace")
    message = " ".join(message.split())
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
