"""llama.cpp's own programs as bench peers: `llama-bench` (its standard plain-decoding figure, tg N) and
`llama-speculative-simple` (its draft-model speculation), built by `make peers` from the llama.cpp sources inside
the llama-cpp-python sdist. Both are run as subprocesses and read from their own output; the rows are greedy
only (llama-speculative-simple samples with its own sampler chain, not comparable to ours at T > 0).
"""
from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from engine.benchmark import peer_process
from engine.benchmark.peer_process import PeerError, ended

METHODS = ("llama_bench", "llama_spec")
BIN = Path(__file__).resolve().parents[2] / ".peers" / "llama.cpp" / "bin"
LLAMA_BENCH, LLAMA_SPECULATIVE = BIN / "llama-bench", BIN / "llama-speculative-simple"
DRAFT_MAX = 3  # llama-speculative-simple's --spec-draft-n-max: its best of 3 and 8 with this pair (issue 49)


def missing() -> str | None:
    """Why the binaries cannot run (None when they can)."""
    absent = [p.name for p in (LLAMA_BENCH, LLAMA_SPECULATIVE) if not p.is_file()]
    return f"{', '.join(absent)} not built (make peers)" if absent else None


def _run(command: list[str]) -> str:
    name = Path(command[0]).name
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=peer_process.TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise PeerError(f"{name} did not finish within {peer_process.TIMEOUT_S:g} s (stopped)") from None
    except OSError as exc:
        raise PeerError(f"{name} could not run: {exc}") from None
    if result.returncode:
        last = (result.stderr.strip().splitlines() or ["no message"])[-1]
        raise PeerError(f"{name} {ended(result.returncode)}: {last}")
    return result.stdout + result.stderr


def plain_tokens_per_s(gguf: Path, new_tokens: int, threads: int, repeats: int = 3) -> float:
    """llama-bench's tg `new_tokens` figure: tokens/s of plain decoding on an empty context."""
    out = _run([str(LLAMA_BENCH), "-m", str(gguf), "-t", str(threads), "-p", "0", "-n", str(new_tokens),
                "-r", str(repeats), "-o", "json"])
    rows = json.loads(out[out.index("["):out.rindex("]") + 1])
    return float(next(r["avg_ts"] for r in rows if r.get("n_gen") == new_tokens))


@dataclass(frozen=True)
class Speculated:
    tokens: int
    seconds: float
    drafted: int
    accepted: int


def speculate(target: Path, draft: Path, prompt: str, new_tokens: int, threads: int) -> Speculated:
    """One greedy reply to `prompt` (already in the chat template) by llama-speculative-simple, as it reports it:
    the decoding time excludes its prompt's."""
    out = _run([str(LLAMA_SPECULATIVE), "-m", str(target), "-md", str(draft), "--spec-type", "draft-simple",
                "--spec-draft-n-max", str(DRAFT_MAX), "-t", str(threads), "-td", str(threads), "--temp", "0",
                "--top-k", "1", "-n", str(new_tokens), "-c", "4096", "-p", prompt])
    decoded = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", out)
    drafted, accepted = re.search(r"n_drafted = (\d+)", out), re.search(r"n_accept\s+= (\d+)", out)
    if not (decoded and drafted and accepted):
        raise PeerError("llama-speculative-simple printed no decoding summary")
    return Speculated(int(decoded.group(1)), float(decoded.group(2)), int(drafted.group(1)),
                      int(accepted.group(1)))
