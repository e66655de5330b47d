"""The model pair: the library of models on this machine and Find best draft (library), what runs the pair here
(machine), and a vLLM server started for it (serving_peer)."""
