"""A bench peer that crashes, exits or hangs costs its own rows only: its rows say why, the others are kept.

The llama_cpp rows run against a fake `llama_cpp` package written here (no llama.cpp is installed for the tests),
whose Llama dies of SIGILL, hangs, or answers fixed tokens. The bench runs in a subprocess: a peer that took the
bench's own process down would otherwise take the test with it.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.benchmark import bench, llama_binaries, peer_process, summary
from engine.benchmark.bench import Config, Run
from engine.benchmark.peer_process import PeerError, PeerProcess
from tests.tiny import tiny_decoder

REPO = Path(__file__).resolve().parents[3]
FIXED_TOKENS = [5, 6, 7, 8]  # what the working fake answers, over and over (no EOS among them)
FAKE_LLAMA_CPP = '''"""A fake llama-cpp-python for the bench's tests: its Llama {what}."""
import os
import signal
import threading


class Llama:
    def __init__(self, model_path, **kwargs):
        {load}

    def reset(self):
        pass

    def set_seed(self, seed):
        pass

    def generate(self, prompt, **kwargs):
        while True:
            yield from {tokens}
'''
LOADS = {
    "sigill": ("dies of SIGILL as it loads a model", "os.kill(os.getpid(), signal.SIGILL)"),
    "hang": ("never finishes loading", "threading.Event().wait()"),
    "works": ("answers fixed tokens", "pass"),
}
# Runs `specdec bench` on the tests' tiny pair, given the GGUF name the llama_cpp rows load and the peers' time-out
DRIVER = """
import sys
from app import cli
from engine.benchmark import peer_process
from engine.decoding.decoder import Decoder
from tests.tiny import tiny_decoder

gguf, timeout_s, out = sys.argv[1:4]
decoder = tiny_decoder()
decoder.target.name = gguf
Decoder.load = classmethod(lambda cls, *args, **kwargs: decoder)
peer_process.TIMEOUT_S = float(timeout_s)
sys.exit(cli.main(["bench", "--target", gguf, "--methods", "ar,llama_cpp", "--prompts", sys.argv[4],
                   "--max-new-tokens", "6", "--out", out]))
"""


def bench_with_fake_llama_cpp(tmp_path: Path, load: str, timeout_s: float = 120.0):
    """`specdec bench --methods ar,llama_cpp` with the fake llama_cpp whose Llama() does `load`: the finished
    process, its results.json and its out folder."""
    package = tmp_path / "fake" / "llama_cpp"
    package.mkdir(parents=True)
    what, code = LOADS[load]
    (package / "__init__.py").write_text(FAKE_LLAMA_CPP.format(what=what, load=code, tokens=FIXED_TOKENS))
    (package / "llama_speculative.py").write_text("class LlamaPromptLookupDecoding:\n    pass\n")
    gguf = tmp_path / "tiny.gguf"  # the fake never reads it
    gguf.write_bytes(b"")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("w3 w7 w11 w5\nw9 w2 w4\n")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "fake"), str(REPO)])}
    finished = subprocess.run([sys.executable, "-c", DRIVER, str(gguf), str(timeout_s), str(out), str(prompts)],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").is_file() else None
    return finished, results, out


def rows(results: dict, method: str) -> list[dict]:
    return [r for r in results["runs"] if r["method"] == method]


@pytest.fixture(scope="module")
def sigill_bench(tmp_path_factory):
    return bench_with_fake_llama_cpp(tmp_path_factory.mktemp("sigill"), "sigill")


def test_a_llama_cpp_that_dies_of_sigill_leaves_its_rows_with_the_reason(sigill_bench):
    finished, results, _ = sigill_bench
    assert finished.returncode == 0, finished.stderr[-2000:]
    reason = "llama-cpp-python died of SIGILL (illegal instruction) while loading tiny.gguf"
    assert [(r["decoding"], r["failure"], r["tokens_per_s"]) for r in rows(results, "llama_cpp")] == [
        ("greedy", reason, None), ("sample", reason, None)]
    assert f"| llama_cpp | greedy |  | failed: {reason} |" in finished.stdout
    assert f"specdec bench: no llama_cpp greedy figures: {reason}" in finished.stderr


def test_the_ar_rows_json_and_plots_are_kept_when_llama_cpp_dies(sigill_bench):
    finished, results, out = sigill_bench
    assert finished.returncode == 0, finished.stderr[-2000:]
    ar = rows(results, "ar")
    assert [r["decoding"] for r in ar] == ["greedy", "sample"]
    assert all(r["replies"] == 2 and r["tokens"] > 0 and r["tokens_per_s"] > 0 and r["speedup_vs_ar"] == 1.0
               and "failure" not in r for r in ar)
    assert "| ar | greedy |  | " in finished.stdout
    assert sorted(p.name for p in out.iterdir()) == [
        "alpha_tokens_per_round.png", "per_position_acceptance.png", "position_acceptance.csv", "results.json",
        "speedup.png"]


def test_a_llama_cpp_that_hangs_is_stopped_after_the_time_out(tmp_path):
    finished, results, _ = bench_with_fake_llama_cpp(tmp_path, "hang", timeout_s=3)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert {r["failure"] for r in rows(results, "llama_cpp")} == {
        "llama-cpp-python did not answer within 3 s while loading tiny.gguf (stopped)"}
    assert all(r["tokens"] > 0 for r in rows(results, "ar"))


def test_a_working_llama_cpp_answers_from_its_own_process(tmp_path):
    finished, results, _ = bench_with_fake_llama_cpp(tmp_path, "works")
    assert finished.returncode == 0, finished.stderr[-2000:]
    llama = rows(results, "llama_cpp")
    assert [(r["decoding"], r["replies"], r["tokens"]) for r in llama] == [("greedy", 2, 12), ("sample", 2, 12)]
    assert all("failure" not in r and r["tokens_per_s"] > 0 for r in llama)


def test_an_ended_process_is_named_by_its_signal_or_its_exit_code():
    assert peer_process.ended(-4) == "died of SIGILL (illegal instruction)"
    assert peer_process.ended(-9) == "died of SIGKILL (killed)"
    assert peer_process.ended(3) == "exited with code 3"


def test_a_peer_process_that_exits_says_its_last_words_and_fails_again_at_once():
    peer = PeerProcess("worker", [sys.executable, "-c", "import sys; sys.exit('no such model')"])
    with pytest.raises(PeerError, match=r"^worker exited with code 1 while loading m\.gguf: no such model$"):
        peer.read("while loading m.gguf")
    with pytest.raises(PeerError, match="^worker exited with code 1 while loading m.gguf"):
        peer.ask({"prompt": [1]}, "while replying")


def test_a_llama_cpp_program_that_dies_of_a_signal_is_a_peer_error():
    sigill = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"]
    with pytest.raises(PeerError, match=r"died of SIGILL \(illegal instruction\)"):
        llama_binaries._run(sigill)


def test_a_failed_peer_row_runs_no_more_and_the_other_rows_run_every_prompt(capsys):
    calls = []

    class FailingPeer:
        max_new_tokens = 4

        def run(self, config, prompt, seed, max_new_tokens=None):
            calls.append(config.method)
            if config.method == "llama_bench" and len(calls) > 2:
                raise PeerError("llama-bench died of SIGSEGV (segmentation fault): no message")
            return Run(config, 0, 0, [1], 0.1)

    configs = bench.plan(["ar", "llama_bench"], ["greedy"], [2])
    ar, peer = bench.run_all(FailingPeer(), configs, ["a", "b", "c"], 1, 0, progress=False)
    assert calls == ["ar", "llama_bench", "ar", "llama_bench", "ar", "ar"]  # after its warm-up, one prompt
    assert len(ar.runs) == 3 and ar.failure is None
    assert peer.failure == "llama-bench died of SIGSEGV (segmentation fault): no message"
    record = summary.summarize([ar, peer])["runs"][1]
    assert record["failure"] == peer.failure and record["replies"] == 0 and record["speedup_vs_ar"] is None


def test_a_vllm_that_did_not_start_is_a_peer_error_for_each_of_its_rows(monkeypatch, tmp_path):
    import tempfile

    from engine.benchmark.vllm_peer import VllmServer
    from engine.remote import RemoteError

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the server's log file goes

    def start(self, ready_timeout_s=0.0):
        raise RemoteError("vLLM died of SIGKILL (killed) while starting: (no output)")

    monkeypatch.setattr(VllmServer, "start", start)
    runner = bench.Bench(tiny_decoder(), 4, 0.7)
    for decoding, message in (("greedy", "vLLM died of SIGKILL"), ("sample", "vLLM for vllm did not start")):
        with pytest.raises(PeerError, match=message):
            runner.run(Config("vllm", decoding), "w3 w7", 0)
