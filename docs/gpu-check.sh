#!/bin/bash
# Issue 50's check on a lent GPU (`device` tool, from the repository root, with .whl and .gpu carried): synthetic
# pairs of the seed's shapes in bfloat16, greedy, 4 prompts x 64 tokens. What comes back: the bench's JSON per pair,
# its log, and the tables printed here. DEVICE=cpu BIG=tiny SMALL=tiny runs the same plumbing on a CPU.
set -u
OUT=${OUT:-runs/gpu}
DEVICE=${DEVICE:-cuda} BIG=${BIG:-qwen3-4b} SMALL=${SMALL:-qwen3-0.6b}
mkdir -p "$OUT"
if [ -d .whl ]; then  # transformers 5.25 and what it needs, where the machine has older ones
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
[ -d .gpu/home ] && export SPECDEC_HOME=$PWD/.gpu/home  # the embedded tokenizer alone: ids for the prompts
export SPECDEC_CACHE_DIR=${SPECDEC_CACHE_DIR:-/tmp/specdec-cache}
PY=${PY:-python3}
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__,
      torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA')"
cat > /tmp/gpu-prompts.txt <<'PROMPTS'
Write a Python function that merges two sorted lists into one sorted list.
Explain in a few sentences why the sky looks blue during the day.
Write a SQL query that lists the ten customers who spent the most last year.
Give three tips for keeping a small houseplant alive in winter.
PROMPTS
bench() {  # NAME SECONDS ARGS...: one bench, its JSON and log under $OUT, its table here
  local name=$1 limit=$2; shift 2
  timeout "$limit" $PY -m app.cli bench --device "$DEVICE" --dtype bfloat16 --decoding greedy --max-new-tokens 64 \
    --prompts /tmp/gpu-prompts.txt --repeats 1 --json "$@" > "$OUT/$name.json" 2> "$OUT/$name.log"
  echo "== $name (exit $?): $*"
  grep -v "bench:" "$OUT/$name.log" | tail -5
  $PY -c "
import json, sys
from engine.benchmark.summary import markdown_table
r = json.load(open(sys.argv[1])); c = r['env'].get('costs', {})
print(markdown_table(r['runs']))
print('costs:', {k: c.get(k) for k in ('target_block_ms', 'draft_step_ms', 'overhead_ms', 'per_draft_ms')})
print('greedy_exact reported:', r['env'].get('greedy_exact'), '| greedy identical:', r.get('greedy_identical'))
" "$OUT/$name.json" 2>&1 | tail -20
}
bench perfect 200 --shapes "perfect:$BIG" --methods ar,spec_draft --gammas 2,4,8,15 --stop-below 0,cost
bench pair 300 --shapes "$BIG:$SMALL" --methods ar,spec_draft,hf_generate,hf_compiled --gammas 4 --stop-below 0,cost
# what padding every block to 16 rows costs a single step, against graphs of 1 row
timeout 120 $PY - "$DEVICE" "$BIG" <<'STEPS' 2>&1 | tail -5
import sys, time, torch
from engine.models import graphed, synthetic
device = torch.device(sys.argv[1])
model = synthetic._model(synthetic.config(sys.argv[2]), device, torch.bfloat16, seed=0)
for rows in (graphed.BLOCK_ROWS, 1):
    cache = graphed.StaticLlama(model, model.lm_head.weight, graphs=device.type == "cuda", rows=rows)
    ids = torch.tensor([5], device=device)
    with torch.inference_mode():
        for step in range(60):
            if step == 10:
                torch.cuda.synchronize() if device.type == "cuda" else None
                start = time.perf_counter()
            cache.forward(ids, 1)
        torch.cuda.synchronize() if device.type == "cuda" else None
    print(f"{sys.argv[2]} step, graphs of {rows} rows: {(time.perf_counter() - start) / 50 * 1e3:.2f} ms")
STEPS
