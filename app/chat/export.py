"""Export a session: JSON (settings, models, environment, every round, acceptance by draft position and the
recommended γ), CSV (one row per round), a second CSV of acceptance by draft position (a row per reply and one for
the session), a Markdown transcript (the chat as it reads, with each reply's figures) and a PNG of every reply's
charts and the "why this γ" tab. Every file numbers the replies 1, 2, ... as the chat shows them: a continued reply
is one reply, its continuations its parts 2, 3, ...

All or nothing: every file is written beside its destination under a temporary name and renamed into place
only once all of them are written, so a failure leaves no partial export (and no half-written file).
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import os
import platform
import re
import sys
from datetime import datetime, timezone
from enum import Enum
from importlib import metadata
from pathlib import Path

from app.why import why_gamma
from engine.events import Mode, RoundEvent
from engine.stats import PositionAcceptance, SpeedupMeter, position_acceptance, round_alpha
from words.compare import explain, greedy_is_exact
from words.markdown import FENCE
from words.records import DrafterComparison, RemoteSource, Reply, Runtime, Session, numbered_replies
from words.transcript import CONTEXT, reply_notes
from words.wording import comparison_line, estimate_apart, pair_said, part_label, remote_header, reply_header

CSV_COLUMNS = ("reply", "part", "round", "mode", "gamma", "n_verified", "n_accepted", "n_emitted", "round_alpha",
               "draft_s", "verify_s", "round_s", "prefill_s", "target_step_s", "load", "threads",
               "speedup", "finish_reason", "fates", "text")


def environment(runtime: Runtime | None) -> dict:
    """The machine, kernels and versions that produced the timings. Versions are read from package metadata and
    what torch runs on from `runtime` (app.pair.machine asks torch), so the UI never imports torch; what `runtime`
    would say is None where it is not known."""
    versions = {}
    for package in ("torch", "transformers", "PySide6-Essentials", "pyqtgraph", "numpy"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    ran = plain(runtime) if runtime is not None else dict.fromkeys(f.name for f in dataclasses.fields(Runtime))
    return {"python": sys.version.split()[0], "platform": platform.platform(), "machine": platform.machine(),
            "cpu": cpu_model(), "cpu_count": os.cpu_count(), **ran, "packages": versions}


def cpu_model() -> str | None:
    """The CPU's name as Linux gives it in /proc/cpuinfo, else platform's (often only the architecture)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model"):  # x86; some Arm boards
                return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def plain(value):
    """Dataclasses, enums and tuples as JSON-ready builtins."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def session_json(session: Session) -> dict:
    replies = []
    for numbered in numbered_replies(session):
        reply, comparison = numbered.whole, numbered.comparison
        replies.append({
            "reply": numbered.number,
            "messages": list(reply.request.messages), "settings": plain(reply.request.settings),
            "text": reply.text, "stopped": reply.stopped,
            # the local pair that decoded it (the file's `models` is the last reply's); `said`: named as the
            # Markdown names it, each model by its store's name (an Ollama blob's name:tag, not its digest)
            "pair": None if numbered.pair is None else {"target": numbered.pair.target.name,
                                                        "draft": numbered.pair.draft and numbered.pair.draft.name,
                                                        "device": numbered.pair.device, "dtype": numbered.pair.dtype,
                                                        "target_weights": numbered.pair.target.weights,
                                                        "said": pair_said(numbered.pair)},
            # its speedup measured against its own plain rounds, as the window and `specdec generate --json` give it
            "stats": {**reply.stats.as_dict(), "machine_busy": reply.machine_busy, "others_cores": reply.others_cores,
                      "host_cores": reply.host_cores},
            # of the last part, decoded again on its own
            "comparison": None if comparison is None else {**plain(comparison), "speedup": comparison.speedup,
                                                           "part": len(numbered.parts)},
            "position_acceptance": position_acceptance(reply.events).as_dict(),
            # a continued reply was decoded in parts, each with its own settings, rounds and end
            "parts": [{"part": p, "settings": plain(part.request.settings), "stopped": part.stopped,
                       "n_rounds": len(part.events),
                       "speedup": None if part_comparison is None else part_comparison.speedup,
                       "fair": None if part_comparison is None else part_comparison.fair}
                      for p, (part, part_comparison) in enumerate(zip(numbered.parts, numbered.comparisons),
                                                                  start=1)],
            "rounds": [{"part": p, **plain(event)} for p, part in enumerate(numbered.parts, start=1)
                       for event in part.events],
            "remote": None if reply.remote is None else remote_json(reply.remote),
        })
    return {"app": "SpecDec Studio", "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "models": None if session.pair is None else {**plain(session.pair), "said": pair_said(session.pair)},
            "environment": environment(session.runtime), "replies": replies,
            # the session's acceptance by draft position and what the pair's cost model recommends under it
            "why_gamma": why_gamma(session).as_dict(), "drafters": [drafters_json(c) for c in session.drafters]}


def drafters_json(comparison: DrafterComparison) -> dict:
    """A Compare drafters the chat keeps: its settings and each drafting's row, as its table shows them."""
    return {"settings": plain(comparison.request.settings), "rows": comparison.rows()}


