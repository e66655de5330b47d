"""The remote-engine client (engine.remote): the /metrics parser on text captured from a real vLLM server, and the
client against a small local HTTP server that plays an OpenAI-compatible engine (so these run without vLLM)."""
from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from engine.events import DecodeSettings
from engine.remote import (API_KEY_ENV, RemoteEngine, RemoteError, RemoteReply, SpecCounters, TextDelta,
                           llama_server_stats, parse_metrics)

FIXTURES = Path(__file__).parent / "fixtures"
SERVED = "/root/.cache/specdec-studio/embedded/smollm2-135m-instruct"  # the model name in the captured text


def captured(name: str) -> SpecCounters:
    return SpecCounters.from_samples(parse_metrics((FIXTURES / name).read_text()))


# ---------------------------------------------------------------------------------------------------- parser


def test_counters_are_read_from_captured_vllm_metrics():
    counters = captured("vllm_metrics_after.txt")
    assert (counters.drafts, counters.draft_tokens, counters.accepted) == (3, 12, 5)
    assert counters.accepted_per_position == (2, 2, 1, 0)
    assert counters.requests_done == 2


def test_delta_between_two_captures_is_the_second_requests_share():
    delta = captured("vllm_metrics_after.txt").since(captured("vllm_metrics_before.txt"))
    assert (delta.drafts, delta.draft_tokens, delta.accepted) == (2, 8, 5)
    assert delta.accepted_per_position == (2, 2, 1, 0)
    assert delta.requests == 1 and not delta.shared


def test_delta_statistics_follow_vllms_definitions():
    delta = captured("vllm_metrics_after.txt").since(captured("vllm_metrics_before.txt"))
    assert delta.acceptance_rate == pytest.approx(5 / 8)
    assert delta.mean_acceptance_length == pytest.approx(1 + 5 / 2)
    assert delta.per_position_acceptance == pytest.approx([2 / 2, 2 / 2, 1 / 2, 0 / 1])


def test_alpha_counts_each_draft_not_accepted_to_the_end_as_one_rejection():
    delta = captured("vllm_metrics_after.txt").since(captured("vllm_metrics_before.txt"))
    assert delta.alpha == pytest.approx(5 / (5 + 2))  # neither draft reached position 3


def test_metrics_without_speculative_counters_give_none():
    text = "\n".join(line for line in (FIXTURES / "vllm_metrics_after.txt").read_text().splitlines()
                     if "spec_decode" not in line)
    assert SpecCounters.from_samples(parse_metrics(text)) is None


def test_counters_of_another_served_model_are_left_out():
    text = (FIXTURES / "vllm_metrics_after.txt").read_text()
    assert SpecCounters.from_samples(parse_metrics(text), SERVED).drafts == 3
    assert SpecCounters.from_samples(parse_metrics(text), "another-model") is None


def test_parser_skips_comments_and_lines_it_cannot_read():
    samples = parse_metrics('# HELP x y\nnot a metric line at all\nx_total{a="1",b="q\\"uote"} 4.0\ny 2.5e+01\n')
    assert [(s.name, s.labels, s.value) for s in samples] == [
        ("x_total", (("a", "1"), ("b", 'q"uote')), 4.0), ("y", (), 25.0)]


def test_llama_server_timings_give_the_reply_acceptance():
    stats = llama_server_stats({"draft_n": 10, "draft_n_accepted": 7, "predicted_n": 30})
    assert stats.acceptance_rate == pytest.approx(0.7) and stats.accepted_per_position == ()
    assert llama_server_stats({"predicted_n": 30}) is None


# ---------------------------------------------------------------------------------------------------- a fake engine


class FakeEngine:
    """What the handler serves: one model, a streamed reply of `pieces`, counters that advance per reply."""

    def __init__(self, served: str = "fake-model", spec_metrics: bool = True, delay_s: float = 0.0,
                 api_key: str | None = None):
        self.served = served
        self.spec_metrics = spec_metrics
        self.delay_s = delay_s
        self.api_key = api_key
        self.pieces = [("Hello", [11]), (" there, friend", [12, 13, 14]), ("!", [15])]
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "pos": [0, 0, 0, 0], "done": 0}
        self.requests: list[dict] = []

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

        def _authorised(self) -> bool:
            if engine.api_key and self.headers.get("Authorization") != f"Bearer {engine.api_key}":
                self._send(401, json.dumps({"error": {"message": "Unauthorized"}}).encode())
                return False
            return True

        def do_GET(self):
            time.sleep(engine.delay_s)
            if not self._authorised():
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
            if self.path != "/v1/chat/completions":
                self._send(404, b'{"detail": "Not Found"}')
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for text, ids in engine.pieces:
                chunk = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None,
                                      "token_ids": ids}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
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
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def closed_port() -> int:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()
    return port


