"""How a reply's figures are worded, in the chat, the status bar and the Markdown export."""
from __future__ import annotations

from enum import IntEnum
from pathlib import Path
from typing import NamedTuple

from engine.events import DecodeSettings, Mode, PairInfo, PrefillProgress
from engine.models.library import listed_name
from engine.stats import ReplyStats, SpeedupFigure
from words.records import HOST_NOTABLE_CORES, OTHERS_IDLE_CORES, Comparison, Reply


def reply_header(settings: DecodeSettings, gammas: tuple[int, ...] = ()) -> str:
    """`gammas`: every γ the reply ran with, in order, when it was changed mid-reply."""
    if settings.mode is Mode.AR:
        return "Assistant · plain AR"
    how = "greedy" if settings.greedy else f"sampling T={settings.temperature:g}"
    gamma = "→".join(map(str, gammas)) if len(gammas) > 1 else str(settings.gamma)
    if settings.cost_aware:
        rounds = f"γ ≤ {gamma}, cost-aware"
    else:
        rounds = f"γ ≤ {gamma}, stop {settings.stop_below:g}" if settings.stop_below else f"γ={gamma}"
    return f"Assistant · speculative, {how}, {rounds}"


def settings_said(settings: DecodeSettings) -> str:
    """The settings as a reply's header names them, with the reply's budget (and a sample's seed)."""
    said = reply_header(settings).removeprefix("Assistant · ") + f", up to {settings.max_new_tokens} tokens"
    return said if settings.greedy else f"{said}, seed {settings.seed}"


UNFAIR = " (machine busy — not a fair number)"
BUSY = " (machine busy)"
UNEQUAL = " (the two runs met the machine at different loads — not a fair number)"
# A measured comparison is one run of each: on a machine with few cores the next pair of runs may differ by tens of
# per cent (the estimate, which charges plain AR the reply's own load, moves less).
ONE_RUN = " (one run each)"
SHORT = " (too few tokens to time — not a fair number)"
UNDRAFTED = " (little or nothing drafted: both runs did nearly plain AR's work — not a speedup)"
BEYOND_ROUNDS = " (more than its tokens per round allow: the runs met the machine differently — not a fair number)"
# The two speedups answer two questions. The live figure is of the reply as it was drawn, token by token, as it
# streamed, against its own plain rounds drawn alike, which pulls the ratio toward 1×. Compare with AR decodes both
# again undrawn, and its figure moves as much with the machine between its two runs as with speculation.
LIVE_HOW = "drawn"
MEASURED_HOW = "undrawn"  # after the live figure's "vs AR": Compare with AR's measured speedup says what it is of


def speedup_said(figure: SpeedupFigure) -> str:
    """A reply's live speedup (engine.stats.SpeedupFigure) in a few words: the figure and its band, or why there is
    none, or why it is not a fair one. The window's stats line and the CLI's summary both say it so."""
    if figure.value is None:
        return f"× vs AR {figure.note}"
    if not figure.fair:
        return f"{figure.value:.2f}× vs AR, {LIVE_HOW} ({figure.note} — not a fair number)"
    low, high = f"{figure.low:.2f}", f"{figure.high:.2f}"
    return f"{figure.value:.2f}× vs AR, {LIVE_HOW}" + (f" ({low}–{high})" if low != high else "")


def comparison_caveat(comparison: Comparison) -> str:
    """Why a measured speedup is not a fair number, if it is not (the estimate allows for load; this does not);
    where it is, that it is one run of each. Too few tokens comes before unequal loads: a few tens of milliseconds
    cannot tell one load from another."""
    return (UNFAIR if comparison.machine_busy else SHORT if comparison.short
            else UNEQUAL if comparison.unequal_loads else UNDRAFTED if comparison.drafted_little
            else BEYOND_ROUNDS if comparison.beyond_rounds else ONE_RUN)


SEPARATOR = " · "  # between the figures of a line