def round_row(number: int, part_number: int, part: Reply, event: RoundEvent, meter: SpeedupMeter) -> dict:
    """One round of reply `number`'s part `part_number` (its round index counts within the part), its speedup as the
    window's chart drew it: at the part's plain rounds measured up to it (`meter`, this round added)."""
    alpha = round_alpha(event)
    speedup = (meter.round_speedup(event) or "") if part.speculative else ""
    return {
        "reply": number, "part": part_number, "round": event.index, "mode": part.request.settings.mode,
        "gamma": event.gamma, "n_verified": len(event.drafted), "n_accepted": event.n_accepted,
        "n_emitted": len(event.emitted), "round_alpha": "" if alpha is None else round(alpha, 6),
        "draft_s": event.draft_s, "verify_s": event.verify_s, "round_s": event.round_s,
        "prefill_s": event.prefill_s, "target_step_s": event.target_step_s, "load": event.load,
        "threads": event.threads or "",
        "speedup": speedup,
        "finish_reason": event.finish_reason or "", "fates": " ".join(t.fate.value for t in event.emitted),
        "text": event.text_delta,
    }


def write_csv(session: Session, path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for numbered in numbered_replies(session):
            for part_number, part in enumerate(numbered.parts, start=1):
                meter = SpeedupMeter()
                for event in part.events:
                    meter.add(event)
                    writer.writerow(round_row(numbered.number, part_number, part, event, meter))


# NAME-positions.csv: the summary of each scope's rounds, then a block of columns per measure, one column per draft
# position i (kept_1, kept_2, ...), so a reply reads along its row as the why tab's bars read left to right.
POSITION_SUMMARY = ("scope", "reply", "mode", "rounds", "alpha", "mean_accepted", "tokens_per_round",
                    "seed_tokens_per_round")
POSITION_MEASURES = ("kept", "conditional", "drafted", "copied")  # PositionAcceptance's per-position tuples


def position_columns(longest: int) -> list[str]:
    return [*POSITION_SUMMARY, *(f"{measure}_{i}" for measure in POSITION_MEASURES for i in range(1, longest + 1))]


def position_row(scope: str, reply, mode: str, acceptance: PositionAcceptance) -> dict:
    """One scope's acceptance by draft position; positions past its own longest draft stay blank, not 0."""
    row = {"scope": scope, "reply": reply, "mode": mode, "rounds": acceptance.n_rounds,
           "alpha": acceptance.alpha if acceptance.drafted else "", "mean_accepted": acceptance.mean_accepted,
           "tokens_per_round": acceptance.tokens_per_round,
           "seed_tokens_per_round": acceptance.seed_tokens_per_round}
    for measure in POSITION_MEASURES:
        for i, share in enumerate(getattr(acceptance, measure), start=1):
            row[f"{measure}_{i}"] = share
    return row


def position_rows(session: Session) -> list[dict]:
    """A row per reply (a continued one whole, numbered as in the rounds' CSV) and a last one for the session: every
    speculative reply's rounds together, as the JSON's why_gamma.session_acceptance and the why tab's grey bars
    count them."""
    rows = [position_row("reply", n.number, n.whole.request.settings.mode, position_acceptance(n.whole.events))
            for n in numbered_replies(session)]
    rows.append(position_row("session", "", Mode.SPEC, why_gamma(session).session))
    return rows


def write_positions_csv(session: Session, path: Path) -> None:
    longest = max((event.gamma for reply in session.replies for event in reply.events), default=0)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=position_columns(longest), restval="")
        writer.writeheader()
        writer.writerows(position_rows(session))


