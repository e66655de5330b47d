"""`specdec train-draft`: the target writes answers to the project's prompts, a small draft learns its distributions.

Recipe (all from one seed): 1) the target answers templated chat prompts, greedy and sampled, single- and
multi-turn (one single-threaded process per core), and we keep its top-k next-token distribution at every
generated position; 2) the draft is a few of the target's own decoder layers with the target's
embeddings/LM head shared and frozen; 3) it is trained to match the target's distributions (soft
cross-entropy = KL up to a constant) over a frequency-ranked draft vocabulary; 4) only the trained tensors,
the draft vocabulary and the record of the run go to assets/.
"""
from __future__ import annotations

import json
import math
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tqdm import tqdm
from transformers import Cache, DynamicLayer

from engine.models.embedded import DRAFT_VOCAB_FILE, SHARED_TENSORS
from engine.models.loading import LoadedModel
from engine.prompts import follow_up, training_prompts

TOP_K = 16  # teacher probabilities kept per position: covers nearly all of p's mass for a 135M chat model


@dataclass
class Sample:
    ids: list[int]  # prompt + response
    n_prompt: int
    teacher_ids: torch.Tensor  # (n_response, TOP_K) int32: the target's top-k tokens at each response position
    teacher_probs: torch.Tensor  # (n_response, TOP_K) float16
    greedy: bool


def save_batch(samples: list[Sample], path: Path) -> None:
    """A batch of samples as safetensors: tensors and JSON metadata only, so a file planted in the working folder
    can hold wrong numbers but never code (a pickle runs whatever it carries when loaded)."""
    tensors = {}
    for i, sample in enumerate(samples):
        tensors[f"{i}.ids"] = torch.tensor(sample.ids, dtype=torch.int64)
        tensors[f"{i}.teacher_ids"] = sample.teacher_ids.contiguous()
        tensors[f"{i}.teacher_probs"] = sample.teacher_probs.contiguous()
    meta = {"n_prompt": [s.n_prompt for s in samples], "greedy": [s.greedy for s in samples]}
    save_file(tensors, path, metadata={"samples": json.dumps(meta)})


def load_batch(path: Path) -> list[Sample]:
    with safe_open(path, "pt") as f:
        meta = json.loads(f.metadata()["samples"])
        tensors = {name: f.get_tensor(name) for name in f.keys()}
    return [Sample(tensors[f"{i}.ids"].tolist(), n_prompt, tensors[f"{i}.teacher_ids"], tensors[f"{i}.teacher_probs"],
                   greedy) for i, (n_prompt, greedy) in enumerate(zip(meta["n_prompt"], meta["greedy"]))]


def _chat_ids(tokenizer, messages: list[dict]) -> list[int]:
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))


@torch.no_grad()
def generate_batch(target: LoadedModel, prompts: list[list[int]], *, greedy: bool, temperature: float,
                   max_new_tokens: int) -> list[Sample]:
    """Answer a batch of tokenised prompts with the target, keeping its top-k distribution at each step.

    A plain decode loop rather than `model.generate`: the top-k is taken step by step instead of from a stacked
    (batch, steps, vocab) logits tensor, and the LM head sees 2-d hidden states (generate's first step sends it
    a strided (batch, 1, hidden) slice, which matmul serves by copying the head once per row: 7 s a batch)."""
    tok, model, device = target.tokenizer, target.model, target.device
    eos, pad = tok.eos_token_id, tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long, device=device)
    attention = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):  # left padding: every row's next token is in the last column
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        attention[row, width - len(prompt):] = 1
    positions = (attention.cumsum(-1) - 1).clamp_min(0)
    head = model.get_output_embeddings().weight
    cache = Cache(layers=[_PreallocatedLayer(width + max_new_tokens) for _ in range(model.config.num_hidden_layers)])
    tokens, top_ids, top_probs = [], [], []
    finished = torch.zeros(len(prompts), dtype=torch.bool, device=device)
    for _ in range(max_new_tokens):
        hidden = model.model(input_ids=ids, attention_mask=attention, position_ids=positions, cache=cache,
                             use_cache=True).last_hidden_state[:, -1]
        logits = (hidden @ head.T).float()
        probs, top = logits.softmax(-1).topk(TOP_K, dim=-1)
        top_ids.append(top.to(torch.int32))
        top_probs.append(probs.to(torch.float16))
        if greedy:
            ids = logits.argmax(-1, keepdim=True)
        else:
            # As generate drew, not engine.sampling's CDF sampler: the recipe then reproduces the shipped data.
            ids = torch.multinomial((logits / temperature).softmax(-1), 1)
        ids = ids.masked_fill(finished[:, None], pad)
        tokens.append(ids[:, 0])
        finished |= ids[:, 0] == eos
        if finished.all():
            break
        attention = torch.cat([attention, torch.ones_like(ids)], dim=1)
        positions = positions[:, -1:] + 1
    tokens, top_ids, top_probs = (torch.stack(steps, 1).cpu() for steps in (tokens, top_ids, top_probs))
    samples = []
    for row, prompt in enumerate(prompts):
        response = tokens[row].tolist()
        n = response.index(eos) + 1 if eos in response else len(response)
        samples.append(Sample(prompt + response[:n], len(prompt), top_ids[row, :n], top_probs[row, :n], greedy))
    return samples


