"""A prompt read in by matrix products over de-quantised weights (q4q8.LlamaForward.read_in): the weights are the
kernel's values rounded once, a prompt scores as the kernel's forward does up to that rounding, it is cut at the
same positions whatever the machine's speed, and greedy speculative decoding after it is still greedy AR."""
import pytest
import torch

from engine.decoding.caches import CachedModel
from engine.decoding.decoder import Decoder
from engine.decoding.drafters import DraftModelDrafter
from engine.events import DecodeSettings
from engine.kernels import levels, q4q8
from tests.engine.models.test_gguf_native import tiny_gguf_pair
from tests.engine.kernels.test_q4q8 import random_weight
from tests.tiny import tiny_model

pytestmark = pytest.mark.skipif(not q4q8.available(), reason="no C compiler for the kernel")
PROMPT_IDS = [3, 7, 11, 5, 9, 2, 8, 4, 6, 10] * 60  # 600 positions: two whole blocks of 256 rows and a tail
ISAS = q4q8.executable_levels() if q4q8.available() else ()


@pytest.mark.parametrize("bits,kind,zero", [(4, q4q8.SCALES_F16, 0), (4, q4q8.SCALES_F32, 0), (8, q4q8.SCALES_F16, 0),
                                            (8, q4q8.SCALES_HALVES, 32)])
@pytest.mark.parametrize("isa", ISAS)
def test_de_quantised_weights_are_the_kernel_s_values_rounded_once_to_bfloat16(monkeypatch, bits, kind, zero, isa):
    monkeypatch.setenv("SPECDEC_ISA", isa)
    q4q8.isa.cache_clear()
    try:
        weight = q4q8.Q4Q8Weight.from_values(*random_weight(bits, rows=48, cols=192), bits, kind, zero)
        assert torch.equal(weight.dense_bf16_t().t(), weight.dense().to(torch.bfloat16))
    finally:
        q4q8.isa.cache_clear()


def test_de_quantised_columns_land_in_a_wider_matrix_beside_each_other():
    first, second = (q4q8.Q4Q8Weight.from_values(*random_weight(4, rows=32, cols=64, seed=s), 4) for s in (1, 2))
    wide = torch.zeros((64, 80), dtype=torch.bfloat16)
    first.dense_bf16_t(wide[:, :32])
    second.dense_bf16_t(wide[:, 32:64])
    assert torch.equal(wide[:, :64], torch.cat((first.dense(), second.dense())).to(torch.bfloat16).t())
    assert not wide[:, 64:].any()


def test_a_wrong_layout_is_not_the_kernel_s_values():
    """Negative control: the same values packed for another row order de-quantise to other weights."""
    values, scales, offsets = random_weight(4, rows=32, cols=64)
    weight = q4q8.Q4Q8Weight.from_values(values, scales, offsets, 4)
    shuffled = q4q8.Q4Q8Weight.from_values(values[::-1].copy(), scales, offsets, 4)
    assert not torch.equal(shuffled.dense_bf16_t(), weight.dense_bf16_t())


@pytest.fixture(autouse=True)
def _blocks_of_256(monkeypatch):
    """Blocks of 256 rows: two whole ones and a tail fit the tiny model's window of 512 positions."""
    monkeypatch.setattr(q4q8, "READ_IN_ROWS", 256)


def runner(monkeypatch, native, how: str) -> CachedModel:
    monkeypatch.setenv("SPECDEC_READ_IN", how)
    return CachedModel(native.model, native.vocab_size)


def read_in(model: CachedModel, ids: list[int]) -> list[int]:
    """Prefill `ids` (all but the last), the positions each chunk ended at."""
    return list(model.prefill_chunks(ids))