GREEDY = DecodeSettings(mode="ar", greedy=True, max_new_tokens=16)


def chat(url: str, model: str | None = None, **kwargs) -> tuple[list[TextDelta], RemoteReply]:
    engine = RemoteEngine(url, model, **kwargs)
    pieces = list(engine.stream_chat([{"role": "user", "content": "hi"}], GREEDY))
    return pieces[:-1], pieces[-1]


# ---------------------------------------------------------------------------------------------------- the client


def test_a_chat_turn_streams_pieces_then_a_reply():
    with serving(FakeEngine()) as url:
        pieces, reply = chat(url)
    assert [p.text for p in pieces] == ["Hello", " there, friend", "!"]
    assert [p.n_tokens for p in pieces] == [1, 3, 1]
    assert reply.text == "Hello there, friend!" and reply.n_tokens == 5 and reply.finish_reason == "stop"
    assert reply.token_ids == (11, 12, 13, 14, 15) and reply.model == "fake-model"


def test_a_reply_carries_the_engines_counts_for_that_reply_alone():
    engine = FakeEngine()
    engine.counters.update(drafts=10, draft_tokens=40, accepted=17, done=3)  # earlier traffic
    with serving(engine) as url:
        _, reply = chat(url)
    assert (reply.spec.drafts, reply.spec.draft_tokens, reply.spec.accepted) == (1, 4, 2)
    assert reply.spec.requests == 1 and reply.note is None


def test_the_request_is_greedy_with_our_token_budget():
    engine = FakeEngine()
    with serving(engine) as url:
        chat(url)
    request = engine.requests[0]
    assert request["temperature"] == 0.0 and request["max_tokens"] == 16 and request["stream"] is True
    assert request["model"] == "fake-model" and request["messages"] == [{"role": "user", "content": "hi"}]


def test_an_engine_without_speculative_metrics_gives_a_note_not_an_error():
    with serving(FakeEngine(spec_metrics=False)) as url:
        _, reply = chat(url)
    assert reply.spec is None and "no speculative-decoding metrics" in reply.note
    assert reply.text == "Hello there, friend!"


def test_closed_port_is_one_line_error():
    with pytest.raises(RemoteError, match=r"no engine answers at .* \(connection refused\)"):
        chat(f"http://127.0.0.1:{closed_port()}/v1")


def test_model_name_that_differs_is_refused_with_the_served_name():
    with serving(FakeEngine()) as url:
        with pytest.raises(RemoteError, match="serves 'fake-model', not 'llama-70b'"):
            chat(url, "llama-70b")


def test_wrong_url_path_says_where_the_api_lives():
    with serving(FakeEngine()) as url:
        with pytest.raises(RemoteError, match="ends in /v1"):
            chat(url.removesuffix("/v1") + "/api")


def test_slow_engine_gives_up_after_the_timeout():
    with serving(FakeEngine(delay_s=1.0)) as url:
        with pytest.raises(RemoteError, match=r"sent nothing for 0.2 s"):
            chat(url, timeout_s=0.2)


def test_url_that_is_no_url_is_refused():
    with pytest.raises(RemoteError, match="is not an engine URL"):
        RemoteEngine("localhost:8000")


def test_api_key_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, "s3cret")
    with serving(FakeEngine(api_key="s3cret")) as url:
        _, reply = chat(url)
    assert reply.text == "Hello there, friend!"


def test_missing_api_key_names_the_variable(monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    with serving(FakeEngine(api_key="s3cret")) as url:
        with pytest.raises(RemoteError, match=f"refused the request \\(401\\): set its API key in {API_KEY_ENV}"):
            chat(url)


def test_cli_generate_against_a_url_prints_the_reply_and_the_engines_acceptance(capsys):
    from app.cli import main

    with serving(FakeEngine()) as url:
        assert main(["generate", "hi", "--target", url, "--max-new-tokens", "16"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "Hello there, friend!"
    assert "5 tokens in" in err and "acceptance 0.50 (2/4 drafts)" in err and "counts only" in err


def test_cli_generate_against_a_closed_port_is_one_line(capsys):
    from app.cli import main

    assert main(["generate", "hi", "--target", f"http://127.0.0.1:{closed_port()}/v1"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "connection refused" in err