class Keep(IntEnum):
    """How long the status bar keeps a figure when it is short of width: it gives up the highest first (the whole
    line stays in its tooltip)."""

    MEASURED = 0  # the measured speedup: what a comparison with plain AR was run for
    ESTIMATE = 1  # the estimated speedup, which the measured one is read against
    SPEED = 2  # tokens per second: what every user reads first
    ALPHA = 3
    SIZE = 4  # how many tokens in how many rounds, and whether the reply was stopped
    RATE = 5  # tokens per round
    DETAIL = 6  # how long the prompt took to read, the range of the chat's measurements


class Figure(NamedTuple):
    text: str
    keep: Keep


def measured_figures(comparison: Comparison, part: int, chat_measured: tuple[float, ...]) -> list[Figure]:
    """The status bar's measured figure; `part`: the number of the part it decoded again, as for `comparison_line`
    (a continuation's own, not the whole reply whose figures it follows). Beside it, once the chat has several fair
    comparisons, their range."""
    of = f" (part {part}, continued)" if part > 1 else ""
    figures = [Figure(f"measured {comparison.speedup:.2f}× {MEASURED_HOW}{of}" + comparison_caveat(comparison),
                      Keep.MEASURED)]
    if len(chat_measured) > 1:
        figures.append(Figure(f"this chat {min(chat_measured):.2f}–{max(chat_measured):.2f}× in "
                              f"{len(chat_measured)} runs", Keep.DETAIL))
    return figures


SHOWN_PREFILL_S = 0.1  # reading the prompt is named beside tokens/s (which leaves it out) once it is noticeable


def read_in_said(progress: PrefillProgress) -> str:
    """How far a prompt's read-in is, and once a chunk has been timed, the time left: "1,024 of 4,096 tokens, about
    12 s left" (the status bar, the reply's header and the CLI's bar say it so)."""
    said = f"{progress.done:,} of {progress.total:,} tokens"
    if (left := progress.seconds_left) is None:
        return said
    return said + (f", about {max(1, round(left))} s left" if left < 59.5 else f", about {round(left / 60)} min left")


def alpha_wording(stats: ReplyStats) -> str:
    """A reply's α, or "no drafts" where it verified none (plain AR, or no round drafted): α 0.00 would read as
    every draft rejected. The window's stats line and the CLI's summary both say it so."""
    return f"α {stats.alpha:.2f}" if stats.n_verified else "no drafts"


def stats_figures(reply: Reply) -> list[Figure]:
    """The reply's figures; a busy machine's estimate says so beside it, as a measured speedup may contradict it."""
    s = reply.stats
    if not s.n_tokens:  # stopped before its first round: no figures to give
        return [Figure("stopped while reading the prompt: no tokens yet" if reply.stopped else "no tokens", Keep.SIZE)]
    # A busy machine slows the tokens/s; the live figure stays fair where the reply's own plain rounds met it alike
    estimate_fair = not reply.machine_busy or reply.speedup.fair
    figures = [Figure(f"{s.n_tokens} tokens in {s.n_rounds} rounds", Keep.SIZE),
               Figure(f"{s.tokens_per_s:.1f} tok/s" + (BUSY if reply.machine_busy and estimate_fair else ""),
                      Keep.SPEED)]
    if reply.speculative:
        figures += [Figure(alpha_wording(s), Keep.ALPHA), Figure(f"{s.tokens_per_round:.2f} tok/round", Keep.RATE),
                    Figure(speedup_said(reply.speedup), Keep.ESTIMATE)]
    if s.prefill_s >= SHOWN_PREFILL_S:
        figures.append(Figure(f"prompt read in {s.prefill_s:.1f} s", Keep.DETAIL))
    if reply.stopped:
        figures.append(Figure("stopped", Keep.SIZE))
    return figures


def stats_line(reply: Reply) -> str:
    return SEPARATOR.join(figure.text for figure in stats_figures(reply))