def remote_json(source: RemoteSource) -> dict:
    """A remote engine's reply: where it came from (its public URL: never a key) and what the engine reported."""
    engine = source.reply
    return {"url": source.url, "model": source.model,
            "engine": None if engine is None else {
                "n_tokens": engine.n_tokens, "wall_s": engine.wall_s, "tokens_per_s": engine.tokens_per_s,
                "first_token_s": engine.first_token_s, "finish_reason": engine.finish_reason,
                "spec": None if engine.spec is None else engine.spec.as_dict(), "note": engine.note}}


def hard_line_breaks(text: str) -> str:
    """`text` with each single newline outside code fences made a Markdown hard break (two trailing spaces), so a
    poem's lines stay lines in a Markdown viewer as they do in the chat; a fence it leaves open (a reply cut at max
    tokens inside its code) is closed, so what follows it is not read as code."""
    lines = text.split("\n")
    opened = None  # the fence of the code block the line is in
    for i, line in enumerate(lines):
        if fence := FENCE.fullmatch(line):
            opened = None if opened else fence.group(1)
        elif not opened and i + 1 < len(lines) and line.strip() and lines[i + 1].strip():
            lines[i] = line.rstrip() + "  "
    return "\n".join(lines + ([opened] if opened else []))


def markdown(session: Session) -> str:
    """The chat as it reads: each message, each reply (a continued one whole) under its header, and the lines the
    chat shows under it (its figures, its warnings, the AR comparison and why the texts part, a context notice)."""
    lines = [f"# {session.title or 'SpecDec Studio chat'}", ""]
    if session.pair is not None:
        lines += [f"*{pair_said(session.pair)}*", ""]
    system = next((m["content"] for m in (session.replies[0].request.messages if session.replies else ())
                   if m["role"] == "system"), "")
    if system:
        lines += ["**System prompt**", "", hard_line_breaks(system), ""]
    for numbered in numbered_replies(session):
        reply, comparison = numbered.whole, numbered.comparison
        lines += ["**You**", "", hard_line_breaks(reply.request.messages[-1]["content"]), ""]
        header = (reply_header(reply.request.settings) if reply.remote is None
                  else remote_header(reply.remote.model, reply.remote.url, reply.request.settings))
        notes = [(note.text, note.details) for note in reply_notes(reply)]  # the details the chat's tooltip holds
        for number, (part, part_comparison) in enumerate(zip(numbered.parts, numbered.comparisons), start=1):
            if part_comparison is not None:  # as the chat shows each part's
                notes += [(part_label(number, len(numbered.parts) > 1) + comparison_line(part_comparison, part),
                           estimate_apart(part_comparison, part)),
                          (explain(part_comparison, part, greedy_is_exact(session.pair)), "")]
        if numbered.context_notice:
            notes.append((CONTEXT + numbered.context_notice, ""))
        said = pair_said(numbered.pair) if numbered.pair is not None else ""
        if said and session.pair is not None and said != pair_said(session.pair):  # another pair than the header's
            notes.append((f"decoded by {said}", ""))
        text = reply.text.strip()  # the engine writes no text for a control token: all of it is the reply's
        lines += [f"**Reply {numbered.number} · {header}**", "", hard_line_breaks(text), ""]
        for note, details in notes:
            lines += [f"*{note}*", ""] + ([details, ""] if details else [])
        compared = numbered.parts[-1]  # the AR text beside the reply is its last part's comparison's, as in the chat
        ar_text = comparison.ar_text.strip() if comparison is not None else ""
        if ar_text and ar_text != compared.text.strip():  # the chat shows both side by side
            of = " of the continued part" if compared.request.continues else ""
            lines += [f"**Plain AR's text (the comparison{of})**", "", hard_line_breaks(ar_text), ""]
    return "\n".join(lines)


