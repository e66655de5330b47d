"""The remote-engine client (engine.remote): the /metrics parser on text captured from a real vLLM server, and the
client against a small local HTTP server that plays an OpenAI-compatible engine (so these run without vLLM)."""
from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from engine.events import DecodeSettings
from engine.remote import API_KEY_ENV, RemoteEngine, RemoteError
from engine.remote_records import RemoteReply, SpecCounters, TextDelta, llama_server_stats, parse_metrics
from tests.fake_engine import FakeEngine, closed_port, serving

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
        with pytest.raises(RemoteError, match=r"sent no answer for 0.2 s"):
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


def streamed(raw: list[bytes]) -> RemoteReply:
    engine = FakeEngine()
    engine.raw_stream = raw
    with serving(engine) as url:
        return list(RemoteEngine(url).stream_chat([{"role": "user", "content": "hi"}], DecodeSettings()))[-1]


def test_a_lone_surrogate_in_the_stream_keeps_the_text_and_says_the_engine_sent_bad_text():
    reply = streamed([b'data: {"choices":[{"delta":{"content":"ok\\u0000\\ud800"}}]}\n\n',
                      b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n', b"data: [DONE]\n\n"])
    assert reply.text == "ok\x00\ufffd" and reply.text.encode("utf-8")
    assert "not valid Unicode" in reply.note and reply.finish_reason == "stop"


def test_a_stream_cut_after_a_malformed_event_is_said_to_be_cut_and_keeps_what_came():
    reply = streamed([b'data: {"choices":[{"delta":{"content":"Hello"}}]}\n\n', b"data: garbage\n\n"])
    assert reply.text == "Hello" and reply.finish_reason == "cut"
    assert "not JSON before the reply ended" in reply.note


def test_a_stream_that_closes_without_a_finish_reason_is_said_to_be_cut():
    reply = streamed([b'data: {"choices":[{"delta":{"content":"Hello"}}]}\n\n'])
    assert reply.text == "Hello" and reply.finish_reason == "cut"
    assert "closed the stream before the reply ended" in reply.note


def test_an_error_event_in_the_stream_is_one_line_with_the_engines_message():
    with pytest.raises(RemoteError, match="the engine stopped the reply: out of memory"):
        streamed([b'data: {"choices":[{"delta":{"content":"Hello"}}]}\n\n',
                  b'data: {"error":{"message":"out of memory","code":500}}\n\n'])


def test_a_prompt_with_a_lone_surrogate_is_sent_with_it_replaced():
    """A command line's bytes that are not UTF-8 become lone surrogates, which UTF-8 cannot carry."""
    engine = FakeEngine()
    with serving(engine) as url:
        reply = list(RemoteEngine(url).stream_chat([{"role": "user", "content": "hi \udcff"}], GREEDY))[-1]
    assert reply.text == "Hello there, friend!"
    assert engine.requests[0]["messages"] == [{"role": "user", "content": "hi \ufffd"}]


def test_line_separators_inside_a_json_string_stay_in_the_text():
    """vLLM leaves U+2028, U+2029 and U+0085 raw in its JSON: a reader splitting lines as str.splitlines does would
    cut the event there and lose it as not JSON."""
    text = "one\u2028two\u2029three\u0085four"
    reply = streamed([b'data: {"choices":[{"delta":{"content":"%s"}}]}\n\n' % text.encode(),
                      b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n', b"data: [DONE]\n\n"])
    assert reply.text == text and "not JSON" not in (reply.note or "")


def test_a_whole_stream_is_not_said_to_be_cut():
    """Control: the same first event, then a finish reason and [DONE]: no note of a cut."""
    reply = streamed([b'data: {"choices":[{"delta":{"content":"Hello"}}]}\n\n',
                      b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n', b"data: [DONE]\n\n"])
    assert reply.finish_reason == "stop" and "cut" not in (reply.note or "") and "closed" not in (reply.note or "")


def test_cli_generate_exits_1_on_a_cut_stream_after_printing_what_came(capsys):
    from app.cli import main

    engine = FakeEngine()
    engine.raw_stream = [b'data: {"choices":[{"delta":{"content":"Hello"}}]}\n\n', b"data: garbage\n\n"]
    with serving(engine) as url:
        assert main(["generate", "hi", "--target", url]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("Hello") and "before the reply ended" in err


def test_a_connection_lost_midway_is_said_to_be_cut_and_keeps_what_came():
    """An engine that dies mid-reply sends no end of its chunked body: the client's connection error ends the reply
    as a closed stream does. This one has no /metrics (404) and dies in its first reply."""
    chunk = b'data: {"choices":[{"delta":{"content":"Hello"}}]}\n\n'

    def serve_then_die(server: socket.socket) -> None:
        while True:
            connection, _ = server.accept()
            with connection:
                if connection.recv(65536).startswith(b"GET"):
                    connection.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    continue
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                   b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (len(chunk), chunk))
                return

    with socket.create_server(("127.0.0.1", 0)) as server:
        threading.Thread(target=serve_then_die, args=(server,), daemon=True).start()
        client = RemoteEngine(f"http://127.0.0.1:{server.getsockname()[1]}/v1")
        client.model = "fake-model"  # as connect() would settle it
        reply = list(client.stream_chat([{"role": "user", "content": "hi"}], GREEDY))[-1]
    assert reply.text == "Hello" and reply.finish_reason == "cut"
    assert "closed the stream before the reply ended" in reply.note


# ---------------------------------------------------------------------------------------------------- not the API

WEB_PAGE = ("text/html; charset=utf-8", b"<!doctype html><html><head><title>Open WebUI</title></head></html>")
NOT_THE_API = pytest.mark.parametrize("page, said", [(WEB_PAGE, "an HTML page"), (("text/plain", b"OK"),
                                                                                  "text/plain")])


@NOT_THE_API
def test_a_model_list_that_is_not_json_is_one_line_asking_for_the_api_url(page, said):
    engine = FakeEngine()
    engine.page = page
    with serving(engine) as url:
        with pytest.raises(RemoteError, match=f"answered GET /v1/models with {said}, not the OpenAI API: is the URL"):
            RemoteEngine(url).connect()


@NOT_THE_API
def test_a_chat_answer_that_is_not_a_stream_is_one_line_asking_for_the_api_url(page, said):
    engine = FakeEngine()
    engine.page = page
    with serving(engine) as url:
        client = RemoteEngine(url)
        client.model = "fake-model"  # as connect() would settle it
        with pytest.raises(RemoteError, match=f"answered POST /v1/chat/completions with {said}, not the OpenAI API"):
            list(client.stream_chat([{"role": "user", "content": "hi"}], GREEDY))


def test_a_model_list_labelled_json_that_is_not_is_said_not_to_be_a_model_list():
    engine = FakeEngine()
    engine.page = ("application/json", b"OK")
    with serving(engine) as url:
        with pytest.raises(RemoteError, match=r"is not an OpenAI-compatible API \(GET /v1/models is not a model list"):
            RemoteEngine(url).connect()


def test_cli_generate_against_a_web_page_is_one_line(capsys):
    from app.cli import main

    engine = FakeEngine()
    engine.page = WEB_PAGE
    with serving(engine) as url:
        assert main(["generate", "hi", "--target", url]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "with an HTML page, not the OpenAI API: is the URL" in err


# ---------------------------------------------------------------------------------------------------- trickles

TIMEOUT_S = 0.5
GIVEN_UP_WITHIN_S = 10 * TIMEOUT_S  # what "stopped at the time-out" means here, on a busy machine too


def test_headers_trickled_byte_by_byte_time_out_the_model_list():
    engine = FakeEngine()
    engine.trickle_headers = True
    with serving(engine) as url:
        start = time.monotonic()
        with pytest.raises(RemoteError, match=f"sent no answer for {TIMEOUT_S:g} s"):
            RemoteEngine(url, timeout_s=TIMEOUT_S).connect()
        assert time.monotonic() - start < GIVEN_UP_WITHIN_S


@pytest.mark.parametrize("keep_alive", [b": keep-alive\n\n", b"\n",
                                        b'data: {"choices":[{"index":0,"delta":{"content":""}}]}\n\n'],
                         ids=["comment", "blank line", "empty piece"])
def test_a_stream_that_keeps_sending_but_no_token_times_out_after_what_came(keep_alive):
    engine = FakeEngine()
    engine.keep_alive = keep_alive
    pieces = []
    with serving(engine) as url:
        client = RemoteEngine(url, timeout_s=TIMEOUT_S)
        client.connect()
        start = time.monotonic()
        with pytest.raises(RemoteError, match=f"sent no new token for {TIMEOUT_S:g} s"):
            pieces += client.stream_chat([{"role": "user", "content": "hi"}], GREEDY)
        assert time.monotonic() - start < GIVEN_UP_WITHIN_S
    assert [piece.text for piece in pieces] == ["Hello"]


def test_tokens_each_within_the_timeout_outlast_it_together():
    """The time-out bounds the silence between tokens, not the whole reply."""
    engine = FakeEngine(piece_delay_s=0.5)
    engine.pieces = [("a", [1])] * 5
    with serving(engine) as url:
        _, reply = chat(url, timeout_s=1.5)
    assert reply.text == "aaaaa" and reply.finish_reason == "stop"


def test_cli_generate_against_a_trickling_engine_is_one_line_at_the_timeout(capsys):
    from app.cli import main

    engine = FakeEngine()
    engine.trickle_headers = True
    with serving(engine) as url:
        start = time.monotonic()
        assert main(["generate", "hi", "--target", url, "--timeout", str(TIMEOUT_S)]) == 1
        assert time.monotonic() - start < GIVEN_UP_WITHIN_S
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"sent no answer for {TIMEOUT_S:g} s" in err


def test_cli_generate_ends_the_streamed_text_s_line_before_a_failure_mid_reply(capsys):
    from app.cli import main

    engine = FakeEngine()
    engine.keep_alive = b": keep-alive\n\n"
    with serving(engine) as url:
        assert main(["generate", "hi", "--target", url, "--timeout", str(TIMEOUT_S)]) == 1
    captured = capsys.readouterr()
    assert captured.out == "Hello\n"  # the error's line is not glued to the reply's last word
    assert "sent no new token" in captured.err
