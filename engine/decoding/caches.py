"""A model with its KV cache and the token ids that cache holds: the one owner of rollback.

Llama-family models run on `engine.fast_llama` (a preallocated cache rolled back by moving its length), on a GPU
on `engine.graphed` (the same forward in captured CUDA graphs); any other model keeps transformers' forward with a
DynamicCache, whose `crop(-n)` drops the last n positions. The
ids kept beside the cache let a new chat turn reuse the longest cached prefix of the conversation.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import torch
from transformers import DynamicCache, PreTrainedModel

from engine.kernels import q4q8
from engine.models import fast_llama, gguf_native, graphed
from engine.models.loading import synchronize

STATIC_DEVICES = ("cuda",)  # where Llama-family models run on graphed.StaticLlama (tests add "cpu")
# Stop is heard between prefill chunks, so a chunk is sized to take at most this long at the speed the previous
# chunks were read at on this machine, whatever its CPU and its load.
PREFILL_CHUNK_S = 0.3
# Chunk sizes are powers of two up to MAX_CHUNK (activations stay bounded), and a chunk ends at a multiple of its
# size, so AR and speculative mode cut a prompt at the same positions unless the machine's speed changed between
# them. FIRST_CHUNK is read before anything was timed.
MAX_CHUNK, FIRST_CHUNK = 1024, 8
# Positions per step where the draft catches up on its own (engine.decoding.decoder, not timed here), and the
# shortest prompt the CLI draws a reading bar for.
PREFILL_CHUNK = 256


def chunk_size(seconds_per_position: float | None) -> int:
    """The largest power of two up to MAX_CHUNK expected to be read within PREFILL_CHUNK_S (1 where even one
    position takes longer)."""
    if seconds_per_position is None:
        return FIRST_CHUNK
    fits = PREFILL_CHUNK_S / max(seconds_per_position, 1e-12)
    size = 1
    while size * 2 <= min(fits, MAX_CHUNK):
        size *= 2
    return size


class TransformersCache:
    """transformers' own forward: the fallback for architectures the fast path does not cover."""

    def __init__(self, model: PreTrainedModel, head: torch.Tensor | None):
        self.model = model
        self.head = head  # None: the model's own LM head
        self.cache = DynamicCache(config=model.config)
        # transformers' attention over a block is not the attention of single steps in the last bits.
        self.batch_invariant = False

    @property
    def length(self) -> int:
        return self.cache.get_seq_length()

    def crop(self, length: int) -> None:
        if length < self.length:
            self.cache.crop(length - self.length)

    def forward(self, ids: torch.Tensor, keep: int) -> torch.Tensor:
        if self.head is None:
            return self.model(input_ids=ids[None], cache=self.cache, use_cache=True, logits_to_keep=keep).logits[0].float()
        hidden = self.model.get_decoder()(input_ids=ids[None], cache=self.cache, use_cache=True).last_hidden_state
        return (hidden[0, -keep:] @ self.head.T).float()


