"""vLLM as a `specdec bench` peer and as a server the studio can start: a real vLLM from .venv-vllm (`make
serving-peer`) on a free loopback port, serving our target's directory, stopped when done.

The bench asks it for the same prompt token ids our decoder reads (our chat template and tokenizer), greedy or
seeded, with the same token budget; its acceptance comes from the /metrics deltas around each request.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from engine.benchmark.peer_process import ended

if TYPE_CHECKING:
    from engine.remote import RemoteEngine

SERVING_PEER_INSTALL = "make serving-peer"
VENV = Path(os.environ.get("SPECDEC_VLLM_VENV", Path(__file__).resolve().parents[2] / ".venv-vllm"))
VLLM_METHODS = ("vllm", "vllm_ngram")
# vllm_ngram: vLLM's prompt lookup, its closest match to our context lookup (4 drafts from a 2- or 3-gram match)
NGRAM_CONFIG = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 2}
SPECULATIVE = {"vllm": None, "vllm_ngram": NGRAM_CONFIG}
READY_TIMEOUT_S = 900.0  # loading plus warm-up: 100-260 s here on 2 busy cores (measured); bounded either way
MAX_MODEL_LEN = 4096
KV_CACHE = "1G"  # set explicitly: vLLM's CPU default reserves 92 % of the memory node and refuses to start when
# other processes hold some of it. 1 GiB holds a 135M model's 4096 positions many times over.
SERVED_NAME = "target"
# vLLM on CPU keeps one core for its API server by default, which on a 2-core machine leaves the model one thread;
# ours runs on every core, so the server gets them all too (the prompt arrives as token ids: little to serve).
SERVER_ENV = {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
# After a request the server is idle once its processes use under 5 % of one core over 0.2 s
IDLE_POLL_S, IDLE_SHARE, IDLE_TIMEOUT_S, IDLE_FALLBACK_S = 0.2, 0.05, 10.0, 1.5


def vllm_python() -> Path | None:
    python = VENV / "bin" / "python"
    return python if python.exists() else None


def missing_reason() -> str | None:
    """Why vLLM cannot run here, in one line, or None."""
    if vllm_python() is None:
        return f"vLLM is not installed in {VENV.name}: {SERVING_PEER_INSTALL}"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve_command(model_dir: str, speculative: dict | None, port: int, dtype: str = "bfloat16",
                  python: str | None = None) -> list[str]:
    """The command line that serves `model_dir` as we do in the bench (also what `--help`-level docs show)."""
    # `python -m ...`: the `vllm` command looks up the distribution "vllm" and fails under vllm-cpu
    command = [python or str(vllm_python() or VENV / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
               "--model", model_dir, "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port),
               "--dtype", dtype, "--max-model-len", str(MAX_MODEL_LEN), "--kv-cache-memory-bytes", KV_CACHE,
               # like our decoder, which is reset before every timed reply: no prompt prefix kept between requests
               "--no-enable-prefix-caching",
               # the model's generation_config.json must not change the sampling we ask for
               "--generation-config", "vllm"]
    if speculative is not None:
        command += ["--speculative-config", json.dumps(speculative)]
    return command


class VllmServer:
    """A vLLM server process we own: `start()` waits until it answers, `stop()` ends its process group."""

    def __init__(self, model_dir: str, speculative: dict | None, dtype: str = "bfloat16"):
        self.model_dir = model_dir
        self.speculative = speculative
        self.dtype = dtype
        self.port: int | None = None
        self.process: subprocess.Popen | None = None
        self.log = tempfile.NamedTemporaryFile(prefix="specdec-vllm-", suffix=".log", delete=False)
        self.start_s: float | None = None  # launch → ready, measured
        self.client: RemoteEngine | None = None  # once ready

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, ready_timeout_s: float = READY_TIMEOUT_S) -> VllmServer:
        from engine.remote import RemoteEngine, RemoteError  # openai: 0.6 s of imports every `specdec` command paid

        reason = missing_reason()
        if reason:
            raise RemoteError(reason)
        self.port = free_port()
        launched = time.perf_counter()
        self.process = subprocess.Popen(
            serve_command(self.model_dir, self.speculative, self.port, self.dtype), stdout=self.log,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env={**os.environ, **SERVER_ENV},
            start_new_session=True,  # its own process group, so stop() ends the engine core and workers too
        )
        probe = RemoteEngine(self.base_url, SERVED_NAME, timeout_s=5.0)
        deadline = launched + ready_timeout_s
        while True:
            if self.process.poll() is not None:
                raise RemoteError(f"vLLM {ended(self.process.returncode)} while starting: "
                                  f"{self.last_log_line()} (log: {self.log.name})")
            try:
                probe.connect()
                break
            except RemoteError:
                pass
            if time.perf_counter() > deadline:
                self.stop()
                raise RemoteError(f"vLLM did not answer within {ready_timeout_s:g} s (log: {self.log.name})")
            time.sleep(1.0)
        self.start_s = time.perf_counter() - launched
        self.client = RemoteEngine(self.base_url, SERVED_NAME, timeout_s=300.0)
        return self

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.process.pid, sig)  # the API server, its engine core and workers
            except ProcessLookupError:
                return
            try:
                self.process.wait(timeout=wait_s)
                return
            except subprocess.TimeoutExpired:
                continue

    def cpu_s(self) -> float | None:
        """CPU seconds its process group has used so far (Linux /proc); None where that cannot be read."""
        if self.process is None:
            return None
        tick = os.sysconf("SC_CLK_TCK")
        total = 0.0
        try:
            entries = list(Path("/proc").iterdir())
        except OSError:
            return None
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # ended meanwhile
            if int(fields[2]) == self.process.pid:  # its process group (start_new_session made it the leader)
                total += (int(fields[11]) + int(fields[12])) / tick
        return total

    def wait_idle(self, timeout_s: float = IDLE_TIMEOUT_S) -> None:
        """Block until the server's processes stop using the CPU after a request (vLLM's engine and OpenMP threads
        keep spinning for a while after it answers), so that a run timed next is not sharing the cores with it.
        Where its CPU time cannot be read, waits as long as that spinning lasts."""
        previous = self.cpu_s()
        if previous is None:
            time.sleep(IDLE_FALLBACK_S)
            return
        deadline = time.perf_counter() + timeout_s
        while time.perf_counter() < deadline:
            time.sleep(IDLE_POLL_S)
            now = self.cpu_s()
            if now - previous < IDLE_SHARE * IDLE_POLL_S:
                return
            previous = now

    def last_log_line(self) -> str:
        self.log.flush()
        lines = [line for line in Path(self.log.name).read_text(errors="replace").splitlines() if line.strip()]
        errors = [line for line in lines if "Error" in line]
        return (errors or lines or ["(no output)"])[-1].strip()[-300:]

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def servable_dir(target_name: str) -> str | None:
    """What vLLM can load for our target: its directory (the embedded target's de-quantised copy) or hub id;
    None for a GGUF file."""
    from engine.models.loading import resolve

    resolved = resolve(target_name)
    return None if resolved.endswith(".gguf") else resolved


def unavailable(target_name: str) -> str | None:
    """Why the vllm rows cannot run for this target, in one line, or None."""
    reason = missing_reason()
    if reason is None and servable_dir(target_name) is None:
        reason = f"{target_name} is a GGUF file; vLLM serves the model's directory or hub id"
    return reason


def log(message: str) -> None:
    print(f"specdec bench: {message}", file=sys.stderr)
