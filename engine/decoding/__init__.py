"""The algorithm: sampling, verification, drafters, the KV-cache owner and the round loop."""
