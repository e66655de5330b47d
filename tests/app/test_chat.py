"""The chat controller without a widget: whole conversations driven through its commands, with a fake worker
that answers each request from hand-made round events, and the records it emits checked."""
from __future__ import annotations

import dataclasses
import json

import pytest

from app.chat.controller import ChatController
from app.chat.store import to_json
from engine.events import DecodeSettings, Drafting, EmittedToken, Fate, ModelInfo, PairInfo, RoundEvent
from tests.ui.synthetic import accepted_round, rejected_round
from words.records import Comparison, DrafterComparison, DrafterRun, Reply, ReplyRequest, TurnOptions, TurnState
from words.transcript import ENDED_REPEATING, reply_notes

PAIR = PairInfo(ModelInfo("t", "/t", 1, 64), ModelInfo("d", "/d", 1, 64), "cpu", "float32", target_step_s=0.02)
SPEC = TurnOptions(DecodeSettings(gamma=3, max_new_tokens=8))
COMPARED = dataclasses.replace(SPEC, compare_ar=True)


def ar_step(index: int, text: str) -> RoundEvent:
    return RoundEvent(index=index, gamma=0, drafted=(), emitted=(EmittedToken(7, text, Fate.TARGET, 0.5),),
                      text_delta=text, draft_s=0.0, verify_s=0.02, round_s=0.02, target_step_s=0.02)


class FakeWorker:
    """Answers every request at once, as the real worker would over its thread: rounds, the reply, and the AR
    comparison when asked for. `replies` is a queue of round lists; `stop_after` stops a reply after that many."""

    def __init__(self, chat: ChatController):
        self.chat = chat
        self.replies: list[list[RoundEvent]] = []
        self.requests = []
        self.stop_after: int | None = None
        self.fail_with: str | None = None
        self.costs: dict | None = None  # the cost model as a reply's rounds refined it, sent before the reply
        self.stopped = False
        chat.prompt_requested.connect(self.on_prompt_requested)
        chat.stop_requested.connect(self.on_stop_requested)

    def on_stop_requested(self) -> None:
        self.stopped = True

    def on_prompt_requested(self, request) -> None:
        self.requests.append(request)
        self.stopped = False
        if self.fail_with:
            self.chat.on_failed(self.fail_with)
            return
        events = self.replies.pop(0)
        if self.stop_after is not None:
            for event in events[:self.stop_after]:
                self.chat.on_round_finished(event)
            self.chat.stop()  # the user pressed Stop while this round ran
            events = events[:self.stop_after]
            self.chat.on_reply_finished(Reply(request, tuple(events), "".join(e.text_delta for e in events), True))
            return
        for event in events:
            self.chat.on_round_finished(event)
        reply = Reply(request, tuple(events), "".join(e.text_delta for e in events), False)
        if self.costs is not None:
            self.chat.on_costs_measured(self.costs)
        self.chat.on_reply_finished(reply)
        if request.compare_ar:
            ar = tuple(ar_step(i, t.text) for i, t in enumerate(reply.tokens))
            self.chat.on_comparison_progressed(len(ar), len(ar))
            self.chat.on_comparison_finished(Comparison(ar, reply.text, 0.1, 0.2, 50.0, 25.0, identical=True))


class Recorder:
    """Every signal the controller emits for the window, in order, as (name, first argument)."""

    NAMES = ("status_changed", "conversation_cleared", "turn_started", "round_received", "reply_finished",
             "comparison_finished", "turn_completed", "edit_started", "notice_posted", "failed")

    def __init__(self, chat: ChatController):
        self.seen: list[tuple[str, object]] = []
        for name in self.NAMES:
            getattr(chat, name).connect(lambda *args, name=name: self.seen.append((name, args[0] if args else None)))

    def names(self) -> list[str]:
        return [name for name, _ in self.seen if name != "status_changed"]

    def states(self) -> list[TurnState]:
        states = [status.state for name, status in self.seen if name == "status_changed"]
        return [s for i, s in enumerate(states) if i == 0 or s != states[i - 1]]

    def of(self, name: str) -> list:
        return [value for seen, value in self.seen if seen == name]


