"""Why this γ, as plain records: a session's acceptance by draft position, its measured points, and what the
pair's cost model recommends under that acceptance (engine.decoding.recommend). No Qt and no torch: the chat
controller, the export and the tests read the same figures the window draws.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.decoding.costs import SCRATCH_POSITIONS
from engine.decoding.recommend import (MARGIN, MAX_GAMMA, NO_ROUNDS, SPREAD, Measured, Recommendation,
                                       cost_model_from_dict, recommend, round_tokens, stop_threshold)
from engine.events import DecodeSettings, Drafting, Mode, PairInfo, RoundEvent
from engine.stats import CopyRunAcceptance, PositionAcceptance, copy_run_acceptance, position_acceptance
from words.records import DrafterComparison, NumberedReply, Session, numbered_replies, same_models


def drafting_of(settings: DecodeSettings) -> Drafting:
    """Which drafters a reply's rounds used: plain AR, the draft model alone, or with copying."""
    if settings.mode is Mode.AR:
        return Drafting.NONE
    return Drafting.BOTH if settings.lookup else Drafting.MODEL


@dataclass(frozen=True)
class MeasuredPoint:
    """A reply, a fairly compared part of one, or a Compare drafters run of this session on the predicted-speedup
    chart: its γ cap and its speedup vs AR (the measured comparison where it has one, else the reply's live figure)."""

    drafting: Drafting
    gamma: int
    speedup: float
    measured: bool  # True: from a fair Compare with AR run (not busy, not at unequal loads) or Compare drafters
    # Drafted by cost-aware rounds, as the predicted lines are; False: by the confidence stop, a rule whose runs
    # say nothing of those lines (they draft where cost-aware rounds would not), so they do not scale them
    cost_aware: bool = True
    origin: str = ""  # what ran it: "reply 2", "reply 3, part 2 (of 3)", "Compare drafters"

    def said(self) -> str:
        """The point's tooltip: what ran it, with which drafting and rule, and where its figure comes from."""
        source = ("no fair Compare with AR: the reply's live figure" if not self.measured
                  else "a fair Compare with AR" if self.origin.startswith("reply") else "its plain AR run")
        rule = "cost-aware rounds" if self.cost_aware else "the confidence stop (the lines do not predict it)"
        return (f"{self.origin}: {self.drafting.label}, γ ≤ {self.gamma}, drafted by {rule}\n"
                f"{'measured' if self.measured else 'live'} {self.speedup:.2f}× vs plain AR ({source})")


@dataclass(frozen=True)
class WhyGamma:
    """What the "why this γ" charts and the γ slider's label show after a reply."""

    costs: dict  # the pair's cost model (CostModel.as_dict, milliseconds); empty: not measured
    session: PositionAcceptance
    points: tuple[MeasuredPoint, ...] = ()
    recommendation: Recommendation | None = None  # None: no cost model, or no speculative reply yet
    profiles: dict[Drafting, PositionAcceptance] = field(default_factory=dict)
    costs_note: str = ""  # where the costs come from, when not from this load's timing
    # each drafting's fair cost-aware measurements with the acceptance their own rounds met (what scales the lines)
    measured: dict[Drafting, tuple[Measured, ...]] = field(default_factory=dict)
    rounds: tuple[RoundEvent, ...] = ()  # the rounds `session` counts: the loaded pair's speculative replies'
    left_out: PairInfo | None = None  # the pair of the last speculative reply left out as another pair's, if any
    last_left_out: bool = False  # the chat's last reply is another pair's: its own figures are not this pair's
    machine: str = ""  # what ran the pair: the vector instructions and threads ("" where not known)
    copy_runs: CopyRunAcceptance = CopyRunAcceptance()  # the rounds' copies kept by their place in a run of copies

    @property
    def only_another_pairs(self) -> bool:
        """Every speculative reply of the chat is another pair's than the one loaded (`left_out` names it)."""
        return self.left_out is not None and not self.rounds

    def as_dict(self) -> dict:
        return {"costs": self.costs, "costs_note": self.costs_note, "session_acceptance": self.session.as_dict(),
                "acceptance_by_drafting": {d.value: p.as_dict() for d, p in self.profiles.items()},
                "copy_run_acceptance": self.copy_runs.as_dict(),
                "recommendation": None if self.recommendation is None else self.recommendation.as_dict()}


