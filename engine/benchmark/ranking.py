"""A pick of drafts as records: each candidate's measurement (Pick), a target's ranking of them (Ranking), kept per
target, machine and kind of prompt, and the words the draft list and `specdec pick-draft` show for them. No torch:
the widgets read these; engine.benchmark.pick_draft measures them.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

LOOKUP = "lookup"
NONE = "none"
KINDS = ("code", "chat")


@dataclass(frozen=True)
class Pick:
    """One candidate's measurement (figures None where it was not measured: `problem` says why)."""

    draft: str  # a model name, LOOKUP or NONE
    measured_speedup: float | None = None
    predicted_speedup: float | None = None
    alpha: float | None = None
    tokens_per_round: float | None = None
    per_position_acceptance: list[float] = field(default_factory=list)
    draft_step_ms: float | None = None
    target_step_ms: float | None = None
    problem: str | None = None


@dataclass(frozen=True)
class Ranking:
    target: str
    kind: str
    machine: str
    measured_on: str  # ISO date
    picks: list[Pick]  # best measured speedup first; unmeasured ones last

    @property
    def best(self) -> Pick:
        return self.picks[0]

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def rank(picks: Sequence[Pick]) -> list[Pick]:
    """Best measured speedup first (plain AR's 1.0 among them); candidates not measured last, in their order."""
    measured = sorted((p for p in picks if p.measured_speedup is not None), key=lambda p: -p.measured_speedup)
    return measured + [p for p in picks if p.measured_speedup is None]


def keep(ranking: Ranking, file: Path) -> None:
    """Best effort, as the costs file: a pick that cannot be kept is measured again next time."""
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        partial = file.with_suffix(".tmp")
        partial.write_text(json.dumps(ranking.as_dict(), indent=1), encoding="utf-8")
        partial.replace(file)
    except OSError:
        pass


def kept_ranking(file: Path) -> Ranking | None:
    """The ranking kept in `file`, or None (none kept, or not readable as one: measured again)."""
    try:
        fields = json.loads(file.read_text(encoding="utf-8"))
        fields["picks"] = [Pick(**pick) for pick in fields["picks"]]
        return Ranking(**fields)
    except (OSError, ValueError, TypeError, KeyError):
        return None


def summary_line(pick: Pick, ranking: Ranking) -> str:
    """What the draft list shows beside a measured candidate: '1.31x on code here, measured 2026-12-05'."""
    if pick.measured_speedup is None:
        return pick.problem or "not measured"
    return f"{pick.measured_speedup:.2f}x on {ranking.kind} here, measured {ranking.measured_on}"


def ranking_table(ranking: Ranking) -> str:
    """The ranking as a Markdown table, best first."""
    def figure(value: float | None, spec: str) -> str:
        return "" if value is None else format(value, spec)

    lines = ["| rank | draft | measured | predicted | α | tokens/round | draft step ms | target step ms |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for place, pick in enumerate(ranking.picks, 1):
        name = Path(pick.draft).name  # a model's file or folder name; lookup and none as they are
        if pick.problem:
            lines.append(f"| | {name} | {pick.problem} | | | | | |")
            continue
        lines.append(f"| {place} | {name} | {figure(pick.measured_speedup, '.2f')}x | "
                     f"{figure(pick.predicted_speedup, '.2f')}x | {figure(pick.alpha, '.2f')} | "
                     f"{figure(pick.tokens_per_round, '.2f')} | {figure(pick.draft_step_ms, '.1f')} | "
                     f"{figure(pick.target_step_ms, '.1f')} |")
    return "\n".join(lines)