def load_cause(reply: Reply) -> str:
    """What slowed a reply's steps, as far as the CPU use measured meanwhile says: other programs', a virtual
    machine's host's (steal time), or neither, and then this window's own drawing on few cores or the machine
    itself running slower than when the pair was timed (the twenty-sixth walk: an idle VM whose undrawn runs fell
    from 155-168 to 98-104 tok/s in minutes, with no steal)."""
    if reply.others_cores is None:
        return "other programs, or on few cores this window's own drawing"
    if causes := outside_causes(reply):
        return "; ".join(causes)
    return (f"other programs were idle, {reply.others_cores:.2f} cores on average: on few cores this window's own "
            "drawing and the display's, or this machine running slower than when the pair was timed")


def outside_causes(reply: Reply) -> list[str]:
    """The load from outside this window that the CPU use measured while a reply decoded names: other programs',
    a virtual machine's host's; none where neither was notable or neither was measured."""
    others, host = reply.others_cores, reply.host_cores
    causes = ([f"other programs used {others:.1f} cores on average meanwhile"]
              if others is not None and others > OTHERS_IDLE_CORES else [])
    if host is not None and host >= HOST_NOTABLE_CORES:
        causes.append(f"this virtual machine's host withheld {host:.2f} cores on average (steal time)")
    return causes


def busy_note(reply: Reply) -> str | None:
    """The warning under a reply whose target steps ran far slower than this machine's quiet speed, where its
    estimate could not allow for it; None otherwise (where it did, the stats line's "(machine busy)" says enough)."""
    if not reply.machine_busy or reply.speedup.fair:
        return None
    return (f"The machine was busy during this reply (target steps ran far slower than this machine's quiet speed: "
            f"{load_cause(reply)}): its timings and speedup are not a fair number.")


def unbreakable(line: str) -> str:
    """A ' · '-separated line whose figures never wrap inside themselves ("est. / 0.46× vs AR" at 1000 px); a
    remark in parentheses after a figure still may."""
    def keep_together(part: str) -> str:
        figure, parenthesis, remark = part.partition(" (")
        return figure.replace(" ", "\u00a0") + parenthesis + remark
    return " · ".join(keep_together(part) for part in line.split(" · "))


def part_label(part: int, continued: bool) -> str:
    """What names a comparison's part (`part`: its number, 1 for the reply first sent) once the reply is
    `continued`: each part's comparison is a line of its own."""
    if part > 1:
        return f"part {part} (continued): "
    return "part 1: " if continued else ""


DRAWN_SLOWER = 0.9  # a greedy reply drawn this much slower than its undrawn rerun: its line says the drawing cost it
# est. × and measured × further apart than one run's spread (engine.decoding.recommend.SPREAD): the line says why
EST_APART = 1.10


def comparison_line(comparison: Comparison, reply: Reply) -> str:
    """`reply`: the part of the reply the comparison decoded again (a continuation's own, where it continues); a
    continued reply's lines are named by `part_label`."""
    ar_tokens = len(comparison.ar_tokens)
    if comparison.stopped:  # a few AR tokens against a whole reply would claim a speedup nobody measured
        return f"comparison stopped (plain AR made {ar_tokens} tokens): no measured speedup"
    # Both runs are undrawn, the reply decoded again beside plain AR: a reply shown as it streams met the window's
    # drawing, which on few cores slows it (155 tok/s against 114 for the same prompt on 2 cores). A chat saved
    # before the rerun measured its streamed reply: the line says so.
    rerun = len(comparison.spec_tokens)
    # sampled, the runs draw other random numbers than the reply did (its rounds drafted as the live planner chose),
    # so they are other samples, of other lengths: the line says so where it is not the reply's own text
    other = (" (other samples of these settings, not this reply's text)"
             if not reply.request.settings.greedy and rerun and comparison.spec_tokens != reply.tokens else "")
    line = ((f"both decoded again, undrawn{other}: plain AR {ar_tokens} tokens" if rerun
             else f"plain AR, run undrawn: {ar_tokens} tokens")
            + f" in {comparison.ar_decode_s:.2f} s ({comparison.ar_tokens_per_s:.1f} tok/s) "
            f"vs speculative {rerun or reply.stats.n_tokens} in {comparison.spec_decode_s:.2f} s "
            f"({comparison.spec_tokens_per_s:.1f} tok/s) → measured {comparison.speedup:.2f}×"
            + comparison_caveat(comparison))
    if max(comparison.ar_prefill_s, comparison.spec_prefill_s) >= SHOWN_PREFILL_S:
        line += (f" · the prompt read in {comparison.ar_prefill_s:.1f} s by AR, {comparison.spec_prefill_s:.1f} s by "
                 "both models")
    if comparison.identical is not None:
        line += " · greedy outputs identical" if comparison.identical else " · greedy outputs differ"
    if estimate_apart(comparison, reply):
        line += " · the reply's live × was of it as drawn"
    return line


