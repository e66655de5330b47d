"""SpecDec Studio's engine: speculative decoding over transformers models.

Importing the package is cheap and torch-free; `engine.events` and `engine.stats` are safe for the UI. It applies
SPECDEC_ISA (engine.kernels.levels) to torch's, oneDNN's and oneMKL's own switches, which they read once, as torch
loads: every entry point imports `engine` before torch.
"""
from engine.kernels import levels

levels.force_torch()