def two_rounds(finish: str | None = "eos") -> list[RoundEvent]:
    return [rejected_round(0, ["Hel"], "p", "lo"), accepted_round(1, [" wor"], "ld", finish=finish)]


@pytest.fixture
def chat(qapp):
    controller = ChatController()
    controller.on_models_loaded(PAIR)
    return controller


def test_a_sent_message_streams_as_one_turn_and_ends_idle(chat):
    worker, seen = FakeWorker(chat), Recorder(chat)
    worker.replies.append(two_rounds())
    chat.send("hi", SPEC)
    assert seen.names() == ["turn_started", "round_received", "round_received", "reply_finished", "turn_completed"]
    assert seen.states() == [TurnState.REPLYING, TurnState.IDLE]
    [turn] = chat.turns
    assert turn.request.messages == ({"role": "user", "content": "hi"},) and turn.reply.text == "Hello world"
    assert turn.stored_id is not None and chat.store.load_chat(chat.chat_id).replies == [turn.reply]
    assert chat.messages == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello world"}]


def test_a_compared_reply_passes_through_comparing_and_keeps_its_comparison(chat):
    worker, seen = FakeWorker(chat), Recorder(chat)
    worker.replies.append(two_rounds())
    chat.send("hi", COMPARED)
    assert seen.states() == [TurnState.REPLYING, TurnState.COMPARING, TurnState.IDLE]
    [shown] = seen.of("comparison_finished")
    assert shown.comparison is chat.turns[0].comparison and shown.reply is chat.turns[0].reply
    assert chat.session.comparisons == {0: chat.turns[0].comparison}
    assert chat.store.load_chat(chat.chat_id).comparisons[0] == chat.turns[0].comparison


def test_a_compared_replys_why_tab_is_drawn_before_its_comparison_runs(chat):
    """The control: the comparison's end draws it again."""
    worker, order = FakeWorker(chat), []
    worker.replies.append(two_rounds())
    chat.why_changed.connect(lambda why: order.append(("why", why.session.n_rounds)))
    chat.comparison_finished.connect(lambda _shown: order.append(("comparison", None)))
    chat.send("hi", COMPARED)
    assert order == [("why", 2), ("comparison", None), ("why", 2)]


def test_regenerate_replaces_the_last_turn_and_resends_its_messages(chat):
    worker = FakeWorker(chat)
    worker.replies += [two_rounds(), two_rounds(), [accepted_round(0, ["Hey"], "!", finish="eos")]]
    chat.send("hi", SPEC)
    chat.send("again", SPEC)
    chat.regenerate(SPEC)
    assert [t.reply.text for t in chat.turns] == ["Hello world", "Hey!"]
    assert worker.requests[2].messages == worker.requests[1].messages
    assert [r.text for r in chat.store.load_chat(chat.chat_id).replies] == ["Hello world", "Hey!"]


@pytest.mark.parametrize("greedy, seed_again, seed_sent", [(False, 5, 6), (True, 5, 5), (False, 9, 9)])
def test_regenerate_of_a_sample_with_its_own_seed_draws_with_the_next(chat, greedy, seed_again, seed_sent):
    worker, advanced = FakeWorker(chat), []
    chat.seed_advanced.connect(lambda old, new: advanced.append((old, new)))
    worker.replies += [two_rounds(), two_rounds()]
    sampled = TurnOptions(DecodeSettings(gamma=3, max_new_tokens=8, greedy=greedy, seed=5))
    chat.send("hi", sampled)
    chat.regenerate(dataclasses.replace(sampled, settings=dataclasses.replace(sampled.settings, seed=seed_again)))
    assert worker.requests[1].settings.seed == seed_sent
    assert advanced == ([(5, 6)] if seed_sent != seed_again else [])


