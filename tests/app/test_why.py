"""The chat controller's "why this γ" records and its Compare drafters command, with the fake worker of
test_chat: what it recomputes after a turn, and that a drafter comparison leaves the conversation alone."""
from __future__ import annotations

import dataclasses

from app.chat.controller import ChatController
from engine.events import Drafting, RoundEvent
from tests.app.test_chat import PAIR, SPEC, FakeWorker, Recorder, two_rounds
from tests.ui.synthetic import accepted_round, in_order, plain_steps, rejected_round
from words.records import DrafterComparison, DrafterRun, TurnState

COSTS = {"target_block_ms": [10.0] * 9, "draft_step_ms": 2.0, "copy_ms": 0.01, "overhead_ms": 0.0}


def costed_chat() -> ChatController:
    chat = ChatController()
    chat.on_models_loaded(dataclasses.replace(PAIR, costs=COSTS))
    return chat


def test_a_finished_turn_sends_the_sessions_acceptance_and_recommendation(qapp):
    chat = costed_chat()
    worker, shown = FakeWorker(chat), []
    chat.why_changed.connect(shown.append)
    worker.replies.append(two_rounds())
    chat.send("hi", SPEC)
    why = shown[-1]
    assert why.session.n_rounds == 2 and why.session.kept == (1.0, 0.0)  # both kept a first draft, none a second
    assert why.recommendation is not None and why.recommendation.drafting is Drafting.BOTH  # SPEC copies too
    assert why is chat.why


def test_the_recommendation_is_made_at_the_chat_s_length(qapp):
    """A draft's row costs what the conversation's cached positions add to it: after 5,000 of them more than a step."""
    recommendations = {}
    for positions in (20, 5000):
        chat = costed_chat()
        chat.on_costs_measured({**COSTS, "target_block_ms": [4.0 + 0.5 * k for k in range(9)], "draft_step_ms": 0.5,
                                "position_us": 5.0, "position_row_us": 8.0})
        worker = FakeWorker(chat)
        worker.replies.append([dataclasses.replace(e, positions=positions + i) for i, e in enumerate(two_rounds())])
        chat.send("hi", SPEC)
        recommendations[positions] = chat.why.recommendation
    assert recommendations[20].drafting is not Drafting.NONE
    assert recommendations[5000].drafting is Drafting.NONE
    assert "after this chat's 5,003 tokens" in recommendations[5000].explanation


def test_measured_costs_replace_the_pairs_for_the_next_recommendation(qapp):
    chat = costed_chat()
    chat.on_costs_measured({**COSTS, "draft_step_ms": 30.0})
    assert chat.session.pair.costs["draft_step_ms"] == 30.0


def test_compare_drafters_asks_for_the_last_prompt_and_keeps_the_conversation(qapp):
    chat = costed_chat()
    worker, seen = FakeWorker(chat), Recorder(chat)
    worker.replies.append(two_rounds())
    chat.send("hi", SPEC)
    asked = []
    chat.drafters_requested.connect(asked.append)
    chat.compare_drafters(SPEC)
    assert chat.state is TurnState.COMPARING and asked[0].messages == chat.turns[0].request.messages
    runs = tuple(DrafterRun(d, (rejected_round(0, ["a"], "x", "y"),)) for d in Drafting)
    chat.on_drafters_compared(DrafterComparison(asked[0], runs))
    assert chat.state is TurnState.IDLE and len(chat.turns) == 1
    assert seen.names()[-1] == "turn_completed"
    # the comparison's copying-only rounds give that drafting a profile of its own
    assert Drafting.LOOKUP in chat.why.profiles


def test_compare_drafters_without_a_prompt_says_so(qapp):
    chat = costed_chat()
    notices = []
    chat.notice_posted.connect(notices.append)
    chat.compare_drafters(SPEC)
    assert chat.state is TurnState.IDLE and "send one first" in notices[0]


def test_another_pairs_replies_stay_out_of_the_acceptance_and_the_points(qapp):
    """A reply of the pair before the switch (its first draft kept) says nothing of the pair loaded since: only the
    new pair's reply (its first draft rejected) is counted. Each reply's two plain rounds measure its live figure,
    its dot."""
    def reply(first: RoundEvent) -> list[RoundEvent]:
        *rounds, last = in_order(first, *plain_steps(2, " w"))
        return [*rounds, dataclasses.replace(last, finish_reason="eos")]

    chat = costed_chat()
    worker = FakeWorker(chat)
    worker.replies.append(reply(accepted_round(0, ["Hel"], "lo")))
    chat.send("hi", SPEC)
    assert chat.why.session.kept == (1 / 3,) and [point.origin for point in chat.why.points] == ["reply 1"]
    chat.on_models_loaded(dataclasses.replace(PAIR, target=dataclasses.replace(PAIR.target, name="other"),
                                              costs=COSTS))
    worker.replies.append(reply(rejected_round(0, [], "Hel", "Hi")))
    chat.send("again", SPEC)
    assert chat.why.session.n_rounds == 3 and chat.why.session.kept == (0.0,)
    assert [point.origin for point in chat.why.points] == ["reply 2"]


def test_a_reopened_chat_of_two_pairs_shows_each_replys_own_pair(qapp):
    """Reopened, the replies carry the pairs that decoded them (the window names a switch under the reply), and
    the why tab counts the loaded pair's reply only."""
    from app.chat.store import ChatStore

    chat = ChatController(ChatStore(":memory:"))
    chat.on_models_loaded(dataclasses.replace(PAIR, costs=COSTS))
    worker = FakeWorker(chat)
    worker.replies.append([accepted_round(0, ["Hel"], "lo", finish="eos")])
    chat.send("hi", SPEC)
    other = dataclasses.replace(PAIR, target=dataclasses.replace(PAIR.target, name="other"), costs=COSTS)
    chat.on_models_loaded(other)
    worker.replies.append([dataclasses.replace(rejected_round(0, [], "Hel", "Hi"), finish_reason="eos")])
    chat.send("again", SPEC)
    shown = Recorder(chat)
    chat.open_chat(chat.chat_id)
    pairs = [event.pair.target.name for name, event in shown.seen if name == "reply_finished"]
    assert pairs == ["t", "other"]
    assert chat.why.session.n_rounds == 1 and chat.why.session.kept == (0.0,)
