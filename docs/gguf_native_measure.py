"""The measurements of docs/gguf-native.md that `specdec bench` does not make, on the embedded target.

    .venv/bin/python docs/gguf_native_measure.py rounding        # max |Δw| and top-1 agreement (bfloat16 scales)
    .venv/bin/python docs/gguf_native_measure.py load native bfloat16   # load time and RSS, one fresh process each
    .venv/bin/python docs/gguf_native_measure.py ar bfloat16     # AR tokens/s, native vs de-quantised, alternating
    .venv/bin/python docs/gguf_native_measure.py head 2          # LM head forms, per row count, with 2 threads
"""
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch
from gguf.quants import dequantize

from engine.decoding.decoder import Decoder
from engine.events import DecodeSettings
from engine.models import embedded, fast_llama, gguf_native
from engine.models.loading import load_model

PROMPTS = Path(__file__).with_name("gguf-native-prompts.txt").read_text().splitlines()
CPU = torch.device("cpu")


def rounding() -> dict:
    """Largest weight change from bfloat16 scales vs from a bfloat16 copy, and top-1 agreement with the float32
    de-quantised model, teacher-forced on its greedy answers to the evaluation prompts."""
    from engine.prompts import EVAL_PROMPTS

    _, tensors = gguf_native.read_tensors(embedded.gguf_path())
    out = {"max_dw_native": 0.0, "max_dw_bf16_copy": 0.0}
    for tensor in tensors.values():
        if tensor.tensor_type not in gguf_native.INT4_TYPES:
            continue
        cols, rows = tensor.shape
        q, s, z = gguf_native.int4_groups(tensor.data, tensor.tensor_type, rows, cols)
        exact = (q - 8.0) * np.repeat(s, 32, 1) + np.repeat(z, 32, 1)
        s16, z16 = (torch.from_numpy(a).bfloat16().float().numpy() for a in (s, z))
        native = (q - 8.0) * np.repeat(s16, 32, 1) + np.repeat(z16, 32, 1)
        copy = torch.from_numpy(exact.astype(np.float32)).bfloat16().float().numpy()
        out["max_dw_native"] = max(out["max_dw_native"], float(np.abs(native - exact).max()))
        out["max_dw_bf16_copy"] = max(out["max_dw_bf16_copy"], float(np.abs(copy - exact).max()))
    reference = Decoder(load_model("embedded", CPU, torch.float32, weights="dtype"))
    settings = DecodeSettings(mode="ar", greedy=True, max_new_tokens=64)
    models = {w: load_model("embedded", CPU, torch.bfloat16, weights=w).model for w in ("native", "dtype")}
    agree = {w: [0, 0] for w in models}
    with torch.inference_mode():
        for prompt in EVAL_PROMPTS:
            messages = [{"role": "user", "content": prompt}]
            ids = reference.chat_ids(messages)
            answer = [t.token_id for e in reference.generate(messages, settings) for t in e.emitted]
            full = torch.tensor([ids + answer])
            rows = slice(len(ids) - 1, len(ids) - 1 + len(answer))
            top = reference.target.model(input_ids=full).logits[0, rows].argmax(-1)
            for w, model in models.items():
                agree[w][0] += int((model(input_ids=full).logits[0, rows].float().argmax(-1) == top).sum())
                agree[w][1] += len(answer)
    out["top1_agreement"] = {w: f"{a}/{n}" for w, (a, n) in agree.items()}
    return out


def load(weights: str, dtype: str) -> dict:
    start = time.perf_counter()
    decoder = Decoder.load("embedded", None, "cpu", dtype, target_weights=weights)
    load_s = time.perf_counter() - start
    decoder.warm_up()  # the fast path arranges its weights on first use
    rss = int(Path("/proc/self/status").read_text().split("VmRSS:")[1].split()[0]) / 1024
    return {"weights": decoder.target.weights, "dtype": dtype, "load_s": round(load_s, 2), "rss_mb": round(rss),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def ar(dtype: str, reps: int = 3) -> dict:
    decoders = {w: Decoder.load("embedded", None, "cpu", dtype, target_weights=w) for w in ("native", "dtype")}
    settings = DecodeSettings(mode="ar", greedy=True, max_new_tokens=64)
    best: dict = {}
    for _ in range(reps):
        for i, prompt in enumerate(PROMPTS):
            for w, decoder in decoders.items():
                decoder.reset()
                start = time.perf_counter()
                n = sum(len(e.emitted) for e in decoder.generate([{"role": "user", "content": prompt}], settings))
                best[w, i] = min(best.get((w, i), (float("inf"), n)), (time.perf_counter() - start, n))
    prompts = range(len(PROMPTS))
    return {w: round(sum(best[w, i][1] for i in prompts) / sum(best[w, i][0] for i in prompts), 1) for w in decoders}


def head(threads: int, reps: int = 30) -> dict:
    torch.set_num_threads(threads)
    _, tensors = gguf_native.read_tensors(embedded.gguf_path())
    token_embd = tensors["token_embd.weight"]
    dense = torch.from_numpy(dequantize(token_embd.data, token_embd.tensor_type)).bfloat16()
    forms = {"int4 x2": gguf_native._linear(token_embd, torch.bfloat16).native(),
             "oneDNN bf16": fast_llama.linear(dense)}
    best: dict = {}
    for _ in range(reps):
        for rows in (1, 3, 7):
            x = torch.randn(rows, dense.shape[1]).bfloat16()
            for name, f in forms.items():
                start = time.perf_counter()
                f(x)
                best[f"{name}, {rows} rows"] = min(best.get(f"{name}, {rows} rows", 9.0), time.perf_counter() - start)
    return {k: f"{v * 1e3:.2f} ms" for k, v in best.items()}


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    result = {"rounding": rounding, "load": load, "ar": ar, "head": lambda t: head(int(t))}[command](*args)
    print(json.dumps(result, indent=1))
