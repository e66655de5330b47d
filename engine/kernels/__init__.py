"""Compiled CPU kernels, built from source on first use (engine.kernels.q4q8)."""
