"""The Q4 × Q8 kernel: it computes llama.cpp's Q8_0-activation product, gives a row the same bits on every path
(AVX-512 VNNI, AVX2, portable C) and for any block, and its absence leaves torch's int4 kernel in charge."""
import numpy as np
import pytest
import torch

from engine.kernels import q4q8
from engine.models import gguf_native


def random_weight(bits: int, rows: int = 64, cols: int = 256, seed: int = 0):
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 16 if bits == 4 else 256, (rows, cols)).astype(np.uint8)
    scales = (rng.random((rows, cols // 32)) * 0.02).astype(np.float16).astype(np.float32)
    offsets = (-rng.random((rows, cols // 32)) * 0.1).astype(np.float16).astype(np.float32)
    return values, scales, offsets


def q8_reference(x: np.ndarray, values, scales, offsets) -> np.ndarray:
    """Σ_g d·dx·Σ(u·xq) + m·dx·Σxq in float64, with x quantised per row and 32 inputs (ties to even)."""
    rows, groups = x.shape[0], values.shape[1] // 32
    xg = x.astype(np.float32).reshape(rows, groups, 32)
    dx = np.abs(xg).max(-1) / np.float32(127)
    xq = np.rint(xg * np.where(dx == 0, 0, 1 / np.where(dx == 0, 1, dx))[..., None])
    u = values.reshape(-1, groups, 32).astype(np.float64)
    dots = np.einsum("rgj,ngj->rng", xq, u)
    return (np.einsum("rng,ng,rg->rn", dots, scales, dx) + np.einsum("ng,rg->rn", offsets, dx * xq.sum(-1)))


@pytest.mark.parametrize("bits", [4, 8])
def test_the_kernel_computes_the_q8_activation_product(bits):
    values, scales, offsets = random_weight(bits)
    weight = q4q8.Q4Q8Weight.from_values(values, scales, offsets, bits)
    x = torch.randn(5, 256, generator=torch.Generator().manual_seed(1))
    expected = q8_reference(x.numpy(), values, scales, offsets)
    np.testing.assert_allclose(weight(x).numpy(), expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_a_wrong_layout_fails_the_reference():
    """Negative control: the same values packed for another row order do not pass."""
    values, scales, offsets = random_weight(4)
    shuffled = q4q8.Q4Q8Weight.from_values(values[::-1].copy(), scales, offsets, 4)
    x = torch.randn(2, 256, generator=torch.Generator().manual_seed(1))
    assert not np.allclose(shuffled(x).numpy(), q8_reference(x.numpy(), values, scales, offsets), rtol=1e-3)


@pytest.mark.skipif(not q4q8.available() or len(q4q8.executable_levels()) < 2, reason="the CPU has no AVX2")
@pytest.mark.parametrize("bits", [4, 8])
def test_every_vector_path_gives_the_portable_path_s_bits(monkeypatch, bits):
    weight = q4q8.Q4Q8Weight.from_values(*random_weight(bits, rows=48, cols=192), bits)
    x = torch.randn(11, 192, generator=torch.Generator().manual_seed(2)).bfloat16()
    results = {}
    for name in q4q8.executable_levels():
        monkeypatch.setenv("SPECDEC_ISA", name)
        q4q8.isa.cache_clear()
        results[name] = weight(x)
    q4q8.isa.cache_clear()
    assert len(results) >= 2 and all(torch.equal(found, results["portable"]) for found in results.values())


def test_a_row_is_the_same_bits_alone_and_in_any_block():
    weight = q4q8.Q4Q8Weight.from_values(*random_weight(4), 4)
    x = torch.randn(12, 256, generator=torch.Generator().manual_seed(3))
    alone = torch.cat([weight(x[r:r + 1]) for r in range(12)])
    assert all(torch.equal(weight(x[:n]), alone[:n]) for n in range(2, 13))


def test_without_the_library_a_native_target_keeps_torch_s_int4_kernel(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setattr(q4q8, "_library_path", lambda: tmp_path / "libq4q8-missing.so")
    q4q8._library.cache_clear()
    try:
        assert not q4q8.available()
        assert "the int4 target runs on torch's int4 kernel" in capsys.readouterr().err
        assert gguf_native.best_kernel(torch.bfloat16) == "torch-int4"
        assert gguf_native.best_kernel(torch.float32) is None  # de-quantised: torch's float32 int4 path is slow
    finally:
        q4q8._library.cache_clear()