def test_continue_extends_the_last_assistant_message(chat):
    worker = FakeWorker(chat)
    worker.replies += [two_rounds(finish="length"), [accepted_round(0, ["!"], "!", finish="eos")]]
    chat.send("hi", SPEC)
    assert chat.status.can_continue
    chat.continue_reply(SPEC)
    assert worker.requests[1].messages[-1] == {"role": "assistant", "content": "Hello world"}
    assert chat.messages[-1] == {"role": "assistant", "content": "Hello world!!"}
    assert chat.turns[1].continues and not chat.status.can_continue


def test_a_continued_reply_counts_once_among_the_replies_after_a_turn(chat):
    worker = FakeWorker(chat)
    worker.replies += [[accepted_round(0, ["a"], "b", finish="eos")], two_rounds(finish="length"),
                       [accepted_round(0, ["!"], "!", finish="eos")], [accepted_round(0, ["c"], "d", finish="eos")]]
    chat.send("first", SPEC)
    chat.send("second", SPEC)
    chat.continue_reply(SPEC)
    chat.send("third", SPEC)
    status = chat.status
    assert status.continuations == (2,) and status.n_turns == 4
    assert status.replies_after(0) == 2  # the second reply (in two parts) and the third
    assert status.replies_after(1) == 1 and status.replies_after(3) == 0


def test_a_reply_ended_repeating_itself_can_be_continued_and_says_why(chat):
    worker = FakeWorker(chat)
    worker.replies.append(two_rounds(finish="repeating"))
    chat.send("hi", SPEC)
    assert chat.status.can_continue
    assert ENDED_REPEATING in [note.text for note in reply_notes(chat.turns[0].reply)]


def test_continue_does_nothing_when_the_reply_was_not_cut(chat):
    worker = FakeWorker(chat)
    worker.replies.append(two_rounds(finish="eos"))
    chat.send("hi", SPEC)
    chat.continue_reply(SPEC)
    assert len(worker.requests) == 1 and not chat.status.can_continue


def test_edit_and_resend_replaces_that_turn_and_what_followed(chat):
    worker, seen = FakeWorker(chat), Recorder(chat)
    worker.replies += [two_rounds(), two_rounds(), two_rounds()]
    chat.send("first", SPEC)
    chat.send("second", SPEC)
    chat.edit(0)
    assert seen.of("edit_started") == [0] and chat.editing == 0
    chat.send("first, edited", SPEC)
    assert [t.request.messages[-1]["content"] for t in chat.turns] == ["first, edited"]
    assert chat.editing is None


def test_stop_passes_through_stopping_and_keeps_the_stopped_reply(chat):
    worker, seen = FakeWorker(chat), Recorder(chat)
    worker.replies.append(two_rounds())
    worker.stop_after = 1
    chat.send("hi", SPEC)
    assert worker.stopped and seen.states() == [TurnState.REPLYING, TurnState.STOPPING, TurnState.IDLE]
    assert chat.turns[0].reply.stopped and chat.turns[0].reply.text == "Hello"


def test_a_reopened_chat_sends_the_records_the_live_chat_sent(chat):
    worker, seen = FakeWorker(chat), Recorder(chat)
    worker.replies += [two_rounds(), two_rounds(finish="length")]
    chat.send("hi", COMPARED)
    chat.send("more", SPEC)

    def records():  # the rounds, the replies, the comparison
        return ([r.event for r in seen.of("round_received")],
                [(r.reply, r.can_continue) for r in seen.of("reply_finished")], seen.of("comparison_finished"))

    live, chat_id = records(), chat.chat_id
    chat.new_chat()
    seen.seen.clear()
    chat.open_chat(chat_id)
    assert records() == live
    assert chat.messages[-1]["content"] == "Hello world" and chat.status.can_continue


def test_new_chat_during_a_reply_waits_for_it_to_stop(chat):
    worker = FakeWorker(chat)
    chat.prompt_requested.disconnect(worker.on_prompt_requested)  # the reply runs on: nothing answers yet
    chat.send("hi", SPEC)
    chat.new_chat()
    assert chat.state is TurnState.STOPPING and len(chat.turns) == 1
    chat.on_round_finished(two_rounds()[0])
    chat.on_reply_finished(Reply(chat.turns[0].request, (two_rounds()[0],), "Help", True))
    assert chat.turns == [] and chat.chat_id is None and chat.state is TurnState.IDLE


