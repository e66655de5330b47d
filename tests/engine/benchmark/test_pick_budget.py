"""A pick within its time budget: turns of one plain AR reply and one reply of each candidate, candidates clearly
behind dropped, an early end once one is clearly best, Stop heard within a round, and figures that are not fair
(a slowed plain run beside them, more than their tokens per round allow) not ranked by."""
import itertools
import threading
import time

import pytest

from engine.benchmark import pick_draft as picking
from engine.benchmark import ranking as ranked
from engine.benchmark.ranking import LOOKUP, NONE, Pick
from engine.events import RoundEvent
from tests.app.test_cli import saved_chain_pair
from tests.tiny import cheap_draft_costs

PROMPTS = ["a", "b"]
TOKENS = 16  # the chain pair's replies end at their EOS first (15 tokens)


@pytest.fixture
def cheap_drafts(monkeypatch):
    """Tiny models' draft steps cost what their targets' do: plan on costs under which drafts pay."""
    from engine.decoding.decoder import Decoder

    monkeypatch.setattr(Decoder, "warm_up", lambda self, **kw: self.set_costs(cheap_draft_costs()))


def paced(monkeypatch, seconds_a_token: dict[str, float]) -> None:
    """Each timed reply takes, instead of what it took, its tokens times its method's pace here (± 0.5 % in turn):
    how fast each candidate is, made known."""
    real = picking._timed_reply
    wobbles = itertools.cycle((1.0, 1.005, 0.995))

    def timed(decoder, config, *args):
        run = real(decoder, config, *args)
        if run is not None:
            run.wall_s = len(run.tokens) * seconds_a_token.get(config.method, 1.0) * next(wobbles)  # warm-ups: any
        return run

    monkeypatch.setattr(picking, "_timed_reply", timed)


def test_a_pick_ends_once_one_candidate_is_clearly_best(tmp_path, monkeypatch, cheap_drafts):
    target, draft = saved_chain_pair(tmp_path)
    paced(monkeypatch, {"ar": 0.01, "spec_draft": 0.01 / 1.4, "spec_lookup": 0.01})
    picks = picking.pick_draft(target, [draft, LOOKUP, NONE], PROMPTS, max_new_tokens=TOKENS, seconds=600)
    by_draft = {p.draft: p for p in picks}
    assert picks[0].draft == draft and picks[0].measured_speedup == pytest.approx(1.4, rel=0.02)
    assert 1.0 < picks[0].low < 1.4 < picks[0].high and ranked.clearly_best(picks)
    # three turns give the first bands: the draft's lies above the others', so the pick ends there, not at 600 s
    assert by_draft[NONE].replies == picking.SURE_FROM and by_draft[draft].replies == picking.SURE_FROM


def test_a_candidate_clearly_slower_than_plain_ar_is_measured_no_more(tmp_path, monkeypatch, cheap_drafts):
    target, draft = saved_chain_pair(tmp_path)
    paced(monkeypatch, {"ar": 0.01, "spec_draft": 0.01, "spec_lookup": 0.01 / 0.7})
    seconds = 6.0
    started = time.monotonic()
    picks = picking.pick_draft(target, [draft, LOOKUP, NONE], PROMPTS, max_new_tokens=TOKENS, seconds=seconds)
    took = time.monotonic() - started
    by_draft = {p.draft: p for p in picks}
    lookup, tie = by_draft[LOOKUP], by_draft[draft]
    assert lookup.dropped and lookup.replies == picking.SURE_FROM and lookup.high < 1.0
    # the draft is as fast as plain AR: never clearly ahead nor behind, measured until the budget is spent
    assert not tie.dropped and tie.replies > picking.SURE_FROM and tie.low < 1.0 < tie.high
    assert not ranked.clearly_best(picks)
    assert took < seconds + 1.0  # the reply running at the deadline is let go


def test_a_pick_that_runs_out_of_time_loading_says_so_for_each_candidate(tmp_path, cheap_drafts):
    target, draft = saved_chain_pair(tmp_path)
    picks = picking.pick_draft(target, [draft, LOOKUP], PROMPTS, max_new_tokens=TOKENS, seconds=1e-3)
    by_draft = {p.draft: p for p in picks}
    assert by_draft[draft].measured_speedup is None and "time budget" in by_draft[draft].problem
    assert by_draft[NONE].replies == 0


def slowed_rounds(monkeypatch, seconds: float, tokens: int = TOKENS) -> threading.Event:
    """Each round of a timed reply (`tokens` long: not a warm-up's) takes `seconds` more; the event is set once a
    timed reply has made two rounds, so a reply is in flight."""
    from engine.decoding.decoder import Decoder

    real = Decoder.stream
    in_reply = threading.Event()

    def stream(self, messages, settings, stop=None):
        rounds = 0
        for item in real(self, messages, settings, stop):
            if isinstance(item, RoundEvent) and settings.max_new_tokens == tokens:
                time.sleep(seconds)
                rounds += 1
                if rounds == 2:
                    in_reply.set()
            yield item

    monkeypatch.setattr(Decoder, "stream", stream)
    return in_reply