def test_a_prompt_read_in_densely_scores_as_the_kernel_s_forward_up_to_rounding(tmp_path, monkeypatch):
    native, _ = tiny_gguf_pair(tmp_path)
    kernel, dense = runner(monkeypatch, native, "kernel"), runner(monkeypatch, native, "dense")
    assert (kernel.cache.read_in_rows, dense.cache.read_in_rows) == (None, q4q8.READ_IN_ROWS)
    for model in (kernel, dense):
        read_in(model, PROMPT_IDS)
    expected, found = (m.forward(PROMPT_IDS[-1:]) for m in (kernel, dense))
    # bfloat16 weights and activations against 8-bit activations: a few per cent of the logits' spread
    assert (found - expected).abs().max() < 0.05 * (expected.max() - expected.min())
    assert torch.equal(found.argmax(-1), expected.argmax(-1))
    keys = (kernel.cache.k.float(), dense.cache.k.float())
    positions = len(PROMPT_IDS) - 1
    assert not torch.equal(keys[0][..., :positions], keys[1][..., :positions])  # another path, not the kernel's


def test_a_prompt_is_cut_at_the_same_positions_and_read_to_the_same_bits_whatever_the_speed(tmp_path, monkeypatch):
    native, _ = tiny_gguf_pair(tmp_path)
    ends, caches = [], []
    for seconds_per_position in (None, 1e-6, 1.0):
        model = runner(monkeypatch, native, "dense")
        model.seconds_per_position = seconds_per_position
        ends.append(read_in(model, PROMPT_IDS))
        caches.append((model.cache.k.clone(), model.cache.v.clone()))
    assert ends[0] == [256, 512, 599] and ends[1] == ends[0] == ends[2]
    assert all(torch.equal(k, caches[0][0]) and torch.equal(v, caches[0][1]) for k, v in caches)


def test_a_prompt_read_in_densely_is_the_same_bits_on_one_two_and_four_threads(tmp_path, monkeypatch):
    native, _ = tiny_gguf_pair(tmp_path)
    threads = torch.get_num_threads()
    logits = []
    try:
        for n in (1, 2, 4):
            torch.set_num_threads(n)
            model = runner(monkeypatch, native, "dense")
            read_in(model, PROMPT_IDS)
            logits.append(model.forward(PROMPT_IDS[-1:]))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(found, logits[0]) for found in logits)


@pytest.mark.parametrize("how", ["dense", "kernel"])
def test_greedy_speculative_equals_greedy_ar_after_a_long_prompt(tmp_path, monkeypatch, how):
    native, _ = tiny_gguf_pair(tmp_path)
    monkeypatch.setenv("SPECDEC_READ_IN", how)
    draft = tiny_model(1, layers=1, vocab_size=64)
    decoder = Decoder(native, DraftModelDrafter(draft, native.vocab_size), draft)
    prompt = [{"role": "user", "content": " ".join(f"w{i % 60 + 2}" for i in range(420))}]  # a dense block and a dense tail
    replies = {}
    for mode in ("ar", "spec"):
        settings = DecodeSettings(mode=mode, gamma=4, greedy=True, max_new_tokens=24, lookup=False)
        replies[mode] = [t.token_id for e in decoder.generate(prompt, settings) for t in e.emitted]
    assert len(replies["ar"]) > 5 and replies["spec"] == replies["ar"]


class StopAfter:
    """A stop request that comes after `checks` looks at it: mid-block, at a layer known in advance."""

    def __init__(self, checks: int):
        self.checks = checks

    def is_set(self) -> bool:
        self.checks -= 1
        return self.checks < 0