class CachedModel:
    def __init__(self, model: PreTrainedModel, vocab_size: int, draft_vocab: list[int] | None = None, *,
                 int8: bool = False):
        """`int8` stores the weights compactly on the fast path (drafts only: it changes the model's distribution):
        dense weights as int8, a GGUF's blocks as 4-bit."""
        self.model = model
        self.device = model.device  # read once: transformers finds it by walking the parameters
        self.vocab_size = vocab_size  # logits beyond this (padding rows) are dropped
        self.tokens: list[int] = []
        # A draft vocabulary (FR-Spec) scores only its frequent tokens: a smaller LM head, same model.
        self.draft_vocab = None if draft_vocab is None else torch.tensor(draft_vocab, device=model.device)
        output = model.get_output_embeddings()
        if isinstance(output, gguf_native.NativeLinear):  # a native GGUF head: its kernel, over the draft vocabulary
            head = output.native()
            if self.draft_vocab is not None and isinstance(head, q4q8.Q4Q8Weight):
                head = head.rows(self.draft_vocab.cpu())
        else:
            head = output.weight.detach() if self.draft_vocab is None else output.weight[self.draft_vocab].detach()
        if fast_llama.supports(model) and fast_llama.plain(model) and self.device.type in STATIC_DEVICES:
            self.cache = graphed.StaticLlama(model, head, graphs=self.device.type == "cuda")
        elif fast_llama.supports(model):
            self.cache = fast_llama.FastLlama(model, head, int8=int8)
        else:
            self.cache = TransformersCache(model, None if self.draft_vocab is None else head)
        self.clock = time.perf_counter  # times prefill chunks (a test may give it a machine of known speed)
        # Of the last prefill chunk. A short one also times the call's overhead: the next chunk is then sized
        # low, and each that takes under half of PREFILL_CHUNK_S doubles the one after it.
        self.seconds_per_position: float | None = None
        self.last_chunk: tuple[int, float] | None = None  # (positions, seconds) of the last prefill chunk

    def stop_read_in(self, stop: threading.Event | None) -> None:
        """From now on a prompt's read-in block ends between two layers once `stop` is set (q4q8.ReadInStopped):
        where a model reads prompts in by matrix products a block takes seconds (None: blocks run to their end)."""
        if isinstance(self.cache, fast_llama.FastLlama):
            self.cache.stop_read_in = stop

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def compact_weights(self) -> str | None:
        return self.cache.compact_weights if isinstance(self.cache, fast_llama.FastLlama) else None

    @property
    def batch_invariant(self) -> bool:
        """Whether a position's logits are the same bits fed alone or in a block (then greedy speculative
        decoding returns exactly greedy AR's tokens)."""
        return self.cache.batch_invariant

    def forward(self, new_tokens: list[int], keep: int = 1) -> torch.Tensor:
        """Feed `new_tokens` after the cached ones; return float logits (keep, vocab) of the last `keep` positions."""
        return self.to_vocab(self.forward_rows(new_tokens, keep), float("-inf"))

    @torch.inference_mode()
    def forward_rows(self, new_tokens: list[int], keep: int = 1) -> torch.Tensor:
        """As `forward`, over the rows the head scores: the draft vocabulary if there is one, which is cheaper to
        warp and sample from than the whole vocabulary (`token_id` maps a row back)."""
        logits = self.feed(torch.tensor(new_tokens, dtype=torch.long, device=self.device), keep)
        self.tokens.extend(new_tokens)
        return logits

    @property
    def on_device(self) -> bool:
        """Whether a step's ids can come from the device's own tensors without a wait (`feed`): on a GPU, where
        reading a token back to the host stalls the launches behind it."""
        return isinstance(self.cache, graphed.StaticLlama)

    @torch.inference_mode()
    def feed(self, ids: torch.Tensor, keep: int = 1) -> torch.Tensor:
        """As `forward_rows` for ids already on the device, which are not read here: the caller adds them to
        `tokens` once it has them on the host."""
        logits = self.cache.forward(ids, keep)
        return logits if self.draft_vocab is not None else logits[:, : self.vocab_size]

    def expect(self, positions: int) -> None:
        """The reply about to be decoded ends within `positions` (graphed.StaticLlama reads one span for it)."""
        if self.on_device:
            self.cache.expect(positions)

    def to_vocab(self, rows: torch.Tensor, fill: float) -> torch.Tensor:
        """Logits or probabilities over the head's rows, spread over the whole vocabulary."""
        if self.draft_vocab is None:
            return rows
        spread = torch.full((rows.shape[0], self.vocab_size), fill, device=rows.device)
        spread[:, self.draft_vocab] = rows
        return spread

    def token_id(self, row: int) -> int:
        return row if self.draft_vocab is None else int(self.draft_vocab[row])

    def rollback(self, length: int) -> None:
        """Forget every position from `length` on."""
        extra = len(self.tokens) - length
        if extra < 0:
            raise ValueError(f"cannot roll back to {length}: only {len(self.tokens)} tokens are cached")
        if extra:
            self.cache.crop(length)
            del self.tokens[length:]
        assert self.cache.length == len(self.tokens), "KV cache and token ids disagree"

    def common_prefix(self, ids: list[int]) -> int:
        n = 0
        for cached, new in zip(self.tokens, ids):
            if cached != new:
                break
            n += 1
        return n

    def prefill(self, ids: list[int]) -> None:
        """Make the cache hold ids[:-1], reusing the longest cached prefix: the last id is fed by the next step."""
        for _ in self.prefill_chunks(ids):
            pass

    def prefill_chunks(self, ids: list[int]) -> Iterator[int]:
        """`prefill` a chunk per forward, yielding the cached length after each, so a caller can stop between
        chunks: each is sized by `chunk_size` from the speed of the chunks before it (in this reply or an
        earlier one), or fixed where the model reads prompts in by a matrix product (its numbers depend on the
        chunk), and ends at a multiple of its size."""
        self.rollback(min(self.common_prefix(ids), len(ids) - 1))
        fixed = getattr(self.cache, "read_in_rows", None)
        while (start := len(self.tokens)) < len(ids) - 1:
            size = fixed or chunk_size(self.seconds_per_position)
            end = min((start // size + 1) * size, len(ids) - 1)
            began = self.clock()
            self.forward(ids[start:end])
            synchronize(self.device)
            seconds = self.clock() - began
            self.last_chunk = (end - start, seconds)
            self.seconds_per_position = seconds / (end - start)
            yield end

    def reset(self) -> None:
        self.rollback(0)
