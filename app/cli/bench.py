"""`specdec bench`: the options turned into the bench's plan (engine.benchmark.bench), its runs, and what is printed
or written of their summary (engine.benchmark.summary).
"""
from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from engine.benchmark.background_load import background_load
from engine.benchmark.bench import (DEFAULT_METHODS, DRAFTER_METHODS, NEEDS_DRAFT, Bench, available_methods,
                                    load_prompts, plan, read_long_prompt, run_all)
from engine.benchmark.summary import (drafters_table, environment, markdown_table, peer_identity_lines,
                                      recommendation_lines, recommendations, summarize, write_plots, write_position_csv)
from engine.events import Drafting


def bench_methods(methods: Sequence[str] | None, drafters: Sequence[str] | None) -> list[str]:
    """The methods to run: `--methods` (by default DEFAULT_METHODS: neither spec_lookup nor the vllm rows), or with
    `--drafters` the method of each drafting named plus any `--methods` given besides."""
    if not drafters:
        return list(methods or DEFAULT_METHODS)
    chosen = [DRAFTER_METHODS[Drafting(d)] for d in drafters]
    return chosen + [m for m in methods or () if m not in chosen]


def run_bench(args, target_name: str, draft_name: str | None) -> int:
    """`specdec bench` with its parsed options: the pair, the plan, the runs, then the tables or the JSON."""
    from engine.decoding.decoder import Decoder

    shapes = getattr(args, "shapes", None)
    if shapes:
        from engine.models import synthetic

        target_name = f"synthetic {synthetic.parse(shapes)[0]}"
    methods = bench_methods(args.methods, getattr(args, "drafters", None))
    configs = plan(available_methods(methods, target_name), args.decoding, args.gammas, args.stop_below)
    if args.repeats < 1:
        raise ValueError("--repeats must be >= 1")
    if args.max_new_tokens < 1:
        raise ValueError("--max-new-tokens must be >= 1")
    if "sample" in args.decoding and args.temperature <= 0:
        raise ValueError("--temperature must be positive for sampled decoding")
    prompts = load_prompts(args.prompts)
    long_prompt = read_long_prompt(getattr(args, "long_prompt", None), configs)
    needs_draft = any(c.method in NEEDS_DRAFT for c in configs)
    if needs_draft and draft_name is None:
        raise ValueError(f"the {', '.join(NEEDS_DRAFT)} methods need a draft model (--draft)")
    if shapes:  # random weights of named shapes, built here: every row is of a synthetic pair
        from engine.models.loading import pick_device, pick_dtype

        device = pick_device(args.device)
        target, draft = synthetic.pair(shapes, device, pick_dtype(device, args.dtype))
        target_name, draft_name = target.name, draft.name
        print(f"built {target_name} + draft {draft_name} (random weights)", file=sys.stderr)
        decoder = Decoder(target, draft=draft if needs_draft else None, draft_int8=args.draft_weights == "int8")
    else:
        print(f"loading {target_name}" + (f" + draft {draft_name}" if needs_draft else ""), file=sys.stderr)
        decoder = Decoder.load(target_name, draft_name if needs_draft else None, args.device, args.dtype,
                               draft_int8=args.draft_weights == "int8", target_weights=args.target_weights)

    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # generate() warns about unused sampling flags on every call
    bench = Bench(decoder, args.max_new_tokens, args.temperature, long_prompt)
    try:
        with background_load(getattr(args, "background_load", 0)):
            rows = run_all(bench, configs, prompts, args.repeats, args.seed)
    finally:
        hf_logging.set_verbosity(verbosity)
        bench.close()

    result = summarize(rows)
    result["env"] = environment(decoder, prompts, {
        "repeats": args.repeats, "max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
        "seed": args.seed, "draft_weights": args.draft_weights, "background_load_mb": args.background_load},
        bench.servers)
    if decoder.costs is not None:
        result["recommendations"] = recommendations(result["runs"], decoder.costs)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        write_position_csv(result["runs"], args.out / "position_acceptance.csv")
        plots = write_plots(result["runs"], args.out)
        print(f"wrote {args.out / 'results.json'}, {args.out / 'position_acceptance.csv'} and {len(plots)} plots",
              file=sys.stderr)
    if args.json:
        print(json.dumps(result))
    else:
        env = result["env"]
        print(f"{target_name} + {draft_name}, {env['device']} {env['dtype']}, {len(prompts)} prompts × "
              f"{args.repeats}, {args.max_new_tokens} new tokens max")
        print()
        print(markdown_table(result["runs"]))
        if getattr(args, "drafters", None):
            print()
            print(drafters_table(result["runs"]))
        advice = recommendation_lines(result.get("recommendations", []))
        if advice:
            print()
            print("\n".join(advice))
        if env.get("costs"):
            costs = env["costs"]
            blocks = ", ".join(f"{ms:.1f}" for ms in costs["target_block_ms"])
            print(f"\ncost model: target block of 1..{len(costs['target_block_ms'])} rows {blocks} ms; draft step "
                  f"{costs['draft_step_ms']:.2f} ms, copied token {costs['copy_ms']:.2f} ms, round bookkeeping "
                  f"{costs['overhead_ms']:.2f} ms")
        errors = [r["prediction_error_max"] for r in result["runs"] if r.get("prediction_error_max") is not None]
        if errors:
            print(f"cost model's predicted speedup per prompt: at most {max(errors):.0%} from the measured one")
        for r in result["runs"]:
            if r.get("live_error_max") is not None:
                print(f"{r['method']} {r['decoding']}: the replies' live speedup per prompt at most "
                      f"{r['live_error_max']:.0%} from the measured one ({r['live_unmeasured']} of "
                      f"{len(r['per_prompt'])} prompts without a fair live figure)")
        if result["greedy_identical"] is not None:
            identical = result["greedy_identical"]
            if not identical and not env["greedy_exact"]:  # transformers' forward: blocks round unlike steps
                identical = "no, equal only up to rounding (the target is off the batch-invariant fast path)"
            print(f"\ngreedy spec output identical to AR on every prompt: {identical}")
        for line in peer_identity_lines(result["runs"]):
            print(line)
    return 0
