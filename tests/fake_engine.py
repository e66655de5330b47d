"""A small local HTTP server that plays an OpenAI-compatible engine (vLLM's /v1/models, streamed
/v1/chat/completions and /metrics counters), or one that misbehaves (a web page instead of the API, headers or
keep-alives trickled without a token), shared by the remote client's, the worker's and the window's tests."""
from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterable
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TRICKLE_LIMIT_S = 6.0  # a trickle ends (the connection closes) after this, so a client that never gives up still ends

class FakeEngine:
    """What the handler serves: one model, a streamed reply of `pieces`, counters that advance per reply."""

    def __init__(self, served: str = "fake-model", spec_metrics: bool = True, delay_s: float = 0.0,
                 api_key: str | None = None, piece_delay_s: float = 0.0):
        self.served = served
        self.piece_delay_s = piece_delay_s  # between streamed pieces: a reply that can be stopped midway
        self.spec_metrics = spec_metrics
        self.delay_s = delay_s
        self.api_key = api_key
        self.pieces = [("Hello", [11]), (" there, friend", [12, 13, 14]), ("!", [15])]
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "pos": [0, 0, 0, 0], "done": 0}
        self.requests: list[dict] = []
        self.raw_stream: list[bytes] | None = None  # sent as it is instead of the reply, then the stream closes
        self.page: tuple[str, bytes] | None = None  # (content type, body) answered with 200 to every request
        self.trickle_s = 0.05  # between the bytes of a trickle below
        self.trickle_headers = False  # every answer's headers a byte at a time, never ending
        self.keep_alive: bytes | None = None  # after the first piece, sent again and again instead of the rest
        self.stopped = threading.Event()  # set when the server stops: a trickle ends

    def metrics(self) -> str:
        c = self.counters
        lines = ['vllm:num_requests_running{engine="0",model_name="%s"} 0.0' % self.served,
                 'vllm:request_success_total{engine="0",finished_reason="stop",model_name="%s"} %d.0'
                 % (self.served, c["done"])]
        if self.spec_metrics:
            lines += [f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{self.served}"}} {c["drafts"]}.0',
                      f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="{self.served}"}} '
                      f'{c["draft_tokens"]}.0',
                      f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="{self.served}"}} '
                      f'{c["accepted"]}.0']
            lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="{self.served}",'
                      f'position="{i}"}} {n}.0' for i, n in enumerate(c["pos"])]
        return "\n".join(lines) + "\n"

    def finish_reply(self) -> None:
        # one drafting step of 4 drafts with 2 accepted (the 3-token piece), as vLLM would count it
        c = self.counters
        c["drafts"] += 1
        c["draft_tokens"] += 4
        c["accepted"] += 2
        c["pos"][0] += 1
        c["pos"][1] += 1
        c["done"] += 1


def handler_for(engine: FakeEngine):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _trickle(self, pieces: Iterable[bytes]) -> None:
            """Send `pieces` one every engine.trickle_s until the client hangs up, the server stops or
            TRICKLE_LIMIT_S has passed; then close the connection."""
            end = time.monotonic() + TRICKLE_LIMIT_S
            self.close_connection = True
            try:
                for piece in pieces:
                    if engine.stopped.wait(engine.trickle_s) or time.monotonic() > end:
                        return
                    self.wfile.write(piece)
            except OSError:
                pass

        def _answered_otherwise(self) -> bool:
            """Answer with engine.page or trickled headers where the engine is set to; says whether it did."""
            if engine.page is not None:
                self._send(200, engine.page[1], engine.page[0])
            elif engine.trickle_headers:
                self._trickle(itertools.chain([b"HTTP/1.1 200 OK\r\nX-Slow: "], itertools.repeat(b"a")))
            else:
                return False
            return True

        def _authorised(self) -> bool:
            if engine.api_key and self.headers.get("Authorization") != f"Bearer {engine.api_key}":
                self._send(401, json.dumps({"error": {"message": "Unauthorized"}}).encode())
                return False
            return True

        def do_GET(self):
            time.sleep(engine.delay_s)
            if not self._authorised() or self._answered_otherwise():
                return
            if self.path == "/v1/models":
                self._send(200, json.dumps({"object": "list", "data": [
                    {"id": engine.served, "object": "model", "owned_by": "vllm"}]}).encode())
            elif self.path == "/metrics":
                self._send(200, engine.metrics().encode(), "text/plain")
            else:
                self._send(404, b'{"detail": "Not Found"}')

        def do_POST(self):
            if not self._authorised():
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            engine.requests.append(body)
            if self._answered_otherwise():
                return
            if self.path != "/v1/chat/completions":
                self._send(404, b'{"detail": "Not Found"}')
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            if engine.raw_stream is not None:
                self.wfile.write(b"".join(engine.raw_stream))
                self.wfile.flush()
                self.close_connection = True
                return
            for text, ids in engine.pieces:
                time.sleep(engine.piece_delay_s)
                chunk = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None,
                                      "token_ids": ids}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                if engine.keep_alive is not None:
                    self._trickle(itertools.repeat(engine.keep_alive))
                    return
            done = {"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "stop"}]}
            usage = {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14}}
            engine.finish_reply()
            self.wfile.write(f"data: {json.dumps(done)}\n\ndata: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
            self.wfile.flush()
    return Handler


@contextmanager
def serving(engine: FakeEngine):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(engine))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        engine.stopped.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def closed_port() -> int:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()
    return port