def test_a_failed_reply_is_dropped_here_and_on_disk(chat):
    worker, seen = FakeWorker(chat), Recorder(chat)
    worker.replies.append(two_rounds())
    chat.send("hi", SPEC)
    worker.fail_with = "out of memory"
    chat.send("boom", SPEC)
    assert seen.of("failed") == ["out of memory"] and [t.reply.text for t in chat.turns] == ["Hello world"]
    assert len(chat.store.load_chat(chat.chat_id).replies) == 1 and chat.state is TurnState.IDLE


def test_a_message_before_any_pair_is_loaded_is_refused_with_a_notice(qapp):
    chat = ChatController()
    seen = Recorder(chat)
    chat.send("hi", SPEC)
    assert chat.turns == [] and seen.of("notice_posted") == ["Load a model pair first"]


@pytest.mark.parametrize("others_cores, host_cores, busy", [(2.0, 0.0, True), (0.1, 0.6, True), (0.1, 0.05, False),
                                                       (0.1, None, False)])
def test_a_speculative_reply_is_judged_for_a_busy_machine(chat, monkeypatch, others_cores, host_cores, busy):
    """Slow steps beside other programs' work, or a host withholding cores, are a busy machine; beside idle ones
    (the controls), this window's own drawing, which the estimate prices plain AR at too."""
    monkeypatch.setattr(chat.other_programs, "cores", lambda: others_cores)
    monkeypatch.setattr(chat.other_programs, "host_cores", lambda: host_cores)
    worker = FakeWorker(chat)
    chat.timing.add(1e-6)  # a quiet step far faster than any real one: every round looks stalled
    worker.replies.append(two_rounds())
    chat.send("hi", SPEC)
    assert chat.turns[0].reply.machine_busy is busy and chat.turns[0].reply.reference_s == chat.timing.seconds
    assert (chat.turns[0].reply.others_cores, chat.turns[0].reply.host_cores) == (others_cores, host_cores)


@pytest.mark.parametrize("others_cores, busy", [(2.0, True), (0.01, False)])
def test_a_comparisons_slow_plain_ar_run_is_busy_only_beside_other_programs_work(chat, monkeypatch, others_cores,
                                                                                 busy):
    """Its plain AR steps all slow: with other programs on the cores, a busy machine; beside idle ones (the
    control) the slowness was this app's own, and the comparison is judged by its runs' loads alone."""
    monkeypatch.setattr(chat.other_programs, "cores", lambda: others_cores)
    monkeypatch.setattr(chat.other_programs, "host_cores", lambda: 0.0)
    worker = FakeWorker(chat)
    chat.timing.add(1e-6)
    worker.replies.append(two_rounds())
    chat.send("hi", COMPARED)
    assert chat.turns[0].comparison.machine_busy is busy


def test_a_stopped_reply_can_be_continued(chat):
    worker = FakeWorker(chat)
    worker.replies.append(two_rounds())
    worker.stop_after = 1
    chat.send("hi", SPEC)
    assert chat.status.can_continue


def test_a_new_chat_offers_no_continue(chat):
    worker, seen = FakeWorker(chat), Recorder(chat)
    worker.replies.append(two_rounds(finish="length"))
    chat.send("hi", SPEC)
    chat.new_chat()
    assert not seen.of("status_changed")[-1].can_continue and seen.of("status_changed")[-1].n_turns == 0


def test_a_continued_reply_is_shown_whole_and_regenerated_whole(chat):
    worker, seen = FakeWorker(chat), Recorder(chat)
    worker.replies += [two_rounds(finish="length"), [accepted_round(0, ["!"], "?", finish="eos")],
                       [accepted_round(0, ["Hi"], ".", finish="eos")]]
    chat.send("hi", SPEC)
    chat.continue_reply(SPEC)
    whole = seen.of("reply_finished")[-1].whole
    assert whole.text == "Hello world!?" and len(whole.events) == 3
    chat.regenerate(SPEC)
    assert [t.reply.text for t in chat.turns] == ["Hi."]
    assert worker.requests[-1].messages == ({"role": "user", "content": "hi"},)


