"""Model loading (hub ids, directories, GGUF), the embedded pair, pairing checks and the fast decode forward."""
