"""How a reply's figures are worded, in the chat, the status bar and the Markdown export."""
from __future__ import annotations

from engine.events import DecodeSettings, Mode
from engine.stats import ReplyStats
from ui.session import Comparison, Reply


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


UNFAIR = " (machine busy — not a fair number)"
UNEQUAL = " (the two runs met the machine at different loads — not a fair number)"


def comparison_caveat(comparison: Comparison) -> str:
    """Why a measured speedup is not a fair number, if it is not (the estimate allows for load; this does not)."""
    return UNFAIR if comparison.machine_busy else UNEQUAL if comparison.unequal_loads else ""
SHOWN_PREFILL_S = 0.1  # reading the prompt is named beside tokens/s (which leaves it out) once it is noticeable


def alpha_wording(stats: ReplyStats) -> str:
    """A reply's α, or "no drafts" where it verified none (plain AR, or no round drafted): α 0.00 would read as
    every draft rejected. The window's stats line and the CLI's summary both say it so."""
    return f"α {stats.alpha:.2f}" if stats.n_verified else "no drafts"


def stats_line(reply: Reply) -> str:
    """The reply's figures; a busy machine's estimate says so beside it, as a measured speedup may contradict it."""
    s = reply.stats
    if not s.n_tokens:  # stopped before its first round: no figures to give
        return "stopped while reading the prompt: no tokens yet" if reply.stopped else "no tokens"
    line = f"{s.n_tokens} tokens in {s.n_rounds} rounds · {s.tokens_per_s:.1f} tok/s"
    if reply.request.settings.mode is Mode.SPEC:
        line += (f" · {alpha_wording(s)} · {s.tokens_per_round:.2f} tok/round · "
                 f"est. {reply.estimated_speedup:.2f}× vs AR" + (UNFAIR if reply.machine_busy else ""))
    if s.prefill_s >= SHOWN_PREFILL_S:
        line += f" · prompt read in {s.prefill_s:.1f} s"
    return line + (" · stopped" if reply.stopped else "")


def unbreakable(line: str) -> str:
    """A ' · '-separated line whose figures never wrap inside themselves ("est. / 0.46× vs AR" at 1000 px); a
    remark in parentheses after a figure still may."""
    def keep_together(part: str) -> str:
        figure, parenthesis, remark = part.partition(" (")
        return figure.replace(" ", "\u00a0") + parenthesis + remark
    return " · ".join(keep_together(part) for part in line.split(" · "))


def comparison_line(comparison: Comparison, reply: Reply) -> str:
    ar_tokens = len(comparison.ar_tokens)
    if comparison.stopped:  # a few AR tokens against a whole reply would claim a speedup nobody measured
        return f"plain AR stopped after {ar_tokens} tokens: no measured speedup"
    line = (f"plain AR: {ar_tokens} tokens in {comparison.ar_decode_s:.2f} s ({comparison.ar_tokens_per_s:.1f} tok/s) "
            f"vs speculative {reply.stats.n_tokens} in {comparison.spec_decode_s:.2f} s "
            f"({comparison.spec_tokens_per_s:.1f} tok/s) → measured {comparison.speedup:.2f}×"
            + comparison_caveat(comparison))
    if max(comparison.ar_prefill_s, comparison.spec_prefill_s) >= SHOWN_PREFILL_S:
        line += (f" · the prompt read in {comparison.ar_prefill_s:.1f} s by AR, {comparison.spec_prefill_s:.1f} s by "
                 "both models")
    if comparison.identical is not None:
        line += " · greedy outputs identical" if comparison.identical else " · greedy outputs differ"
    return line


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