def test_a_whole_conversation_reopens_as_it_was_left(chat):
    """send → reply → compare → regenerate → continue → reopen, with no widget anywhere."""
    worker, seen = FakeWorker(chat), Recorder(chat)
    worker.replies += [two_rounds(), two_rounds(finish="length"), [accepted_round(0, ["Hi"], ",", finish="length")],
                       [accepted_round(0, [" there"], "!", finish="eos")]]
    chat.send("first", COMPARED)
    chat.send("second", SPEC)
    chat.regenerate(SPEC)
    chat.continue_reply(SPEC)
    assert chat.messages == [{"role": "user", "content": "first"}, {"role": "assistant", "content": "Hello world"},
                             {"role": "user", "content": "second"}, {"role": "assistant", "content": "Hi, there!"}]
    live = (chat.messages, [t.reply for t in chat.turns], [t.comparison for t in chat.turns])
    chat_id = chat.chat_id
    chat.new_chat()
    assert chat.turns == [] and chat.messages == []
    seen.seen.clear()
    chat.open_chat(chat_id)
    assert (chat.messages, [t.reply for t in chat.turns], [t.comparison for t in chat.turns]) == live
    assert [shown.whole.text for shown in seen.of("reply_finished")] == ["Hello world", "Hi,", "Hi, there!"]
    assert seen.names().count("turn_completed") == 0  # a reopened chat is drawn, not decoded


def test_a_reopened_chat_restores_its_last_replys_settings(chat):
    worker = FakeWorker(chat)
    restored = []
    chat.settings_restored.connect(restored.append)
    sampled = TurnOptions(DecodeSettings(greedy=False, temperature=0.5, gamma=2, max_new_tokens=16, seed=4))
    worker.replies += [two_rounds(), two_rounds()]
    chat.send("first", SPEC)
    chat.send("second", sampled)
    chat_id = chat.chat_id
    chat.new_chat()
    chat.open_chat(chat_id)
    assert restored == [sampled.settings]


def test_a_compare_drafters_stays_with_its_chat_through_a_reopen_and_the_export(chat, tmp_path):
    worker = FakeWorker(chat)
    worker.replies.append(two_rounds())
    chat.send("hi", SPEC)
    request = chat.turns[-1].request
    runs = (DrafterRun(Drafting.LOOKUP, (accepted_round(0, ["a", "b"], "c", q=1.0),)),
            DrafterRun(Drafting.NONE, tuple(ar_step(i, "x") for i in range(3))))
    chat._set_state(TurnState.COMPARING)
    chat.on_drafters_compared(DrafterComparison(request, runs))
    live = chat.why
    assert any(p.drafting is Drafting.LOOKUP and p.measured for p in live.points)
    chat_id = chat.chat_id
    chat.new_chat()
    assert chat.session.drafters == () and not any(p.drafting is Drafting.LOOKUP for p in chat.why.points)
    chat.open_chat(chat_id)
    assert chat.session.drafters == (DrafterComparison(request, runs),)
    assert chat.why.points == live.points and chat.why.recommendation == live.recommendation
    chat.export_chat(chat_id, tmp_path / "saved")  # the history's export of the saved chat carries it too
    assert [row["drafting"] for row in json.loads((tmp_path / "saved.json").read_text())["drafters"][0]["rows"]] == [
        "lookup", "none"]


