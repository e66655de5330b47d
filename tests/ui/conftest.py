"""Fixtures for the UI tests: a tiny model pair whose draft mostly agrees with the target, and the wired window."""
from __future__ import annotations

import gc

import pytest
import torch

from engine.decoding.decoder import Decoder
from engine.decoding.drafters import DraftModelDrafter
from tests.tiny import tiny_model

# How far the draft's weights are pushed from the target's: small enough that most drafts are accepted (bonus
# tokens appear), large enough that some are rejected (resampled / corrected tokens appear).
DRAFT_NOISE = {"mixed": 0.003, "greedy-mixed": 0.01}


def near_copy_decoder(noise: float) -> Decoder:
    target = tiny_model(0)
    draft = tiny_model(0)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, weight in draft.model.named_parameters():
            if "lm_head" not in name:
                weight.add_(torch.randn(weight.shape, generator=generator) * noise)
    decoder = Decoder(target, DraftModelDrafter(draft, target.vocab_size), draft)
    decoder.eos_ids = set()  # replies always run to max_new_tokens, so round counts are known in advance
    return decoder


@pytest.fixture(autouse=True)
def empty_clipboard():
    """Leave the clipboard empty after each test: text the process still owns when the offscreen platform shuts
    down crashes the interpreter at exit (segfault, exit 139) although every test passed."""
    yield
    from PySide6.QtGui import QGuiApplication

    if QGuiApplication.instance() is not None:
        QGuiApplication.clipboard().clear()


@pytest.fixture(scope="session")
def mixed_decoder() -> Decoder:
    return near_copy_decoder(DRAFT_NOISE["mixed"])


@pytest.fixture(scope="session")
def greedy_mixed_decoder() -> Decoder:
    return near_copy_decoder(DRAFT_NOISE["greedy-mixed"])


@pytest.fixture
def make_studio(qtbot):
    """Build the real window + worker thread around a given decoder; shut the thread down afterwards."""
    from studio.window import build

    built = []

    def make(decoder, store=None, preferences=None, build_options=None, **settings):
        """`store` and `preferences` as in `studio.window.build`; the rest are DecodeSettings fields. Rounds draft by
        the confidence stop unless `cost_aware=True` is given: a tiny pair's draft costs about what its target
        does, so cost-aware rounds would rarely draft, and the window's tests need drafts to draw. `build_options`:
        more keyword arguments for `build` (a serving peer, a remote timeout)."""
        from engine.events import DecodeSettings

        settings.setdefault("cost_aware", False)
        decoder.reset()
        # Earlier tests' windows may linger in reference cycles: collected later by a garbage collection that this
        # test's worker thread happens to trigger, their widgets' destructors wait for Python's lock there and the
        # worker hangs (seen twice, in a QMenu's destructor inside fast_llama's attention). Collect them here, on
        # the GUI thread, before a worker runs.
        gc.collect()
        studio = build(decoder, defaults=DecodeSettings(**settings), store=store, preferences=preferences,
                       **(build_options or {}))
        qtbot.addWidget(studio.window)
        studio.window.show()
        studio.window.activateWindow()
        qtbot.waitActive(studio.window)
        built.append(studio)
        with qtbot.waitSignal(studio.window.models_shown, timeout=10_000):
            studio.start()
        return studio

    yield make
    for studio in built:
        studio.shutdown()