class _PreallocatedLayer(DynamicLayer):
    """A DynamicLayer that writes into a buffer of the final length: concatenating copies the whole cache every
    step, which was a third of batched answering."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.is_initialized, self.device, self.length = True, key_states.device, 0
            shape = (*key_states.shape[:2], self.capacity, key_states.shape[3])
            self.buffers = (key_states.new_empty(shape), value_states.new_empty(shape))
        end = self.length + key_states.shape[-2]
        self.buffers[0][:, :, self.length:end], self.buffers[1][:, :, self.length:end] = key_states, value_states
        self.length = end
        self.keys, self.values = self.buffers[0][:, :, :end], self.buffers[1][:, :, :end]
        return self.keys, self.values


def _answer_batches(target: LoadedModel, n_prompts: int, *, seed: int, batch_size: int, max_new_tokens: int,
                    temperature: float, multi_turn_fraction: float, chunk_dir: Path, progress: bool = True) -> None:
    """Answer every batch nobody has claimed yet: two greedy batches to one sampled, and after each batch a share of
    its conversations continues to a second turn. Every batch depends only on (seed, batch index) and is saved as
    it completes, so several processes can share the work (each claims a batch before answering it)."""
    conversations = training_prompts(n_prompts, seed)
    for index in tqdm(range(math.ceil(len(conversations) / batch_size)), desc="target answers", unit="batch",
                      disable=not progress):
        chunk = chunk_dir / f"batch-{index:04d}.safetensors"
        try:
            os.close(os.open(chunk.with_suffix(".claim"), os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            continue  # answered already, or being answered by another process
        rng = random.Random(seed * 100_003 + index)
        torch.manual_seed(seed * 100_003 + index)
        greedy = index % 3 != 2  # the greedy α bar is the harder one
        batch = sorted(conversations[index * batch_size:(index + 1) * batch_size],
                       key=lambda c: len(_chat_ids(target.tokenizer, c)))
        new = generate_batch(target, [_chat_ids(target.tokenizer, c) for c in batch], greedy=greedy,
                             temperature=temperature, max_new_tokens=max_new_tokens)
        continued = rng.sample(range(len(batch)), int(len(batch) * multi_turn_fraction))
        second = [batch[i] + [{"role": "assistant", "content": target.tokenizer.decode(
                      new[i].ids[new[i].n_prompt:], skip_special_tokens=True)},
                  {"role": "user", "content": follow_up(rng)}] for i in continued]
        if second:
            new += generate_batch(target, [_chat_ids(target.tokenizer, c) for c in second], greedy=greedy,
                                  temperature=temperature, max_new_tokens=max_new_tokens)
        save_batch(new, chunk.with_suffix(".tmp"))
        chunk.with_suffix(".tmp").rename(chunk)


def _pin_to_core(core: int) -> None:
    """One single-threaded generator per core: two multi-threaded torch processes sharing two cores slow each
    other down several-fold (OpenMP threads spin while waiting for each other)."""
    torch.set_num_threads(1)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core % os.cpu_count()})


def _generation_worker(core: int, target_path: str, dtype: torch.dtype, n_prompts: int, kwargs: dict) -> None:
    from engine.models.loading import load_model

    _pin_to_core(core)
    _answer_batches(load_model(target_path, torch.device("cpu"), dtype), n_prompts, progress=False, **kwargs)


def generate_data(target: LoadedModel, n_prompts: int, workers: int, *, chunk_dir: Path, **kwargs) -> list[Sample]:
    """The training set, answered by `workers` processes (this one included) that divide the batches between them.
    Batches saved by an earlier run are reused, so an interrupted run resumes, and any prefix of batches is
    itself a reproducible data set."""
    import multiprocessing

    chunk_dir.mkdir(parents=True, exist_ok=True)
    for claim in chunk_dir.glob("*.claim"):  # claimed by an interrupted run but never saved: answer it again
        if not claim.with_suffix(".safetensors").exists():
            claim.unlink()
    kwargs["chunk_dir"] = chunk_dir
    context = multiprocessing.get_context("spawn")
    helpers = [context.Process(target=_generation_worker, daemon=True,
                               args=(core, str(target.path), target.model.dtype, n_prompts, kwargs))
               for core in range(1, workers)]
    for helper in helpers:
        helper.start()
    threads, affinity = torch.get_num_threads(), os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    _pin_to_core(0)
    try:
        _answer_batches(target, n_prompts, **kwargs)
    finally:
        for helper in helpers:
            helper.join()
        torch.set_num_threads(threads)
        if affinity is not None:
            os.sched_setaffinity(0, affinity)
    n_batches = math.ceil(n_prompts / kwargs["batch_size"])
    chunks = [chunk_dir / f"batch-{index:04d}.safetensors" for index in range(n_batches)]
    missing = [chunk.name for chunk in chunks if not chunk.exists()]
    if missing:
        raise RuntimeError(f"a generation worker failed: {len(missing)} batches unanswered ({missing[0]}, ...)")
    return [sample for chunk in chunks for sample in load_batch(chunk)]


def draft_vocabulary(samples: list[Sample], size: int, always: list[int]) -> list[int]:
    """The `size` tokens the target emits most often (FR-Spec's frequency-ranked draft vocabulary)."""
    counts = torch.zeros(int(max(max(s.ids) for s in samples)) + 1, dtype=torch.long)
    for s in samples:
        counts += torch.bincount(torch.tensor(s.ids[s.n_prompt:]), minlength=len(counts))[: len(counts)]
    ranked = [i for i in counts.argsort(descending=True).tolist() if i not in always]
    return sorted(always + ranked[: size - len(always)])


def build_draft(target_model, layers: tuple[int, ...]):
    """A normal transformers model: the target's config with fewer layers, initialised from the chosen ones."""
    config = target_model.config.__class__.from_dict(target_model.config.to_dict())
    config.num_hidden_layers = len(layers)
    if getattr(config, "layer_types", None):
        config.layer_types = [config.layer_types[i] for i in layers]
    draft = type(target_model)(config)
    source = target_model.state_dict()
    state = {}
    for name in draft.state_dict():
        if name.startswith("model.layers."):
            _, _, index, rest = name.split(".", 3)
            state[name] = source[f"model.layers.{layers[int(index)]}.{rest}"]
        else:
            state[name] = source[name]
    draft.load_state_dict(state)
    draft.to(torch.float32)
    draft.get_input_embeddings().weight.requires_grad_(False)
    draft.get_output_embeddings().weight.requires_grad_(False)
    return draft


def _batches(samples: list[Sample], tokens_per_batch: int, rng: random.Random):
    """Length-bucketed batches of about `tokens_per_batch` tokens, in a random order."""
    order = sorted(range(len(samples)), key=lambda i: len(samples[i].ids))
    batches, current, width = [], [], 0
    for i in order:
        width = max(width, len(samples[i].ids))
        if current and width * (len(current) + 1) > tokens_per_batch:
            batches.append(current)
            current, width = [], len(samples[i].ids)
        current.append(i)
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


def _loss_and_agreement(draft, samples: list[Sample], vocab_weight: torch.Tensor, to_draft_vocab: torch.Tensor):
    """Soft cross-entropy against the target's top-k (renormalised on the draft vocabulary) + top-1 agreement."""
    width = max(len(s.ids) for s in samples)
    ids = torch.zeros((len(samples), width), dtype=torch.long)
    for row, s in enumerate(samples):
        ids[row, : len(s.ids)] = torch.tensor(s.ids)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = draft.model(input_ids=ids).last_hidden_state  # (batch, width, hidden); right padding is causal-safe
        rows = torch.cat([torch.full((len(s.ids) - s.n_prompt,), r) for r, s in enumerate(samples)])
        cols = torch.cat([torch.arange(s.n_prompt - 1, len(s.ids) - 1) for s in samples])
        logits = hidden[rows, cols] @ vocab_weight.T  # (positions, draft_vocab)
    log_q = logits.float().log_softmax(-1)
    teacher_ids = to_draft_vocab[torch.cat([s.teacher_ids for s in samples]).long()]  # -1: outside draft vocab
    teacher_probs = torch.cat([s.teacher_probs for s in samples]).float() * (teacher_ids >= 0)
    teacher_probs = teacher_probs / teacher_probs.sum(-1, keepdim=True).clamp_min(1e-9)
    loss = -(teacher_probs * log_q.gather(1, teacher_ids.clamp_min(0))).sum(-1).mean()
    agree = (log_q.argmax(-1) == teacher_ids[:, 0]).float().mean()
    return loss, agree.item()


def train(target: LoadedModel, samples: list[Sample], *, layers: tuple[int, ...], vocab_size: int, steps: int,
          lr: float, tokens_per_batch: int, seed: int, log) -> tuple[torch.nn.Module, list[int], dict]:
    torch.manual_seed(seed)
    rng = random.Random(seed)
    greedy_idx = [i for i, s in enumerate(samples) if s.greedy]
    held_out = set(rng.sample(greedy_idx, max(8, len(samples) // 40)))
    train_set = [s for i, s in enumerate(samples) if i not in held_out]
    eval_set = [samples[i] for i in sorted(held_out)]
    tok = target.tokenizer
    vocab = draft_vocabulary(train_set, vocab_size, always=sorted(set(tok.all_special_ids)))
    to_draft_vocab = torch.full((target.vocab_size,), -1, dtype=torch.long)
    to_draft_vocab[torch.tensor(vocab)] = torch.arange(len(vocab))
    resp = torch.cat([torch.tensor(s.ids[s.n_prompt:]) for s in train_set])
    coverage = (to_draft_vocab[resp] >= 0).float().mean().item()
    log(f"draft vocabulary: {len(vocab)} tokens cover {coverage:.4f} of the target's emitted tokens")

    draft = build_draft(target.model.float(), layers)
    vocab_weight = draft.get_output_embeddings().weight[torch.tensor(vocab)].detach()
    params = [p for p in draft.parameters() if p.requires_grad]
    optim = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, betas=(0.9, 0.98))
    warmup = max(1, steps // 30)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optim, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))

    def evaluate() -> tuple[float, float]:
        draft.eval()
        with torch.no_grad():
            parts = [_loss_and_agreement(draft, eval_set[i:i + 8], vocab_weight, to_draft_vocab)
                     for i in range(0, len(eval_set), 8)]
        draft.train()
        return sum(p[0].item() for p in parts) / len(parts), sum(p[1] for p in parts) / len(parts)

    history = []
    loss0, agree0 = evaluate()
    log(f"step 0: held-out loss {loss0:.3f}, top-1 agreement {agree0:.3f}")
    history.append({"step": 0, "loss": loss0, "agreement": agree0})
    draft.train()
    batches, step, started = [], 0, time.time()
    bar = tqdm(total=steps, desc="distilling", unit="step")
    while step < steps:
        if not batches:
            batches = _batches(train_set, tokens_per_batch, rng)
        batch = [train_set[i] for i in batches.pop()]
        loss, agree = _loss_and_agreement(draft, batch, vocab_weight, to_draft_vocab)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optim.step()
        schedule.step()
        step += 1
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}", agree=f"{agree:.3f}")
        if step % max(1, steps // 10) == 0 or step == steps:
            eval_loss, eval_agree = evaluate()
            log(f"step {step}: train loss {loss.item():.3f}, held-out loss {eval_loss:.3f}, "
                f"top-1 agreement {eval_agree:.3f}, {time.time() - started:.0f}s")
            history.append({"step": step, "loss": eval_loss, "agreement": eval_agree})
    bar.close()
    return draft, vocab, {"coverage": coverage, "history": history, "train_s": time.time() - started,
                          "held_out_samples": len(eval_set)}


def save_assets(draft, vocab: list[int], record: dict, out: Path) -> None:
    """Only what training produced: tensors shared with the target are left out and re-attached at set-up."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    draft.config.save_pretrained(out)
    tensors = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in draft.state_dict().items()
               if k not in SHARED_TENSORS}
    save_file(tensors, out / "weights.safetensors", metadata={"format": "pt"})
    (out / DRAFT_VOCAB_FILE).write_text(json.dumps(vocab))
    (out / "recipe.json").write_text(json.dumps(record, indent=2))


def _prompt_set_id(seed: int, batch_size: int) -> str:
    """Names the saved answers after the prompts they answer, so editing the templates never reuses stale ones."""
    import hashlib

    return hashlib.sha1(json.dumps(training_prompts(batch_size, seed)).encode()).hexdigest()[:10]


def run_recipe(*, out: Path, workdir: Path, n_prompts: int = 4000, steps: int = 1400, seed: int = 0,
               layers: tuple[int, ...] = (0, 1, 18, 29), vocab_size: int = 8192, lr: float = 5e-4,
               tokens_per_batch: int = 4096, batch_size: int = 48, max_new_tokens: int = 128,
               temperature: float = 0.7, multi_turn_fraction: float = 0.25, workers: int = 1) -> dict:
    """The whole recipe, resumable after data generation (the data is cached in `workdir`)."""
    from engine.models import embedded
    from engine.models.loading import load_model

    workdir.mkdir(parents=True, exist_ok=True)
    log_file = (workdir / "train-draft.log").open("a")

    def log(message: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {message}"
        tqdm.write(line)
        log_file.write(line + "\n")
        log_file.flush()

    started = time.time()
    target = load_model("embedded", torch.device("cpu"), torch.bfloat16)
    log(f"1) the target answers {n_prompts} prompts (+{multi_turn_fraction:.0%} second turns; saved batches reused)")
    samples = generate_data(
        target, n_prompts, workers, seed=seed, batch_size=batch_size, max_new_tokens=max_new_tokens,
        temperature=temperature, multi_turn_fraction=multi_turn_fraction,
        chunk_dir=workdir / f"answers-{_prompt_set_id(seed, batch_size)}-bs{batch_size}-t{max_new_tokens}")
    n_tokens = sum(len(s.ids) - s.n_prompt for s in samples)
    data_s = time.time() - started
    log(f"   {len(samples)} answers, {n_tokens} response tokens, {data_s:.0f}s so far")
    log(f"2) distilling a {len(layers)}-layer draft (layers {layers}) for {steps} steps")
    draft, vocab, result = train(target, samples, layers=layers, vocab_size=vocab_size, steps=steps, lr=lr,
                                 tokens_per_batch=tokens_per_batch, seed=seed, log=log)
    record = {
        "recipe": {"seed": seed, "n_prompts": n_prompts, "layers": list(layers), "draft_vocab": vocab_size,
                   "steps": steps, "lr": lr, "tokens_per_batch": tokens_per_batch, "max_new_tokens": max_new_tokens,
                   "temperature": temperature, "multi_turn_fraction": multi_turn_fraction, "teacher_top_k": TOP_K,
                   "workers": workers},
        # Batches answered by an earlier (interrupted) run are reused, so this counts only this run's share.
        "data": {"answers": len(samples), "response_tokens": n_tokens, "data_s_this_run": round(data_s)},
        "result": result, "total_s": round(time.time() - started), "target": embedded.GGUF_NAME,
    }
    save_assets(draft, vocab, record, out)
    log(f"3) saved the draft to {out} ({record['total_s']}s in all)")
    return record