def by_the_pair(session: Session, numbered: NumberedReply) -> bool:
    """Whether the session's pair decoded the reply (or either is not known): another pair's acceptance and speed
    say nothing of this one's."""
    return numbered.pair is None or session.pair is None or same_models(numbered.pair, session.pair)


def chat_length(session: Session) -> int:
    """The positions the next reply's rounds will attend to at least: the conversation as its last reply left it
    (0 where the rounds do not say, as in chats saved before they did)."""
    last = next((reply.events[-1] for reply, _ in reversed(session.shown_replies()) if reply.events), None)
    return last.positions + len(last.emitted) if last is not None and last.positions else 0


def drafter_points(comparison: DrafterComparison) -> list[tuple[MeasuredPoint, Sequence[RoundEvent]]]:
    """The Compare drafters runs that drafted, each measured against its plain AR run, with the rounds it ran."""
    settings = comparison.request.settings
    return [(MeasuredPoint(run.drafting, settings.gamma, row["vs_ar"], True, settings.cost_aware, "Compare drafters"),
             run.events)
            for run, row in zip(comparison.runs, comparison.rows())
            if run.drafting is not Drafting.NONE and row["drafted"] and row["vs_ar"] and not row["stopped"]
            and not row["beyond_rounds"]]


def measured_run(point: MeasuredPoint, events: Sequence[RoundEvent]) -> Measured:
    """A measured point with the acceptance its own rounds met, by which the cost model predicts that very run."""
    positions = events[0].positions if events and events[0].positions else SCRATCH_POSITIONS
    return Measured(point.gamma, point.speedup, position_acceptance(events), positions)


def why_gamma(session: Session, costs_note: str = "") -> WhyGamma:
    """The session's acceptance (every speculative round), each drafting's own (a cost-aware Compare drafters run's
    rounds counted in them, not in the session's chart), its replies and measured runs as points, and the
    recommendation, its predictions scaled to agree with the measured points; `costs_note` says where the pair's
    costs come from, when not from its timing at load."""
    replies = numbered_replies(session)  # numbered as the chat and the export number them
    drafted = [reply for reply in replies if reply.whole.speculative and reply.whole.events]
    shown = [numbered for numbered in drafted if by_the_pair(session, numbered)]
    left_out = next((numbered.pair for numbered in reversed(drafted) if not by_the_pair(session, numbered)), None)
    # The lines predict cost-aware rounds, so a drafting's acceptance is its cost-aware rounds' where the chat has
    # any: the confidence stop drafts where they would not (walk 29: its rounds held copying's line under a fair
    # cost-aware reply's 1.16×). A drafting only ever run with the confidence stop is predicted from those rounds.
    cost_aware, confidence = {}, {}
    for numbered in shown:
        settings = numbered.whole.request.settings
        rounds = cost_aware if settings.cost_aware else confidence
        rounds.setdefault(drafting_of(settings), []).extend(numbered.whole.events)
    # a confidence-stop Compare drafters run stays out, with its speedup: the chat's own replies say how it drafts
    for run in (run for comparison in session.drafters if comparison.cost_aware for run in comparison.runs):
        if run.drafting is not Drafting.NONE and run.events:
            cost_aware.setdefault(run.drafting, []).extend(run.events)
    events = {**confidence, **cost_aware}
    profiles = {drafting: position_acceptance(rounds) for drafting, rounds in events.items()}
    points = []  # each with the rounds whose speed it is
    for numbered in shown:
        # each fairly compared part is a dot of its own; with none, the reply's fair live figure stands, drawn hollow
        n_parts, reply = len(numbered.parts), numbered.whole
        fair = [(k, part, comparison)
                for k, (part, comparison) in enumerate(zip(numbered.parts, numbered.comparisons), start=1)
                if comparison is not None and comparison.fair]
        for k, part, comparison in fair:
            settings = part.request.settings
            origin = f"reply {numbered.number}" + (f", part {k} (of {n_parts})" if n_parts > 1 else "")
            points.append((MeasuredPoint(drafting_of(settings), part.gamma, comparison.speedup, True,
                                         settings.cost_aware, origin), comparison.spec_events or part.events))
        if not fair and reply.speedup.fair:
            settings = reply.request.settings
            points.append((MeasuredPoint(drafting_of(settings), reply.gamma, reply.speedup.value, False,
                                         settings.cost_aware, f"reply {numbered.number}"), reply.events))
    for comparison in session.drafters:
        points += drafter_points(comparison)
    measured_points = {}
    for point, rounds in points:
        if point.measured and point.cost_aware:
            measured_points.setdefault(point.drafting, []).append(measured_run(point, rounds))
    measured_points = {drafting: tuple(runs) for drafting, runs in measured_points.items()}
    costs = dict(session.pair.costs) if session.pair is not None and session.pair.costs else {}
    model = cost_model_from_dict(costs) if costs else None
    # a model with no time for an AR step (an injected one, in tests) has no rate to compare drafts with
    timed = model is not None and model.ar_token_s > 0
    recommendation = (recommend(model, profiles, MAX_GAMMA, chat_length(session), measured_points)
                      if timed and profiles else None)
    rounds = tuple(e for numbered in shown for e in numbered.whole.events)
    runtime = session.runtime
    machine = f"{runtime.cpu_capability}, {runtime.threads} threads" if runtime is not None else ""
    return WhyGamma(costs, position_acceptance(rounds), tuple(point for point, _ in points), recommendation, profiles,
                    costs_note, measured_points, rounds, left_out,
                    bool(replies) and not by_the_pair(session, replies[-1]), machine, copy_run_acceptance(rounds))


