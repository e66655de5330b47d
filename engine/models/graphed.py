"""The decode-time forward on a GPU: a static KV cache, positions as device tensors, and the forward of a decoding
block captured once as a CUDA graph and replayed.

A decode step of a 4B model on an H200 launches about a thousand small kernels; launched one by one from Python
they took 21 ms where reading the model's 8 GB takes 2 (issue 50). A captured graph launches them all at once.
Capture fixes every shape and address, so here: the cache is allocated at a capacity that only grows by doubling
(the graphs are captured again then, which is rare); attention reads a fixed span of it (a power of two of
positions, one graph per span) under a mask built on the device from the block's first position; new keys and
values go in with `index_copy_` at those positions. Rolling back moves the length on the host and nothing else.
A reply's span is set before it starts from the longest it can grow (`expect`), so a position is read with the
same span whether AR or speculative decoding reaches it: a longer span sums the same scores in another order.

Exactness: every block of up to `rows` rows (a decoding round's) runs padded to exactly `rows` rows, so a position's
logits come from kernels of one shape whether it is an AR step or a row of a verification block: cuBLAS picks its
kernels by shape, and rows of one shape are summed alike. That holding on the card at hand is probed, not assumed
(`batch_invariant`). A padded row is computed and written past the block, where the mask hides it from every real
row until a real token overwrites it. Longer blocks (a prompt's chunks, fed alike in AR and speculative decoding)
run eagerly, as does everything on a CPU, where the tests run this forward.

torch.compile's "reduce-overhead" mode would capture graphs too, and fuse; it recompiles per shape (20-40 s each for
transformers' static cache on the H200), which a desktop app loading a pair cannot wait for.
"""
from __future__ import annotations

from functools import cached_property

import torch
import torch.nn.functional as F

from engine.models import fast_llama

BLOCK_ROWS = 16  # the rows every graphed block runs: γ ≤ 15 drafts and the position after them
MIN_SPAN = 256  # the shortest span of the cache attention reads
MIN_CAPACITY = 1024
PROBED_BLOCKS = (2, 5, BLOCK_ROWS)  # blocks compared with single steps by `batch_invariant`


