"""SpecDec Studio's engine: speculative decoding over transformers models.

Importing the package is cheap and torch-free; `engine.events` and `engine.stats` are safe for the UI.
"""