def test_loading_a_pair_again_leaves_the_chats_compare_drafters_where_another_pair_sets_them_aside(chat):
    """The same models loaded again (timed anew): the chat's Compare drafters stays, shown and saved. Another pair:
    it is set aside in the window, and the saved chat still holds it."""
    worker = FakeWorker(chat)
    worker.replies.append(two_rounds())
    chat.send("hi", SPEC)
    comparison = DrafterComparison(chat.turns[-1].request,
                                   (DrafterRun(Drafting.LOOKUP, (accepted_round(0, ["a", "b"], "c", q=1.0),)),))
    chat._set_state(TurnState.COMPARING)
    chat.on_drafters_compared(comparison)
    chat.on_models_loaded(dataclasses.replace(PAIR, target_step_s=0.03))
    assert chat.session.drafters == (comparison,)
    assert chat.store.load_chat(chat.chat_id).drafters == (comparison,)
    chat.on_models_loaded(dataclasses.replace(PAIR, dtype="bfloat16"))
    assert chat.session.drafters == ()
    assert chat.store.load_chat(chat.chat_id).drafters == (comparison,)


def test_compare_drafters_decodes_the_message_a_continued_reply_answered_not_its_last_part(chat):
    requested = []
    chat.drafters_requested.connect(requested.append)
    worker = FakeWorker(chat)
    worker.replies += [two_rounds(finish="length"), two_rounds()]
    chat.send("hi", SPEC)
    chat.continue_reply(SPEC)
    assert chat.turns[-1].continues
    chat.compare_drafters(SPEC)
    [request] = requested
    assert request.messages == chat.turns[0].request.messages  # the control: the last part's ends with the reply
    assert chat.turns[-1].request.messages[-1]["role"] == "assistant"


def test_a_confidence_stop_compare_drafters_keeps_the_cost_aware_one_and_replaces_only_its_own_rule(chat):
    """The cost-aware run's measured dots stay beside a confidence-stop run's, through a reopen; a second run of
    one rule replaces that rule's last. The control: two cost-aware runs keep only the last."""
    worker = FakeWorker(chat)
    worker.replies.append(two_rounds())
    chat.send("hi", SPEC)
    request = chat.turns[-1].request

    def compared(cost_aware: bool, speed: str) -> DrafterComparison:
        settings = dataclasses.replace(request.settings, cost_aware=cost_aware)
        runs = (DrafterRun(Drafting.LOOKUP, (accepted_round(0, ["a", speed], "c", q=1.0),)),
                DrafterRun(Drafting.NONE, tuple(ar_step(i, "x") for i in range(3))))
        comparison = DrafterComparison(dataclasses.replace(request, settings=settings), runs)
        chat._set_state(TurnState.COMPARING)
        chat.on_drafters_compared(comparison)
        return comparison

    cost_aware = compared(True, "b")
    confidence = compared(False, "b")
    assert chat.session.drafters == (cost_aware, confidence)
    assert sorted(p.cost_aware for p in chat.why.points if p.drafting is Drafting.LOOKUP) == [False, True]
    chat_id = chat.chat_id
    chat.new_chat()
    chat.open_chat(chat_id)
    assert chat.session.drafters == (cost_aware, confidence)
    later = compared(True, "z")
    assert chat.session.drafters == (confidence, later)


def test_a_compare_drafters_is_reported_with_the_chats_last_one_of_the_same_prompt_and_settings(chat):
    """Run twice on the same prompt and settings, also across a reopen: the second comes with the first. The
    control: the first comes alone, and one of other settings comes alone too."""
    worker = FakeWorker(chat)
    worker.replies.append(two_rounds())
    chat.send("hi", SPEC)
    request = chat.turns[-1].request
    shown = []
    chat.drafters_compared.connect(shown.append)

    def compared(request: ReplyRequest) -> DrafterComparison:
        comparison = DrafterComparison(request, (DrafterRun(Drafting.NONE, tuple(ar_step(i, "x") for i in range(3))),))
        chat._set_state(TurnState.COMPARING)
        chat.on_drafters_compared(comparison)
        return comparison

    first = compared(request)
    chat_id = chat.chat_id
    chat.new_chat()
    chat.open_chat(chat_id)
    second = compared(request)
    other_settings = dataclasses.replace(request.settings, gamma=request.settings.gamma + 1)
    other = compared(dataclasses.replace(request, settings=other_settings))
    assert [(s.comparison, s.previous) for s in shown] == [(first, None), (second, first), (other, None)]


