"""The client against a real vLLM server from .venv-vllm (`make serving-peer`), serving the embedded target with
n-gram speculation. Marked `serving`: `make test-serving` runs them; they skip when .venv-vllm is missing."""
from __future__ import annotations

import pytest

from engine.benchmark.vllm_peer import NGRAM_CONFIG, SERVED_NAME, VllmServer, missing_reason
from engine.events import DecodeSettings
from engine.models import embedded
from engine.remote import RemoteEngine, RemoteError
from engine.remote_records import RemoteReply

pytestmark = pytest.mark.serving

REPEATING = "Repeat exactly: the cat sat on the mat, the cat sat on the mat, the cat sat on the mat."
GREEDY = DecodeSettings(mode="ar", greedy=True, max_new_tokens=32)


@pytest.fixture(scope="module")
def server():
    if missing_reason():
        pytest.skip(missing_reason())
    if not embedded.target_dir().exists():
        pytest.skip("the embedded target is not prepared (specdec prepare)")
    with VllmServer(str(embedded.target_dir()), NGRAM_CONFIG) as running:
        yield running


def chat(server, prompt: str, settings: DecodeSettings = GREEDY) -> RemoteReply:
    engine = RemoteEngine(server.base_url, timeout_s=120)
    *_, reply = engine.stream_chat([{"role": "user", "content": prompt}], settings)
    return reply


def test_a_chat_turn_streams_from_vllm(server):
    engine = RemoteEngine(server.base_url, timeout_s=120)
    pieces = list(engine.stream_chat([{"role": "user", "content": REPEATING}], GREEDY))
    reply = pieces[-1]
    assert reply.model == SERVED_NAME and reply.text.strip()
    assert "".join(p.text for p in pieces[:-1]) == reply.text
    assert sum(p.n_tokens for p in pieces[:-1]) == len(reply.token_ids) == reply.n_tokens <= 32


def test_metric_deltas_are_the_replys_own(server):
    reply = chat(server, REPEATING)
    spec = reply.spec
    assert spec is not None and spec.requests == 1 and reply.note is None
    assert spec.draft_tokens == spec.drafts * NGRAM_CONFIG["num_speculative_tokens"]
    assert len(spec.accepted_per_position) == NGRAM_CONFIG["num_speculative_tokens"]
    assert sum(spec.accepted_per_position) == spec.accepted
    # every engine step gives one target token plus its accepted drafts, and each drafting step is one step
    assert spec.accepted + spec.drafts <= reply.n_tokens


def test_a_repeating_prompt_gets_drafts_accepted(server):
    reply = chat(server, REPEATING)
    assert reply.spec.drafts > 0 and reply.spec.accepted > 0


def test_prompt_token_ids_complete_greedily_and_repeatably(server):
    engine = RemoteEngine(server.base_url, SERVED_NAME, timeout_s=120)
    prompt = [1, 4093, 198, 19556, 314, 260, 6253, 2830, 47, 2, 198, 1, 520, 9531, 198]
    first, wall_s, spec = engine.complete_ids(prompt, GREEDY, stop_ids=[2])
    second, _, _ = engine.complete_ids(prompt, GREEDY, stop_ids=[2])
    assert first == second and 0 < len(first) <= 32 and wall_s > 0 and spec.requests == 1


def test_a_model_name_the_server_does_not_serve_is_refused(server):
    with pytest.raises(RemoteError, match=f"serves '{SERVED_NAME}', not 'llama-70b'"):
        RemoteEngine(server.base_url, "llama-70b").connect()

