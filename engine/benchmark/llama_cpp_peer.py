"""llama.cpp through llama-cpp-python as a bench peer, in a process of its own: a natively built llama.cpp can die
of an illegal instruction as it loads a model (on some machines with AMX), and that must cost its rows only.

`start` launches `python -m engine.benchmark.llama_cpp_peer GGUF THREADS [--lookup]`, which loads the model and
says {"ready": true}; each request line then gets one reply line: the prompt's token ids (our chat template and
tokenizer, so the same ids as ours) in, the generated ids and the generation's wall time out. This module imports
nothing heavy: the worker loads llama_cpp alone, never torch.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from engine.benchmark.peer_process import PeerProcess

NAME = "llama-cpp-python"
N_CTX = 4096


def start(gguf: Path, threads: int, lookup: bool) -> PeerProcess:
    """The worker for `gguf`, launched: `wait_loaded` before its first reply."""
    return PeerProcess(NAME, [sys.executable, "-m", __name__, str(gguf), str(threads)]
                       + (["--lookup"] if lookup else []))


def wait_loaded(peer: PeerProcess, gguf: Path) -> None:
    """Return once the worker has loaded `gguf`; raises PeerError where it could not."""
    peer.read(f"while loading {gguf.name}")


def reply(peer: PeerProcess, prompt: list[int], seed: int, temperature: float, max_new: int,
          stop_ids: set[int]) -> tuple[list[int], float]:
    """One reply (temperature 0: greedy) and its generation time, measured in the worker."""
    answer = peer.ask({"prompt": prompt, "seed": seed, "temperature": temperature, "max_new": max_new,
                       "stop": sorted(stop_ids)}, f"while replying to a {len(prompt)}-token prompt")
    return answer["tokens"], answer["wall_s"]


def _generate(llm, prompt: list[int], seed: int, temperature: float, max_new: int, stop: list[int]) -> dict:
    llm.reset()  # no KV prefix kept from the previous run, as our decoder is reset
    llm.set_seed(seed)
    # plain sampling: no top-k, top-p, min-p, typical-p or repeat penalty, as our DecodeSettings in the bench
    sampling = dict(temp=0.0) if temperature == 0 else dict(temp=temperature, top_k=0, top_p=1.0)
    tokens: list[int] = []
    started = time.perf_counter()
    for token in llm.generate(prompt, min_p=0.0, typical_p=1.0, repeat_penalty=1.0, reset=True, **sampling):
        tokens.append(token)
        if token in stop or len(tokens) >= max_new:
            break
    return {"tokens": tokens, "wall_s": time.perf_counter() - started}


def main(argv: list[str]) -> None:
    """The worker: llama.cpp on the GGUF with that many threads; `--lookup` adds its prompt lookup drafting
    (llama-cpp-python's defaults: 10 drafts from 2-gram matches)."""
    gguf, threads, lookup = argv[0], int(argv[1]), "--lookup" in argv[2:]
    # Answers go out on a copy of stdout; stdout itself becomes stderr, so nothing the library prints can
    # garble them
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    llm = Llama(model_path=gguf, n_ctx=N_CTX, n_threads=threads,
                draft_model=LlamaPromptLookupDecoding() if lookup else None, verbose=False)
    channel.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        channel.write(json.dumps(_generate(llm, **json.loads(line))) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