def place_bins(places: int) -> list[tuple[int, int]]:
    """(first, last) places a line of copy acceptance pools: 1 to 4 each alone, where a run is won or lost, then
    5–8, 9–16, 17–32, …, whose copies mostly follow one another and are few each."""
    bins, first = [], 1
    while first <= places:
        last = first if first <= 4 else 2 * first - 2
        bins.append((first, min(last, places)))
        first = last + 1
    return bins


def copy_run_line(why: WhyGamma) -> str:
    """The share of copies the target kept by their place in a run of copies, in one line ("" where the chat's rounds
    checked no copy): why a long copied run pays where its first copy is a guess."""
    runs = why.copy_runs
    if not runs.checked:
        return ""
    said = []
    for first, last in place_bins(len(runs.checked)):
        checked, kept = sum(runs.checked[first - 1:last]), sum(runs.kept[first - 1:last])
        places = str(first) if first == last else f"{first}–{last}"
        said.append(f"{places}: {kept / checked:.0%} of {checked}")
    return "Copies kept by their place in a run of copies (1: a run's first): " + " · ".join(said) + "."


def copy_run_tip(why: WhyGamma) -> str:
    """The line's tooltip: every place's own count."""
    runs = why.copy_runs
    return "\n".join(f"place {j}: {kept} of {checked} copies kept" for j, (checked, kept)
                     in enumerate(zip(runs.checked, runs.kept), start=1))


def machine_line(why: WhyGamma) -> str:
    """What decides drafting on this CPU, in one line, from the measured costs: what a checked row adds to a step,
    and the acceptance a one-draft round needs to beat a plain step ("" without a cost model)."""
    model = cost_model_from_dict(why.costs) if why.costs else None
    if model is None or model.ar_token_s <= 0 or len(model.target_block_s) < 2:
        return ""
    row = (model.block_s(2) - model.block_s(1)) / model.ar_token_s
    break_even = stop_threshold(model, NO_ROUNDS, 0, Drafting.MODEL if model.draft_step_s else Drafting.LOOKUP)
    here = f" ({why.machine})" if why.machine else ""
    pays = (f"a draft pays only where it is kept more often than α ≈ {break_even:.2f}" if break_even < 1
            else "no single draft can pay, however often it is kept")
    return f"A checked row costs {row:.0%} of a step here{here}; {pays}."


def recommendation_text(why: WhyGamma) -> str:
    """The label beside the γ slider."""
    recommendation = why.recommendation
    if recommendation is None and why.only_another_pairs:
        return "recommended γ: after a speculative reply of the pair loaded now"
    if recommendation is None:
        return "recommended γ: after a speculative reply"
    if recommendation.drafting is Drafting.NONE:
        return "recommended: plain AR (no draft is sure to pay here)"
    return (f"recommended γ ≤ {recommendation.gamma} (predicted {recommendation.speedup:.2f}×, "
            f"{recommendation.drafting.label})")