def test_stop_ends_a_pick_within_a_second_with_a_reply_in_flight(tmp_path, monkeypatch, cheap_drafts):
    target, draft = saved_chain_pair(tmp_path)
    in_reply = slowed_rounds(monkeypatch, 0.3)  # a reply of 15 rounds takes 4.5 s: a stop after it would be late
    stop, ended = threading.Event(), []

    def pick() -> None:
        try:
            picking.pick_draft(target, [draft, LOOKUP], PROMPTS, max_new_tokens=TOKENS, stop=stop)
        except picking.PickStopped:
            ended.append(time.monotonic())

    thread = threading.Thread(target=pick)
    thread.start()
    assert in_reply.wait(60)
    stopped_at = time.monotonic()
    stop.set()
    thread.join(10)
    assert ended and ended[0] - stopped_at < 1.0


def issue_picks(slowed_step_ms: float, tokens_per_round: float) -> list[Pick]:
    """A steady draft at 1.2x, plain AR, and a candidate whose 1.5x made by a slowed plain AR run."""
    return [Pick("steady.gguf", 1.2, 1.25, 0.6, 2.0, target_step_ms=123.3, replies=6, low=1.1, high=1.3),
            Pick(NONE, 1.0, 1.0, None, 1.0, target_step_ms=123.3, replies=6, low=1.0, high=1.0),
            Pick("idle.gguf", 1.5, 1.0, 0.0, tokens_per_round, target_step_ms=slowed_step_ms, replies=6, low=1.3,
                 high=1.7)]


def test_a_speedup_beside_a_slowed_plain_run_is_not_ranked_by_and_its_row_says_why():
    picks = issue_picks(slowed_step_ms=215.5, tokens_per_round=2.5)  # 2.5 tokens a round could make 1.5x
    assert ranked.rank(picks)[0].draft == "idle.gguf"  # control: without the rule it ranks first
    judged = ranked.rank(ranked.judge(picks, plain_step_ms=123.3))
    assert [p.draft for p in judged] == ["steady.gguf", NONE, "idle.gguf"]
    assert judged[-1].note == ranked.SLOWED_NOTE and not judged[-1].fair


def test_a_plain_run_slowed_by_less_than_a_quarter_is_fair():
    picks = issue_picks(slowed_step_ms=123.3 * 1.2, tokens_per_round=2.5)
    assert ranked.rank(ranked.judge(picks, plain_step_ms=123.3))[0].draft == "idle.gguf"


def test_a_speedup_above_what_its_tokens_per_round_allow_is_not_ranked_by_and_its_row_says_why():
    picks = issue_picks(slowed_step_ms=123.3, tokens_per_round=1.0)  # α 0: it drafted nothing
    assert ranked.rank(picks)[0].draft == "idle.gguf"  # control
    judged = ranked.rank(ranked.judge(picks, plain_step_ms=123.3))
    assert judged[0].draft == "steady.gguf"
    assert judged[-1].note == "above what its 1.00 tokens a round allow"


def test_the_issue_s_row_is_shown_without_its_figure_and_unranked():
    picks = ranked.rank(ranked.judge(issue_picks(slowed_step_ms=215.5, tokens_per_round=1.0), plain_step_ms=123.3))
    table = ranked.ranking_table(picking.new_ranking("t.gguf", "code", picks, seconds=58.0))
    idle = next(line for line in table.splitlines() if "idle.gguf" in line)
    assert idle.startswith("| | idle.gguf | not a fair figure: the plain run beside it was slowed by other work |")
    assert "1.50x" not in idle
    assert table.splitlines()[2].startswith("| 1 | steady.gguf | 1.20x | from 6 replies, 1.10–1.30x |")


def test_the_band_holds_the_geometric_mean_and_narrows_with_more_replies():
    few = [1.2, 1.3, 1.25]
    low, high = picking.band(few)
    assert low < picking.typical(few) < high
    more_low, more_high = picking.band(few * 4)
    assert low < more_low and more_high < high
    assert picking.band(few[:2]) == (None, None)  # too few replies for a band
    # a plain mean would call 2x and 0.5x a gain; together they are no speedup
    assert picking.typical([2.0, 0.5]) == pytest.approx(1.0)


def test_clearly_best_needs_the_leader_s_band_above_every_other_band():
    leader = Pick("a", 1.4, replies=3, low=1.3, high=1.5)
    plain = Pick(NONE, 1.0, replies=3, low=1.0, high=1.0)
    assert ranked.clearly_best([leader, Pick("b", 1.1, replies=3, low=1.0, high=1.2), plain])
    assert not ranked.clearly_best([leader, Pick("b", 1.2, replies=3, low=1.1, high=1.35), plain])  # overlap
    assert not ranked.clearly_best([leader, Pick("b", 1.1, replies=2), plain])  # b has no band yet
