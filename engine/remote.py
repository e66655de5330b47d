"""The studio as a client of a running OpenAI-compatible engine (vLLM, SGLang, llama-server): streamed chat
completions, and the engine's own speculative-decoding counters read before and after each reply; the records it
returns are engine.remote_records'.

Requests, streams, server-sent events and status errors by the `openai` client; no torch and no Qt here, so the
worker thread, the CLI and the bench can all use it. What a remote engine does not report (which token was drafted,
accepted or resampled) is not invented: a reply carries the engine's counts, and `EngineSpecStats.source` says where
they came from. The client stops reading a stream at an event that is not JSON, so such a reply ends there, cut.
The time-out is a deadline that each new token puts forward, kept by a watchdog thread: httpx's time-outs bound
only each wait for a byte, which an engine trickling bytes but no token never lets pass.
"""
from __future__ import annotations

import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from urllib.parse import urlsplit

import httpx2
import openai

from engine.events import DecodeSettings
from engine.remote_records import (CUT, LONE_SURROGATE, URL_EXAMPLE, EngineSpecStats, RemoteReply, SpecCounters,
                                   StreamState, TextDelta, error_detail, llama_server_stats, parse_metrics, public_url)

API_KEY_ENV = "SPECDEC_API_KEY"  # sent as a bearer token; read from the environment on every request, never stored
NO_KEY = "EMPTY"  # what a server without a key is sent (vLLM's documented placeholder; such servers ignore it)
DEFAULT_TIMEOUT_S = 60.0  # the longest wait for an answer, or for a reply's next token, before "too slow"
METRICS_SETTLE_TRIES = 20  # vLLM records its counters just after the last byte of a reply is sent
METRICS_SETTLE_S = 0.05


class RemoteError(Exception):
    """A remote engine could not be used; the message is one line for the user."""


def api_key() -> str:
    return os.environ.get(API_KEY_ENV) or NO_KEY


# ---------------------------------------------------------------------------------------------------- the client