def estimate_apart(comparison: Comparison, reply: Reply) -> str:
    """Why a greedy reply's live × stands apart from its measurement undrawn, or drawing slowed it, in both factors
    (the comparison line's details, shown on demand); "" where neither."""
    drawn, estimate = reply.stats.tokens_per_s, reply.speedup.value or 0.0
    apart = estimate > 0 and comparison.speedup > 0 and not 1 / EST_APART <= estimate / comparison.speedup <= EST_APART
    if comparison.stopped or not comparison.spec_tokens or not reply.request.settings.greedy or not (
            drawn < DRAWN_SLOWER * comparison.spec_tokens_per_s or apart):
        return ""
    # live / measured = (drawn / undrawn reply) × (undrawn AR / AR as the reply's plain rounds ran): both factors said
    slower = 1 - drawn / comparison.spec_tokens_per_s
    said = (f"Drawn as it streamed, the reply made {drawn:.1f} tok/s, {abs(slower):.0%} "
            f"{'below' if slower >= 0 else 'above'} its undrawn run: its live × is of the reply as drawn")
    if estimate > 0:
        said += (f" ({estimate:.2f}×, against plain AR at about {drawn / estimate:.1f} tok/s as its own plain rounds "
                 f"ran, where undrawn it made {comparison.ar_tokens_per_s:.1f})")
    return said + "."


def remote_header(model: str, url: str, settings: DecodeSettings) -> str:
    """A remote engine's reply: who wrote it; it drafts with its own speculative config, so no γ here."""
    how = "greedy" if settings.greedy else f"sampling T={settings.temperature:g}"
    return f"Assistant · {model} at {url}, {how}"


def remote_line(reply: Reply) -> str:
    """A remote engine's reply: our tokens/s, then its own acceptance counts (no per-token fates)."""
    engine = reply.remote.reply if reply.remote is not None else None
    if engine is None:
        return "stopped · the engine reports its figures only for a finished reply"
    line = f"{engine.n_tokens} tokens · {engine.tokens_per_s:.1f} tok/s (measured here)"
    spec = engine.spec
    if spec is not None and spec.draft_tokens:
        line += f" · acceptance {spec.acceptance_rate:.2f}"
        if spec.mean_acceptance_length is not None:
            line += f" · mean acceptance length {spec.mean_acceptance_length:.2f}"
    elif spec is not None:
        line += " · nothing drafted"
    return line + (" · stopped" if reply.stopped else "")


def model_said(name: str, short: bool = False) -> str:
    """A model as a person knows it: a local path by the name its store lists it under (an Ollama blob is
    `qwen2.5-coder:0.5b`, not `sha256-…`), else by its file or folder name (`short`, for the status bar) or whole;
    a hub id or short name as given."""
    if not name.startswith(("/", ".", "~")):
        return name
    return listed_name(name) or (Path(name).name if short else name)


def pair_said(pair: PairInfo, short: bool = False) -> str:
    """Which models, where and in which dtype: the status bar's name of the loaded pair (`short`: local paths not
    listed by a store by their file names) and the Markdown export's of a chat's or a reply's."""
    draft = model_said(pair.draft.name, short) if pair.draft else "no draft (AR only)"
    native = " · 4-bit GGUF target" if pair.target.weights == "native" else ""
    return f"{model_said(pair.target.name, short)} + {draft} · {pair.device} · {pair.dtype}{native}"