def test_a_read_in_stopped_between_layers_keeps_the_blocks_before_and_reads_on_to_the_same_bits(tmp_path, monkeypatch):
    native, _ = tiny_gguf_pair(tmp_path)
    layers = native.model.config.num_hidden_layers
    whole, stopped = runner(monkeypatch, native, "dense"), runner(monkeypatch, native, "dense")
    read_in(whole, PROMPT_IDS)
    stopped.stop_read_in(StopAfter(layers + 1))  # the first block whole, the second stopped after its first layer
    ends = []
    with pytest.raises(q4q8.ReadInStopped):
        for end in stopped.prefill_chunks(PROMPT_IDS):
            ends.append(end)
    assert ends == [256] and len(stopped) == 256 and stopped.cache.length == 256
    stopped.stop_read_in(None)
    assert read_in(stopped, PROMPT_IDS) == [512, 599]
    assert torch.equal(stopped.forward(PROMPT_IDS[-1:]), whole.forward(PROMPT_IDS[-1:]))
    never = runner(monkeypatch, native, "dense")  # the control: a stop that is not set reads the prompt whole
    never.stop_read_in(StopAfter(10 ** 9))
    assert read_in(never, PROMPT_IDS) == [256, 512, 599]


def test_a_reply_stopped_in_a_read_in_block_ends_there_and_the_next_is_as_from_a_fresh_decoder(tmp_path, monkeypatch,
                                                                                                qapp):
    from app.chat.worker import DecodeWorker
    from words.records import ReplyRequest

    native, _ = tiny_gguf_pair(tmp_path)
    monkeypatch.setenv("SPECDEC_READ_IN", "dense")
    draft = tiny_model(1, layers=1, vocab_size=64)
    worker = DecodeWorker(Decoder(native, DraftModelDrafter(draft, native.vocab_size), draft))
    messages = ({"role": "user", "content": " ".join(f"w{i % 60 + 2}" for i in range(420))},)
    request = ReplyRequest(messages, DecodeSettings(mode="spec", gamma=4, greedy=True, max_new_tokens=12))
    worker.decoder.warm_up()  # its timings read a block in too
    layers_read = []
    dense_layer = q4q8.LlamaForward._dense_layer

    def stop_in_the_second_block(forward, layer):  # the window's Stop, as the target reads its second block
        layers_read.append(layer)
        if len(layers_read) == forward.spec.layers + 1:
            worker.request_stop()
        return dense_layer(forward, layer)

    monkeypatch.setattr(q4q8.LlamaForward, "_dense_layer", stop_in_the_second_block)
    events, text, stopped = worker._decode(request, emit=False)
    assert stopped and events == [] and text == ""
    assert len(layers_read) == native.model.config.num_hidden_layers + 1  # no layer after the stop
    assert len(worker.decoder.runner) == q4q8.READ_IN_ROWS
    monkeypatch.setattr(q4q8.LlamaForward, "_dense_layer", dense_layer)
    worker._stop.clear()
    again = worker._decode(request, emit=False)
    fresh = DecodeWorker(Decoder(native, DraftModelDrafter(draft, native.vocab_size), draft))
    expected = fresh._decode(request, emit=False)
    assert not again[2] and again[1] == expected[1] and len(again[0]) > 0


def test_dense_read_in_is_where_the_cpu_multiplies_bfloat16_in_hardware_unless_forced(monkeypatch):
    monkeypatch.delenv("SPECDEC_READ_IN", raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    bf16 = torch.cpu._is_amx_tile_supported() or "avx512_bf16" in (levels.cpu_flags() or ())
    assert q4q8.reads_in_densely() == bf16
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(levels, "cpu_flags", lambda: frozenset({"avx2", "avx512f", "avx512_bf16"}))
    assert q4q8.reads_in_densely()  # a Zen 4: no tiles, AVX-512 bf16
    monkeypatch.setattr(levels, "cpu_flags", lambda: frozenset({"avx2", "avx512f", "avx512_vnni"}))
    assert not q4q8.reads_in_densely()  # AVX-512 without bf16: oneDNN would emulate it
    monkeypatch.setattr(levels, "cpu_flags", lambda: frozenset({"avx2", "avx512f", "avx512_bf16"}))
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # as an AVX2 machine is emulated (SPECDEC_ISA=avx2)
    assert not q4q8.reads_in_densely()
    for how in ("dense", "kernel"):
        monkeypatch.setenv("SPECDEC_READ_IN", how)
        assert q4q8.reads_in_densely() == (how == "dense")