class Watchdog:
    """The time-out of one request at a time: a deadline `timeout_s` ahead, put forward by `reset()` (a new token),
    and a thread that shuts the request's socket once it passes. httpx's own time-outs bound each wait for a byte,
    so an engine that trickles (headers a byte at a time, keep-alives and empty pieces but no token) would hold a
    request open for ever. A shut socket ends the request with an error or an early end of its body; `expired`
    tells those from the engine's own."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.expired = False
        self._deadline = 0.0
        self._socket: socket.socket | None = None  # the connection of the request now watched
        self._lock = threading.Lock()

    def reset(self) -> None:
        self._deadline = time.monotonic() + self.timeout_s

    @contextmanager
    def armed(self) -> Iterator[None]:
        """Watch the requests made inside the `with` (one at a time), from now on."""
        with self._lock:
            self.expired, self._socket = False, None
        self.reset()
        disarmed = threading.Event()
        thread = threading.Thread(target=self._watch, args=(disarmed,), name="remote-engine-watchdog", daemon=True)
        thread.start()
        try:
            yield
        finally:
            disarmed.set()
            thread.join()

    def _watch(self, disarmed: threading.Event) -> None:
        while not disarmed.wait(max(self._deadline - time.monotonic(), 0.0)):
            if time.monotonic() >= self._deadline:  # else a token came meanwhile and put the deadline forward
                with self._lock:
                    self.expired = True
                    self._shut()
                return

    def _shut(self) -> None:
        if self._socket is not None:
            with suppress(OSError):  # already closed
                self._socket.shutdown(socket.SHUT_RDWR)  # wakes a read blocked on it, as close() does not

    def on_request(self, request: httpx2.Request) -> None:
        """httpx's request hook: have httpcore report the request's connection to `_connected`."""
        request.extensions["trace"] = self._connected

    def _connected(self, event: str, info: dict) -> None:
        # TLS wraps the TCP socket in a new one (and detaches the first): the later one is the one to shut
        if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            with self._lock:
                self._socket = info["return_value"].get_extra_info("socket")
                if self.expired:  # connected after the deadline
                    self._shut()


class RemoteEngine:
    """One OpenAI-compatible server. `base_url` ends in /v1 (`http://127.0.0.1:8000/v1`); its /metrics is read
    at the root of the same host. `model` is the served name to use (None: the only one it serves)."""

    def __init__(self, base_url: str, model: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RemoteError(f"{base_url!r} is not an engine URL: give one like {URL_EXAMPLE}")
        self.url = public_url(base_url)  # what error messages name: never a password or query
        self.api_path = parts.path.rstrip("/") or "/v1"
        origin = public_url(f"{parts.scheme}://{parts.netloc}")  # the URL's user info is no key to send
        self.metrics_url = origin + self.api_path.removesuffix("/v1") + "/metrics"
        self.timeout_s = timeout_s
        self._watchdog = Watchdog(timeout_s)
        self.requested_model = model
        self.model: str | None = None  # resolved by connect()
        self.engine: str | None = None  # "vllm" where /v1/models says so
        # httpx's timeout bounds connecting (the watchdog has no socket to shut before); no retries (the user
        # retries); no proxy from the environment, the system's certificates, no connection left open between
        # replies, so each request's connection is its own.
        self._http = httpx2.Client(trust_env=False, verify=ssl.create_default_context(), timeout=timeout_s,
                                   limits=httpx2.Limits(max_keepalive_connections=0),
                                   event_hooks={"request": [self._watchdog.on_request],
                                                "response": [self._refuse_what_is_not_the_api]})
        self._client = openai.OpenAI(base_url=origin + self.api_path, api_key=api_key, timeout=timeout_s,
                                     max_retries=0, http_client=self._http)

    @contextmanager
    def _failures(self, path: str, awaited: str = "answer") -> Iterator[None]:
        """Every failure of a request to `path`, also while its stream is read inside the `with`, as a RemoteError;
        the watchdog's deadline, put forward by each `awaited` thing that comes, bounds the whole `with`."""
        try:
            with self._watchdog.armed():
                yield
        except openai.APIError as exc:
            if not (self._watchdog.expired or isinstance(exc, openai.APITimeoutError)):
                raise RemoteError(self._failure_message(exc, path)) from None
        else:
            if not self._watchdog.expired:  # a stream whose socket it shut ends as if the engine had closed it
                return
        raise RemoteError(f"the engine at {self.url} sent no {awaited} for {self.timeout_s:g} s (busy or stuck); try "
                          "again or raise --timeout")

    def _failure_message(self, exc: openai.APIError, path: str) -> str:
        if isinstance(exc, openai.APIConnectionError):
            cause = _socket_error(exc)
            if isinstance(cause, ConnectionRefusedError | socket.gaierror):
                reason = "connection refused" if isinstance(cause, ConnectionRefusedError) else "unknown host"
                return f"no engine answers at {self.url} ({reason}): is the server running?"
            return f"cannot reach the engine at {self.url}: {cause and cause.strerror or exc}"
        if isinstance(exc, openai.APIStatusError):
            return self._status_message(exc.status_code, path, error_detail(exc.body))
        return f"the engine stopped the reply: {exc.message}"  # an error event in the stream

    def _refuse_what_is_not_the_api(self, response: httpx2.Response) -> None:
        """httpx's response hook: a successful answer of the API that is neither JSON nor a stream of events is not
        the OpenAI API (a web UI's page, say), whose text the openai client would hand on as if it were the reply.
        Refused before its body is read; /metrics is plain text."""
        request = response.request
        if not response.is_success or request.url.path == urlsplit(self.metrics_url).path:
            return
        kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if kind.endswith("json") or kind == "text/event-stream":
            return
        body = "an HTML page" if kind in ("text/html", "application/xhtml+xml") else kind or "no content type"
        raise RemoteError(f"{self.url} answered {request.method} {request.url.path} with {body}, not the OpenAI API: "
                          f"is the URL the engine's API, ending in /v1 like {URL_EXAMPLE}?")

    def _status_message(self, status: int, path: str, detail: str) -> str:
        if status in (401, 403):
            return f"the engine at {self.url} refused the request ({status}): set its API key in {API_KEY_ENV}"
        if status == 404 and path.endswith("/models"):
            return (f"{self.url} is not an OpenAI-compatible API (GET {path} gave 404): the URL ends in /v1, like "
                    f"{URL_EXAMPLE}")
        return f"the engine at {self.url} answered {status} to {path}" + (f": {detail}" if detail else "")

    # -- what is served

    def connect(self) -> str:
        """Ask the server what it serves and settle the model name; returns it."""
        path = self.api_path + "/models"
        with self._failures(path):
            try:
                listing = self._client.models.list().data
            except ValueError:  # labelled JSON, but not
                listing = None
        if not isinstance(listing, list) or not all(isinstance(getattr(m, "id", None), str) for m in listing):
            raise RemoteError(f"{self.url} is not an OpenAI-compatible API (GET {path} is not a model list)")
        served = [entry.id for entry in listing]
        self.engine = "vllm" if any(getattr(entry, "owned_by", None) == "vllm" for entry in listing) else None
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
            with self._watchdog.armed():
                response = self._http.get(self.metrics_url, headers={"Authorization": f"Bearer {api_key()}"})
        except httpx2.HTTPError:
            return None
        if response.status_code != 200 or self._watchdog.expired:
            return None
        return SpecCounters.from_samples(parse_metrics(response.text), self.model)

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

    def _sampling(self, settings: DecodeSettings) -> tuple[dict, dict]:
        """The request's sampling parameters: OpenAI's, and the extensions vLLM, SGLang and llama-server all take."""
        if settings.greedy:
            return {"temperature": 0.0, "max_tokens": settings.max_new_tokens}, {}
        return ({"temperature": settings.temperature, "top_p": settings.top_p, "seed": settings.seed,
                 "max_tokens": settings.max_new_tokens}, {"top_k": settings.top_k} if settings.top_k else {})

    def stream_chat(self, messages: list[dict], settings: DecodeSettings) -> Iterator[TextDelta | RemoteReply]:
        """Yield the reply as it streams (`TextDelta`s), then one `RemoteReply`. The server applies its own chat
        template to `messages`."""
        if self.model is None:
            self.connect()
        before = self.counters()
        sampling, extra = self._sampling(settings)
        if self.engine == "vllm":
            extra["return_token_ids"] = True  # vLLM's extension: a piece's token ids, so its token count
        if messages and messages[-1]["role"] == "assistant":
            # carry on the last assistant message instead of answering it (vLLM's and SGLang's chat extension;
            # llama-server continues a final assistant message by itself)
            extra.update(continue_final_message=True, add_generation_prompt=False)
        # lone surrogates cannot be sent as UTF-8: a command line's non-UTF-8 bytes go as U+FFFD
        messages = [{**m, "content": LONE_SURROGATE.sub("\ufffd", m["content"])} for m in messages]
        path = self.api_path + "/chat/completions"
        start = time.perf_counter()
        pieces, token_ids, first_token_s = [], [], None
        usage, finish_reason, timings = None, None, None
        stream = StreamState()
        with self._failures(path, awaited="new token"):
            chunks = self._client.chat.completions.create(
                model=self.model, messages=messages, stream=True, stream_options={"include_usage": True},
                extra_body=extra, **sampling)
            for chunk in _read(chunks, stream):
                usage = chunk.usage or usage
                timings = getattr(chunk, "timings", None) or timings  # llama-server's extension
                for choice in chunk.choices or []:
                    finish_reason = choice.finish_reason or finish_reason
                    text = stream.valid_text((choice.delta.content or "") if choice.delta else "")
                    ids = getattr(choice, "token_ids", None)
                    if ids:
                        token_ids += ids
                    if text or ids:
                        self._watchdog.reset()
                        at_s = time.perf_counter() - start
                        first_token_s = at_s if first_token_s is None else first_token_s
                        pieces.append(text)
                        yield TextDelta(text, len(ids) if ids else None, at_s)
        wall_s = time.perf_counter() - start
        n_tokens = (usage.completion_tokens if usage else 0) or len(token_ids) or len(pieces)
        spec, note = self._reply_stats(before, timings)
        finish_reason = finish_reason or CUT
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
        sampling, extra = self._sampling(settings)
        start = time.perf_counter()
        with self._failures(self.api_path + "/completions"):
            answer = self._client.completions.create(
                model=self.model, prompt=list(prompt_ids), **sampling,
                extra_body={"return_token_ids": True, "stop_token_ids": list(stop_ids), **extra})
        wall_s = time.perf_counter() - start
        token_ids = getattr(answer.choices[0], "token_ids", None) if answer.choices else None
        if not isinstance(token_ids, list):
            raise RemoteError(f"the engine at {self.url} returned no token ids (a vLLM server is needed)")
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


def _read(chunks: openai.Stream, stream: StreamState) -> Iterator:
    """The stream's chunks up to its end, or up to a connection lost midway (an engine that died sends no end of its
    body) or an event that is not JSON (`stream` learns of it): either ends the reply as a closed stream does."""
    try:
        yield from chunks
    except openai.APITimeoutError:
        raise
    except openai.APIConnectionError:
        pass
    except ValueError:
        stream.malformed = True


def _socket_error(exc: Exception) -> OSError | None:
    """The socket's own error, where the kind of failure shows: the first OSError held as an argument down the
    chain of causes (openai's error from httpx2's from httpcore2's, which holds the socket's); None where there is
    none. The context is no guide: it may be any error being handled around the call."""
    while exc is not None:
        if exc.args and isinstance(exc.args[0], OSError):
            return exc.args[0]
        exc = exc.__cause__
    return None
