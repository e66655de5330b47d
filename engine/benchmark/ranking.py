"""A pick of drafts as records: each candidate's measurement (Pick), a target's ranking of them (Ranking), kept per
target, machine and kind of prompt, and the words the draft list and `specdec pick-draft` show for them. No torch:
the widgets read these; engine.benchmark.pick_draft measures them.

A measured speedup ranks a candidate only where it is a fair figure (`judge`): the plain AR replies it was divided
by met the load the others met, and it is no more than its own rounds allow (a round that makes t tokens costs one
target step at least, so t tokens a round beat plain AR by t× at most: engine.stats.above_its_rounds, the live
figure's rule too). A figure that is not fair stays in its row with the reason, ranked after the fair
ones.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine.stats import above_its_rounds

LOOKUP = "lookup"
NONE = "none"
KINDS = ("code", "chat")
# The plain AR replies a candidate was divided by were slowed by other work where their target step took this many
# times the median step of every plain reply of the pick
SLOWED_BASELINE = 1.25
SLOWED_NOTE = "not a fair figure: the plain run beside it was slowed by other work"


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
    target_step_ms: float | None = None  # plain AR's step in the replies it was divided by
    problem: str | None = None
    # How sure the figure is: the paired replies it comes from (each against the plain AR reply of its turn) and
    # the band the speedup lies in (pick_draft.band: about 95 % sure); None before there are enough replies
    replies: int = 0
    low: float | None = None
    high: float | None = None
    note: str = ""  # why its figure is not a fair one (judge): it then ranks after the fair ones
    dropped: bool = False  # clearly behind the best: measured no more

    @property
    def fair(self) -> bool:
        return self.measured_speedup is not None and not self.note


@dataclass(frozen=True)
class Ranking:
    target: str
    kind: str
    machine: str
    measured_on: str  # ISO date
    picks: list[Pick]  # best fair speedup first; unmeasured ones last (rank)
    seconds: float | None = None  # what the pick took, its models' loading included

    @property
    def best(self) -> Pick:
        return self.picks[0]

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def judge(picks: Sequence[Pick], plain_step_ms: float | None) -> list[Pick]:
    """`picks`, each measured candidate with the note that says why its figure is not fair, if it is not (see the
    module docstring); `plain_step_ms`: the median target step of every plain AR reply of the pick."""
    def note(pick: Pick) -> str:
        if pick.draft == NONE or pick.measured_speedup is None:
            return pick.note
        if plain_step_ms and pick.target_step_ms and pick.target_step_ms > SLOWED_BASELINE * plain_step_ms:
            return SLOWED_NOTE
        if pick.tokens_per_round and above_its_rounds(pick.measured_speedup, pick.tokens_per_round):
            return f"above what its {pick.tokens_per_round:.2f} tokens a round allow"
        return ""

    return [dataclasses.replace(pick, note=note(pick)) for pick in picks]


def rank(picks: Sequence[Pick]) -> list[Pick]:
    """Best fair speedup first (plain AR's 1.0 among them), then the figures that are not fair (best first too),
    then the candidates not measured, in their order."""
    def by_figure(fair: bool) -> list[Pick]:
        return sorted((p for p in picks if p.measured_speedup is not None and p.fair == fair),
                      key=lambda p: -p.measured_speedup)

    return by_figure(True) + by_figure(False) + [p for p in picks if p.measured_speedup is None]


def clearly_best(picks: Sequence[Pick]) -> bool:
    """Whether the first of these ranked picks is clearly ahead: its band's low end above the band of every other
    measured candidate, a figure that is not fair included (plain AR's band is 1.0 exactly: it is the reference).
    A candidate without a band yet (too few replies) is not beaten yet."""
    measured = [p for p in picks if p.measured_speedup is not None]
    if not measured or not measured[0].fair or measured[0].low is None:
        return False
    return all(p.high is not None and measured[0].low > p.high for p in measured[1:])


def sureness(pick: Pick) -> str:
    """How sure a figure is, in words: 'from 6 replies, 1.12–1.50x' (the band once there are enough replies)."""
    if pick.draft == NONE or pick.measured_speedup is None:
        return ""
    band = f", {pick.low:.2f}–{pick.high:.2f}x" if pick.low is not None else ", too few for a band"
    return f"from {pick.replies} repl{'y' if pick.replies == 1 else 'ies'}{band}" + (" (dropped)" * pick.dropped)


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
    if pick.note:
        return f"{pick.note}, measured {ranking.measured_on}"
    return f"{pick.measured_speedup:.2f}x on {ranking.kind} here, measured {ranking.measured_on}"


def ranking_table(ranking: Ranking) -> str:
    """The ranking as a Markdown table, best first."""
    def figure(value: float | None, spec: str) -> str:
        return "" if value is None else format(value, spec)

    lines = ["| rank | draft | measured | how sure | predicted | α | tokens/round | draft step ms | target step ms |",
             "|---:|---|---:|---|---:|---:|---:|---:|---:|"]
    for place, pick in enumerate(ranking.picks, 1):
        name = Path(pick.draft).name  # a model's file or folder name; lookup and none as they are
        if pick.problem:
            lines.append(f"| | {name} | {pick.problem} | | | | | | |")
            continue
        # a figure that is not fair is not shown, nor ranked: its row says why
        measured = pick.note or f"{figure(pick.measured_speedup, '.2f')}x"
        lines.append(f"{f'| {place} |' if pick.fair else '| |'} {name} | {measured} | {sureness(pick)} | "
                     f"{figure(pick.predicted_speedup, '.2f')}x | {figure(pick.alpha, '.2f')} | "
                     f"{figure(pick.tokens_per_round, '.2f')} | {figure(pick.draft_step_ms, '.1f')} | "
                     f"{figure(pick.target_step_ms, '.1f')} |")
    return "\n".join(lines)