class ExportError(Exception):
    """An export failed and wrote nothing; the message names the file and the reason, for the user."""


SUFFIXES = (".json", ".csv", ".md", ".png")
POSITIONS = "-positions.csv"  # beside NAME.csv: acceptance by draft position
STEM_MAX = 60  # characters of a chat's title in its export's file name
UNSAFE = re.compile(r'[\\/:*?"<>|\x00-\x1f]+')  # characters a file name cannot hold on some system


def file_stem(title: str) -> str:
    """A file name for a chat's export: its title, shortened, without characters a file system refuses."""
    stem = " ".join(UNSAFE.sub(" ", title.rstrip("…")).split()).strip(" .")
    if len(stem) > STEM_MAX:  # cut at the last whole word that fits
        cut = stem[:STEM_MAX + 1]
        stem = cut[:cut.rfind(" ")] if " " in cut else cut[:STEM_MAX]
    return stem.rstrip(" .,;:-") or "specdec-chat"  # a word cut off leaves no "apple, banana,.json"


def written_said(written: list[Path]) -> str:
    """The status line after an export: the files, and the folder they are in."""
    return f"Wrote {', '.join(path.name for path in written)} in {written[0].parent}"


def export_paths(base: Path) -> tuple[Path, ...]:
    """base.json, base.csv, base-positions.csv, base.md and base.png (a base already ending in one of those
    suffixes loses it)."""
    base = base.with_suffix("") if base.suffix in SUFFIXES else base
    return tuple(base.with_name(base.name + ext) for ext in (".json", ".csv", POSITIONS, ".md", ".png"))


def export_session(session: Session, base: Path, chart_image=None) -> list[Path]:
    """Write base.json, base.csv, base-positions.csv, base.md and (given `chart_image`, which returns a QImage or
    QPixmap of the session's charts) base.png, all or none; returns the paths written."""
    json_path, csv_path, positions_path, md_path, png_path = export_paths(base)

    def write_json(path: Path) -> None:
        path.write_text(json.dumps(session_json(session), indent=1, ensure_ascii=False), encoding="utf-8")

    def write_png(path: Path) -> None:
        if not chart_image(session).save(str(path), "PNG"):
            raise OSError("Qt could not save the image there")

    writers = [(json_path, write_json), (csv_path, lambda path: write_csv(session, path)),
               (positions_path, lambda path: write_positions_csv(session, path)),
               (md_path, lambda path: path.write_text(markdown(session), encoding="utf-8"))]
    if chart_image is not None:
        writers.append((png_path, write_png))
    for destination, _ in writers:
        if destination.is_dir():  # a rename onto it would fail only after the other files were in place
            raise ExportError(f"could not write {destination}: a directory of that name is in the way")
    written: list[tuple[Path, Path]] = []  # (temporary, destination)
    try:
        for destination, write in writers:
            temporary = destination.with_name(f".{destination.name}.{os.getpid()}.part")
            written.append((temporary, destination))
            try:
                write(temporary)
            except OSError as exc:
                raise ExportError(f"could not write {destination}: {exc.strerror or exc}") from exc
        for temporary, destination in written:
            try:
                os.replace(temporary, destination)
            except OSError as exc:
                raise ExportError(f"could not write {destination}: {exc.strerror or exc}") from exc
    finally:
        for temporary, _ in written:
            # a folder that refused the write (read-only) may refuse this too: the ExportError above says why
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
    return [destination for _, destination in written]