class StaticLlama:
    """One static KV cache over a Llama-family model, with the interface of fast_llama.FastLlama."""

    def __init__(self, model, head: torch.Tensor, *, graphs: bool, rows: int = BLOCK_ROWS):
        self.weights = w = fast_llama._Weights.of(model, int8=False)
        self.head = w.lm_head(head, False)
        self.graphs, self.rows = graphs, rows
        self.length = 0
        self.capacity = 0
        self.k = self.v = self.cos = self.sin = None
        self._position = torch.zeros((), dtype=torch.long, device=w.device)  # the block's first position
        self._offsets = torch.arange(rows, device=w.device)
        # Qwen3's per-head q and k norm weights, side by side for q's heads and k's: one multiply for both
        self._qk_norms = [None if layer.q_norm is None else torch.cat((layer.q_norm.expand(w.heads, -1),
                                                                        layer.k_norm.expand(w.kv_heads, -1)))
                          for layer in w.layers]
        self._span = MIN_SPAN  # of the reply being decoded (`expect`)
        self._captured: dict[int, tuple] = {}  # span -> (graph, ids, logits, the stream it was captured on)
        self._reserve(MIN_CAPACITY)

    projection = property(lambda self: self.weights.layers[0].down)
    compact_weights = None

    def _reserve(self, needed: int) -> None:
        """Room for `needed` positions: a new cache of twice the capacity (or more) holding the old one's."""
        if needed <= self.capacity:
            return
        w = self.weights
        capacity = max(needed, 2 * self.capacity, MIN_CAPACITY)
        shape = (len(w.layers), w.kv_heads, capacity, w.head_dim)
        k, v = (torch.zeros(shape, dtype=w.dtype, device=w.device) for _ in range(2))
        if self.k is not None:
            k[:, :, : self.capacity], v[:, :, : self.capacity] = self.k, self.v
        self.k, self.v, self.capacity = k, v, capacity
        cos, sin = w.rotary(torch.zeros(1, dtype=w.dtype, device=w.device), torch.arange(capacity, device=w.device)[None])
        self.cos, self.sin = cos[0, :, None], sin[0, :, None]
        self._span_positions = torch.arange(capacity, device=w.device)
        self._captured.clear()  # they read the old cache's addresses

    def crop(self, length: int) -> None:
        self.length = length

    def expect(self, positions: int) -> None:
        """The reply about to be decoded ends within `positions` (its prompt, its token budget and the longest
        block past it): every block of it attends to the same span, the shortest power of two that holds it."""
        self._span = MIN_SPAN
        while self._span < positions:
            self._span *= 2
        self._reserve(self._span)

    def forward(self, ids: torch.Tensor, keep: int) -> torch.Tensor:
        """Float logits (keep, head rows) of the last `keep` of `ids` (a 1-d tensor on the device), fed after the
        cached ones. Blocks of up to `rows` rows run padded to `rows`, from their graph where there is one."""
        n, start = len(ids), self.length
        padded = max(n, self.rows)
        if start + padded > self._span:  # beyond what the reply was expected to reach
            self.expect(start + padded)
        span = self._span
        self._position.fill_(start)
        if n > self.rows:
            logits = self._run(ids, span)
        elif self.graphs:
            graph, static_ids, logits, _ = self._graph(span)
            static_ids[:n].copy_(ids)
            graph.replay()
        else:
            logits = self._run(torch.cat((ids, ids[-1:].expand(self.rows - n))), span)
        self.length = start + n
        return logits[n - keep:n].clone()

    def _graph(self, span: int) -> tuple:
        if span not in self._captured:
            ids = torch.zeros(self.rows, dtype=torch.long, device=self._position.device)
            # Each graph is captured on a stream of its own: destroying a graph frees the cuBLAS workspaces of the
            # stream it was captured on, which other graphs captured there still use (pytorch/pytorch#193402).
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):  # first calls set up cuBLAS and the allocator: not in the graph
                for _ in range(2):
                    self._run(ids, span)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):  # and its own memory pool: a shared one is freed with them
                logits = self._run(ids, span)
            self._captured[span] = (graph, ids, logits, stream)
        return self._captured[span]

    def _run(self, ids: torch.Tensor, span: int) -> torch.Tensor:
        """The forward over `ids` at the positions from self._position on, attending to the cache's first `span`
        positions: float logits of every row. Nothing here reads a value back to the host (it is captured)."""
        w = self.weights
        n = len(ids)
        positions = self._position + (self._offsets if n == self.rows else torch.arange(n, device=ids.device))
        hidden = self._span_positions[:span] > positions[:, None]  # (n, span): later positions, masked
        mask = torch.zeros(hidden.shape, dtype=w.dtype, device=ids.device).masked_fill_(hidden, float("-inf"))
        mask = mask.repeat(w.heads // w.kv_heads, 1)  # a row per query head of a key head's group
        cos, sin = self.cos[positions], self.sin[positions]
        x = w.embed(ids)
        for i, layer in enumerate(w.layers):
            x = self._layer(i, layer, x, positions, cos, sin, mask, span)
        return self.head(F.rms_norm(x, (w.hidden,), w.final_norm, w.eps)).float()

    def _layer(self, i: int, layer, x: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               mask: torch.Tensor, span: int) -> torch.Tensor:
        """Layer i over rows x: fast_llama's layer in fewer kernels (a step is as many launches as it has kernels):
        norms in the model's dtype by torch's fused kernel, q and k normalised as one tensor, attention by
        scaled_dot_product_attention over each key head's group of query heads."""
        w = self.weights
        n, q_width, kv_width = len(x), w.heads * w.head_dim, w.kv_heads * w.head_dim
        qkv = layer.qkv(F.rms_norm(x, (w.hidden,), layer.attn_norm, w.eps))
        if layer.qkv_bias is not None:
            qkv = qkv + layer.qkv_bias.to(qkv.dtype)
        qk = qkv[:, :q_width + kv_width].view(n, w.heads + w.kv_heads, w.head_dim)
        if self._qk_norms[i] is not None:
            qk = F.rms_norm(qk, (w.head_dim,), eps=w.eps) * self._qk_norms[i]
        qk = fast_llama._rope(qk, cos, sin)
        self.k[i].index_copy_(1, positions, qk[:, w.heads:].transpose(0, 1))
        self.v[i].index_copy_(1, positions, qkv[:, q_width + kv_width:].view(n, w.kv_heads, w.head_dim).transpose(0, 1))
        attn = grouped_attention(qk[:, : w.heads], self.k[i, :, :span], self.v[i, :, :span], mask)
        x = x + layer.o(attn)
        gate, up = layer.gate_up(F.rms_norm(x, (w.hidden,), layer.mlp_norm, w.eps)).split(w.intermediate, -1)
        return x + layer.down(F.silu(gate) * up)

    @cached_property
    @torch.inference_mode()  # the cache may have grown in inference mode (a forward's), and is written here
    def batch_invariant(self) -> bool:
        """Whether blocks score each position with the same bits as single steps: probed with scratch ids past what
        the cache holds (written there and forgotten), for blocks of a few lengths up to `rows`."""
        base = self.length
        vocab = min(self.weights.embed.num_embeddings, 1 << 15)
        ids = torch.arange(1000, 1000 + self.rows, device=self._position.device) % vocab
        try:
            for n in PROBED_BLOCKS:
                self.crop(base)
                block = self.forward(ids[:n], n)
                self.crop(base)
                steps = torch.cat([self.forward(ids[i:i + 1], 1) for i in range(n)])
                if not torch.equal(block, steps):
                    return False
            return True
        finally:
            self.crop(base)


def grouped_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(n, heads·head_dim) attention of queries q (n, heads, head_dim) over one layer's keys and values
    (kv_heads, span, head_dim), `mask` (group·n, span) added to the scores of each key head's group of query
    heads, which attend to it as one block of rows: no copy of the keys per query head."""
    n, heads, head_dim = q.shape
    kv_heads = keys.shape[0]
    group = heads // kv_heads
    grouped = q.reshape(n, kv_heads, group, head_dim).permute(1, 2, 0, 3).reshape(1, kv_heads, group * n, head_dim)
    out = F.scaled_dot_product_attention(grouped, keys[None], values[None], attn_mask=mask)
    return out.view(kv_heads, group, n, head_dim).permute(2, 0, 1, 3).reshape(n, heads * head_dim)