def test_a_chat_saved_with_one_compare_drafters_object_reopens_with_it(chat):
    worker = FakeWorker(chat)
    worker.replies.append(two_rounds())
    chat.send("hi", SPEC)
    comparison = DrafterComparison(chat.turns[-1].request,
                                   (DrafterRun(Drafting.NONE, tuple(ar_step(i, "x") for i in range(3))),))
    with chat.store.db:  # as chats saved before a chat kept one of each draft-length rule
        chat.store.db.execute("UPDATE chats SET drafters = ? WHERE id = ?", (to_json(comparison), chat.chat_id))
    chat.open_chat(chat.chat_id)
    assert chat.session.drafters == (comparison,)


def test_a_renamed_chat_is_exported_and_named_by_its_new_title_also_when_reopened(chat):
    worker = FakeWorker(chat)
    worker.replies.append(two_rounds())
    chat.send("hi", SPEC)
    assert chat.session.title == chat.status.title == "hi"
    chat.rename_chat(chat.chat_id, "  greetings ")
    assert chat.session.title == chat.status.title == "greetings"
    chat_id = chat.chat_id
    chat.new_chat()
    assert chat.status.title == ""
    chat.open_chat(chat_id)
    assert chat.session.title == chat.status.title == "greetings"


def test_the_export_names_the_pair_that_decoded_each_reply_not_one_loaded_since(chat, tmp_path):
    worker = FakeWorker(chat)
    worker.replies += [two_rounds(), two_rounds()]
    chat.send("hi", SPEC)  # float32
    bfloat16 = dataclasses.replace(PAIR, dtype="bfloat16")
    chat.on_models_loaded(bfloat16)
    chat.export(tmp_path / "one")
    data, text = json.loads((tmp_path / "one.json").read_text()), (tmp_path / "one.md").read_text()
    assert data["models"]["dtype"] == "float32" and data["replies"][0]["pair"]["dtype"] == "float32"
    assert "*t + d · cpu · float32*" in text and "bfloat16" not in text
    chat.send("and?", SPEC)  # bfloat16: the file's pair is the last reply's, and the first reply says its own
    chat.export(tmp_path / "two")
    data, text = json.loads((tmp_path / "two.json").read_text()), (tmp_path / "two.md").read_text()
    assert data["models"]["dtype"] == "bfloat16"
    assert [reply["pair"]["dtype"] for reply in data["replies"]] == ["float32", "bfloat16"]
    assert "*t + d · cpu · bfloat16*" in text and text.count("*decoded by t + d · cpu · float32*") == 1
    assert text.index("decoded by") < text.index("**Reply 2")


def test_a_reopened_chat_draws_its_why_tab_by_the_costs_its_last_reply_left_not_a_later_timing(chat):
    """Its reply refined the costs (a 2 ms draft); the pair was then loaded again and timed at a 9 ms draft. The
    reopened chat recommends what it did live; the control: its next reply is drawn by the new timing."""
    from tests.ui.why.test_why_gamma import flat_costs, four_kinds_of_round

    worker = FakeWorker(chat)
    worker.replies += [four_kinds_of_round(), four_kinds_of_round()]
    chat.on_models_loaded(dataclasses.replace(PAIR, costs=flat_costs(5.0)))
    worker.costs = flat_costs(2.0)  # the reply's rounds refined the costs
    chat.send("hi", SPEC)
    worker.costs = None
    live, chat_id = chat.why, chat.chat_id
    assert live.costs == flat_costs(2.0) and live.recommendation.gamma > 0
    chat.on_models_loaded(dataclasses.replace(PAIR, costs=flat_costs(9.0)))  # loaded again, timed anew
    chat.open_chat(chat_id)
    assert chat.why.costs == live.costs and chat.why.recommendation == live.recommendation
    chat.send("again", SPEC)
    assert chat.why.costs == flat_costs(9.0) and chat.why.recommendation != live.recommendation