def confidence_note(why: WhyGamma) -> str:
    """Where a measured confidence-stop run beat the recommendation by more than one run's spread, that it did: the
    lines predict cost-aware rounds, which never draft as far, so they cannot show it ("" otherwise)."""
    recommendation = why.recommendation
    if recommendation is None:
        return ""
    beaten = [p for p in why.points if p.measured and not p.cost_aware and p.speedup > recommendation.speedup * SPREAD]
    if not beaten:
        return ""
    best = max(beaten, key=lambda p: p.speedup)
    # the chat's own confidence-stop replies, fairly measured on their prompts, may say otherwise
    replies = [p.speedup for p in why.points if p.measured and not p.cost_aware and p.origin.startswith("reply")]
    own = (f" This chat's own confidence-stop replies measured {min(replies):.2f}–{max(replies):.2f}× on their "
           "prompts: what drafts pay moves with what a prompt lets them copy." if replies else "")
    return (f"{best.origin} measured {best.drafting.label} at {best.speedup:.2f}× with the confidence stop on its "
            f"prompt, above this {recommendation.speedup:.2f}×: its longer drafts paid there, which cost-aware rounds "
            f"do not try (Draft length: confidence).{own}")


def measured_short_note(why: WhyGamma) -> str:
    """Where every fair measurement of the recommended drafting (cost-aware rounds, as the lines predict) fell short
    of the MARGIN a recommendation needs, or of the recommendation by more than one run's spread, that they did and
    why the prediction stands apart: it rests on the chat's rounds as a whole, and within one run's spread of a run's
    own prediction a measurement does not rescale it (walks saw copying recommended at 1.11× beside a run of it at
    1.01×, and the draft model's prediction rise to 1.32× after runs of it at 0.81-0.95×) ("" otherwise)."""
    recommendation = why.recommendation
    if recommendation is None or recommendation.drafting is Drafting.NONE:
        return ""
    drafting = recommendation.drafting
    runs = [p for p in why.points if p.measured and p.cost_aware and p.drafting is drafting]
    if not runs:
        return ""
    best, worst = max(runs, key=lambda p: p.speedup), min(runs, key=lambda p: p.speedup)
    short = best.speedup < MARGIN
    if not short and recommendation.speedup <= best.speedup * SPREAD:
        return ""
    figures = (f"{best.speedup:.2f}× ({best.origin})" if len(runs) == 1
               else f"{worst.speedup:.2f}–{best.speedup:.2f}× ({len(runs)} runs)")
    gap = (f"short of the {MARGIN - 1:.0%} gain this recommendation needs" if short
           else f"below this {recommendation.speedup:.2f}×")
    rounds = ""
    measured, profile = why.measured.get(drafting, ()), why.profiles.get(drafting)
    if measured and profile is not None:
        theirs = sum(round_tokens(run.profile, min(run.gamma, MAX_GAMMA)) for run in measured) / len(measured)
        ours = round_tokens(profile, recommendation.gamma)
        rounds = (f"; the prediction is of this chat's rounds as a whole, {ours:.2f} tokens a round at "
                  f"γ ≤ {recommendation.gamma}, where the measured runs made {theirs:.2f}")
    return (f"Measured: {drafting.label} at {figures}, {gap}{rounds}; a run can be {SPREAD - 1:.0%} off, so "
            "Compare drafters again before counting on it.")


def estimate_note(why: WhyGamma) -> str:
    """Where plain AR is recommended but the last reply (cost-aware rounds) reached the MARGIN a recommendation
    needs, by its own estimate or a fair Compare with AR, why the two differ: the estimate is the rounds' time
    against plain AR priced at the load they met, a measurement is of that one prompt, and the lines predict the
    chat's cost-aware rounds as a whole at this machine's quietest timings (walks saw "Best here: plain AR" beside
    a reply's "est. 1.15×", and beside one measured 1.16×) ("" otherwise)."""
    recommendation = why.recommendation
    if recommendation is None or recommendation.drafting is not Drafting.NONE:
        return ""
    last = next((p for p in reversed(why.points) if p.origin.startswith("reply")), None)
    if last is None or not last.cost_aware or last.speedup < MARGIN:
        return ""
    if last.measured:
        return (f"{last.origin.capitalize()} measured {last.speedup:.2f}× on its own prompt (a fair Compare with "
                "AR); the lines predict this chat's cost-aware rounds as a whole, at this machine's quietest "
                f"timings, where no drafting gains {MARGIN - 1:.0%}: what drafts pay moves with the prompt.")
    return (f"{last.origin.capitalize()}'s live figure, {last.speedup:.2f}× (hollow dot), is its rounds' time "
            "against its own plain rounds at the load they met; the lines are predicted from this machine's quietest "
            "timings, where no drafting gains that much. Compare with AR measures which holds here.")
