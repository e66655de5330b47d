"""The choices a user can make, named once for the CLI, the app's options and its side pane (no torch here, so the
widgets can import it). `auto` lets the engine pick: see engine.models.loading."""
from __future__ import annotations

from engine.events import Drafting, Mode

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("auto", "float32", "bfloat16", "float16")
# A GGUF target's weights: "native" keeps its 4-bit blocks (engine.models.gguf_native), "dtype" de-quantises them
# into --dtype, "auto" is native where a native kernel is fast here (gguf_native.best_kernel). The choice is made
# once per target and serves every mode: AR, speculation, the bench and the AR comparison use the same weights.
TARGET_WEIGHTS = ("auto", "native", "dtype")
DRAFT_WEIGHTS = ("int8", "dtype")  # the draft's linear layers: weight-only int8 on CPU, or the dtype's
MODES = tuple(mode.value for mode in Mode)
DRAFTINGS = tuple(drafting.value for drafting in Drafting)  # the drafters a round may use: model, lookup, both, none
