"""The chat controller: one conversation, its turn state, its saving and the fairness of its numbers, without a
widget. Commands come in as method calls; what happened goes out as past-tense signals carrying plain records
(as PyMeasure's Manager is to its window). A reopened chat is sent through the same signals as a live one, so
the window draws both with the same slots.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.chat.export import ExportError, export_session
from app.chat.store import ChatRecorder, ChatStore, ChatStoreError, ChatSummary, title_for
from app.chat.timing import (OtherPrograms, QuietLoop, QuietTimings, StepReference, TimingAtLoad, machine_was_busy,
                             others_took_cores, unequal_loads)
from app.why import WhyGamma, why_gamma
from engine.events import ContextNotice, Mode, PairInfo, PrefillProgress, RoundEvent
from engine.remote_records import RemoteReply, TextDelta, is_url, public_url
from words.records import (SEED_LIMIT, ChatStatus, Comparison, ComparisonShown, DrafterComparison, DraftersShown,
                           EngineTarget, RemoteSource, Reply, ReplyRequest, ReplyShown, RoundShown, Runtime, Session,
                           Turn, TurnOptions, TurnStarted, TurnState, kept_drafters, same_models)


class ChatController(QObject):
    # commands for the worker (studio.build connects them)
    load_requested = Signal(str, object, str, str, str)  # target, draft or None, device, dtype, GGUF weights
    prompt_requested = Signal(object)  # ReplyRequest
    stop_requested = Signal()
    gamma_requested = Signal(int)
    reset_requested = Signal()  # a new conversation: the decoder forgets the last one's caches
    drafters_requested = Signal(object)  # ReplyRequest: decode it with each drafting choice (Compare drafters)
    reply_drawn = Signal()  # the window has drawn the reply just finished: Compare with AR's runs may start
    costs_replaced = Signal(object)  # CostModel.as_dict: plan on these, not on a timing the machine's load slowed
    # commands for the remote worker (a running engine as the target)
    remote_connect_requested = Signal(str, object)  # URL, served model name or None (the only one served)
    remote_prompt_requested = Signal(object, object)  # messages (list of dicts), DecodeSettings
    remote_stop_requested = Signal()
    # what happened, for the window
    status_changed = Signal(object)  # ChatStatus
    load_started = Signal(str, object)  # target, draft
    timing_started = Signal()  # the loaded pair's costs are being timed
    timing_progressed = Signal(int, int)  # (done, total) steps of that timing
    pair_loaded = Signal(object)  # PairInfo
    load_failed = Signal(object, object)  # the PairInfo still answering (or None), the request that loaded it
    conversation_cleared = Signal()
    turn_started = Signal(object)  # TurnStarted
    round_received = Signal(object)  # RoundShown
    reply_finished = Signal(object)  # ReplyShown
    comparison_progressed = Signal(int, int)  # tokens the comparison's runs have made so far, tokens they aim at
    comparison_reading = Signal(object)  # PrefillProgress: one of those runs reads the prompt in again
    comparison_finished = Signal(object)  # ComparisonShown
    context_fitted = Signal(object)  # ContextNotice of the turn just completed
    why_changed = Signal(object)  # WhyGamma: the session's acceptance by position and the recommendation
    drafters_progressed = Signal(str, int)  # Compare drafters: the drafting running, its tokens so far
    drafters_compared = Signal(object)  # DraftersShown
    prefill_progressed = Signal(object)  # PrefillProgress
    turn_completed = Signal()
    gammas_changed = Signal(object, object)  # the reply in flight's DecodeSettings, every γ it ran with (a tuple)
    edit_started = Signal(int, str)  # turn, the message put back for editing
    edit_cancelled = Signal()
    seed_advanced = Signal(int, int)  # Regenerate's seed: the one the last sample had, the next one it draws with
    system_prompt_restored = Signal(str)  # a reopened chat's own system prompt
    settings_restored = Signal(object)  # DecodeSettings a reopened chat's last reply was decoded with
    chats_changed = Signal(object)  # the saved chat on screen (id or None): the history list is out of date
    notice_posted = Signal(str)  # a one-line message for the status bar
    exported = Signal(object)  # the paths written
    export_failed = Signal(str)  # nothing was written, and why
    failed = Signal(str)  # a dialog's worth: a load or a reply failed
    store_failed = Signal(str)  # saving stopped for this session
    remote_connected = Signal(object)  # EngineTarget: replies now come from it
    remote_left = Signal(object)  # back to the local pair: its load request (or None), for the picker to show
    remote_failed = Signal(str)  # one line: the engine could not be reached or failed a reply
    remote_text_received = Signal(object)  # TextDelta of the reply in flight

    def __init__(self, store: ChatStore | None = None, quiet_timings: QuietTimings | None = None, parent=None):
        super().__init__(parent)
        self.store = store or ChatStore(":memory:")
        self.quiet_timings = quiet_timings or QuietTimings(None)
        self.timing_at_load = TimingAtLoad({})  # how the loaded pair's timing compared with its last quiet one
        self.recorder = ChatRecorder(self.store, on_failure=self.store_failed.emit)
        self.turns: list[Turn] = []
        self.state = TurnState.IDLE
        self.pair: PairInfo | None = None
        self.runtime: Runtime | None = None  # what runs `pair` here
        self.timing = StepReference()  # recent target-step timings: the reference for speedup estimates
        self.other_programs = OtherPrograms()  # their CPU use during the reply in flight
        # A reopened chat's pair as it saved it, its costs as its last reply left them (the loaded pair's may have
        # been timed again since): what its why tab showed, until it decodes again. None otherwise.
        self.saved_pair: PairInfo | None = None
        self._quiet_loop = QuietLoop(self)
        self._quiet_loop.quiet.connect(self.reply_drawn)
        self.editing: int | None = None
        self.gammas: list[int] = []  # every γ the reply in flight ran with
        # Session -> an image of its replies' charts, for exports (the window draws it; None: no PNG)
        self.chart_image: Callable[[Session], object] | None = None
        # this conversation's last Compare drafters of each draft-length rule
        self.drafter_comparisons: tuple[DrafterComparison, ...] = ()
        self.given_title: str | None = None  # the open chat's name, where the user renamed it
        self.why: WhyGamma = why_gamma(Session())
        self._notice: ContextNotice | None = None
        self._after_turn: Callable[[], None] | None = None  # asked for mid-reply: run once the turn has ended
        self._load_request: tuple | None = None  # of the load in flight
        self._loaded_request: tuple | None = None  # of the pair loaded (None: injected, or none yet)
        self.remote: EngineTarget | None = None  # the engine replies come from; None: the local pair
        self._connecting: str | None = None  # the URL of a connection in flight
        self._remote_pieces: list[str] = []  # the text of the remote reply in flight

    # -- what the conversation is --------------------------------------------------------------------------

    @property
    def replies(self) -> list[Reply]:
        return [turn.reply for turn in self.turns if turn.reply is not None]

    @property
    def session(self) -> Session:
        """What the exporter writes: the pair, and the replies in order with their comparisons and pairs."""
        done = [turn for turn in self.turns if turn.reply is not None]
        return Session(self.saved_pair or self.pair, [turn.reply for turn in done],
                       {i: turn.comparison for i, turn in enumerate(done) if turn.comparison is not None},
                       self.title, {i: turn.context_notice for i, turn in enumerate(done) if turn.context_notice},
                       self.runtime, self.drafter_comparisons,
                       reply_pairs={i: turn.pair for i, turn in enumerate(done) if turn.pair})

    @property
    def title(self) -> str:
        """The name the user gave the chat, else its first message's."""
        return self.given_title or (title_for(self.turns[0].request) if self.turns else "")

    @property
    def messages(self) -> list[dict]:
        """The conversation as the next request sends it (no system prompt): a continuation extends its reply."""
        messages: list[dict] = []
        for turn in self.turns:
            if not turn.continues:
                messages.append(dict(turn.request.messages[-1]))
            if turn.reply is not None:
                if turn.continues:
                    messages[-1]["content"] += turn.reply.text
                else:
                    messages.append({"role": "assistant", "content": turn.reply.text})
        return messages

    @property
    def chat_id(self) -> int | None:
        return self.recorder.chat_id

    @property
    def ready(self) -> bool:
        answers = self.remote is not None or self.pair is not None
        return answers and self.state is not TurnState.LOADING

    @property
    def busy(self) -> bool:
        return self.status.busy

    @property
    def can_continue(self) -> bool:
        """The last reply was cut at max new tokens, ended repeating itself or stopped, with some text to carry on
        from."""
        last = self.turns[-1].reply if self.turns else None
        return bool(last and last.text and (last.stopped or last.finish_reason in ("length", "repeating")))

    def first_part(self, index: int) -> int:
        """The turn that began the reply turn `index` shows (itself, unless it continues one)."""
        first = index
        while first > 0 and self.turns[first].continues:
            first -= 1
        return first

    def part_number(self, index: int) -> int:
        """Turn `index`'s number among the parts of the reply it shows: 1, or more for a continuation."""
        return index - self.first_part(index) + 1

    def whole_reply(self, index: int) -> Reply:
        """The reply turn `index` shows: its part, after the parts it continues."""
        first = self.first_part(index)
        whole = self.turns[first].reply
        for turn in self.turns[first + 1:index + 1]:
            whole = whole.extended_by(turn.reply)
        return whole

    @property
    def status(self) -> ChatStatus:
        return ChatStatus(self.state, self.ready, len(self.replies), self.can_continue, self.editing, self.title,
                          remote=self.remote is not None,
                          continuations=tuple(i for i, turn in enumerate(self.turns) if turn.continues))

    # -- commands ------------------------------------------------------------------------------------------

    def load_pair(self, target: str, draft: str | None, device: str, dtype: str, weights: str) -> None:
        """Load a local pair, or with a URL as the target connect to that engine (`draft` is then the served model's
        name, None for the only one it serves)."""
        if self._after_stop(lambda: self.load_pair(target, draft, device, dtype, weights)):
            return
        if is_url(target):
            self.connect_remote(target, draft)
            return
        request = (target, draft, device, dtype, weights)
        if self.remote is not None:
            self._leave_remote()
            if request == self._loaded_request and self.pair is not None:  # the pair behind the engine still answers
                self.pair_loaded.emit(self.pair)
                self._emit_status()
                return
        self._load_request = request
        self._set_state(TurnState.LOADING)
        self.load_started.emit(target, draft)
        self.load_requested.emit(target, draft, device, dtype, weights)

    def connect_remote(self, url: str, model: str | None = None) -> None:
        """Replies come from the engine at `url` once it answers; until then (and if it never does) the local pair
        stays as it was."""
        if self._after_stop(lambda: self.connect_remote(url, model)):
            return
        self._connecting = url
        self._set_state(TurnState.LOADING)
        self.load_started.emit(public_url(url), model)
        self.remote_connect_requested.emit(url, model)

    def use_local(self) -> None:
        """Back to the local pair from a remote engine (loaded again only where none was loaded)."""
        if self.remote is None:
            return
        if self._loaded_request is not None or self.pair is not None:
            if self._after_stop(self.use_local):
                return
            self._leave_remote()
            if self.pair is not None:
                self.pair_loaded.emit(self.pair)
            self._emit_status()
        else:
            self.load_pair("embedded", "embedded-draft", "auto", "auto", "auto")

    def send(self, text: str, options: TurnOptions) -> None:
        if self.busy:
            return
        if not self.ready:
            self.notice_posted.emit("Load a model pair first")
            return
        if self.editing is not None:  # edit-and-resend: the edited message replaces that turn and what followed
            self._truncate(self.editing)
        self._start_turn(self.messages + [{"role": "user", "content": text}], options)

    def stop(self) -> None:
        if self.busy:
            self._set_state(TurnState.STOPPING)
            (self.remote_stop_requested if self.remote is not None else self.stop_requested).emit()
        elif self.editing is not None:  # Esc also leaves edit-and-resend
            self.editing = None
            self.edit_cancelled.emit()
            self._emit_status()

    def regenerate(self, options: TurnOptions) -> None:
        """Decode the last reply again (all of it, if it was continued) with these settings; it replaces the old one
        here and on disk. A sampled reply regenerated with the seed it had takes the next seed, so that Regenerate
        draws a new sample (the old seed still reproduces the old one)."""
        if self.busy or not self.replies or not self.ready:
            return
        last = self.turns[-1].request.settings
        settings = options.settings
        if not settings.greedy and not last.greedy and settings.seed == last.seed:
            options = dataclasses.replace(options, settings=dataclasses.replace(
                settings, seed=(last.seed + 1) % SEED_LIMIT))
            self.seed_advanced.emit(last.seed, options.settings.seed)
        first = len(self.turns) - 1
        while first > 0 and self.turns[first].continues:
            first -= 1
        request = self.turns[first].request
        self._truncate(first)
        self._start_turn([dict(m) for m in request.messages if m["role"] != "system"], options)

    def continue_reply(self, options: TurnOptions) -> None:
        """Let the model carry on the last reply, cut at max new tokens, in the same assistant message."""
        if not self.busy and self.ready and self.can_continue:
            self._start_turn(self.messages, options)

    def edit(self, turn: int) -> None:
        """Put a turn's user message back for editing; sending it replaces that turn and all after it. A
        continuation's message is the one its first part answered."""
        if self.busy or not 0 <= turn < len(self.turns):
            return
        while turn > 0 and self.turns[turn].continues:
            turn -= 1
        self.editing = turn
        self.edit_started.emit(turn, self.turns[turn].request.messages[-1]["content"])
        self._emit_status()

    def set_gamma(self, gamma: int) -> None:
        """γ moved: the worker uses it from its next round, and a reply in flight records every γ it ran with."""
        self.gamma_requested.emit(gamma)
        request = self.turns[-1].request if self.turns else None
        if (self.state is TurnState.REPLYING and request is not None and request.settings.mode is Mode.SPEC
                and gamma != self.gammas[-1]):
            self.gammas.append(gamma)
            self.gammas_changed.emit(request.settings, tuple(self.gammas))

    def new_chat(self) -> None:
        """Start a fresh chat (saved once its first message is sent); a reply in flight is stopped and kept in
        the chat it belongs to first, so nothing of it lands in the new one."""
        if self._after_stop(self.new_chat):
            return
        self.recorder.new_chat()
        self.drafter_comparisons, self.given_title, self.saved_pair = (), None, None
        self._replay([])
        self.chats_changed.emit(None)
        self.reset_requested.emit()

    def open_chat(self, chat_id: int) -> None:
        """Reopen a saved chat as it was left, and carry on in it."""
        if self._after_stop(lambda: self.open_chat(chat_id)):
            return
        try:
            chat = self.store.load_chat(chat_id)
            given_title = self.store.given_title(chat_id)
        except ChatStoreError as exc:
            self.notice_posted.emit(f"Could not open that chat: {exc}")
            return
        self.recorder.resume(chat_id)
        self.system_prompt_restored.emit(chat.system_prompt)
        self.drafter_comparisons, self.given_title = chat.drafters, given_title
        self.saved_pair = chat.pair if chat.pair is not None and same_models(chat.pair, self.pair) else None
        self._replay([Turn(reply.request, reply, chat.comparisons.get(i),
                           pair=None if reply.remote else chat.reply_pairs.get(i, chat.pair),
                           runtime=None if reply.remote else chat.runtime) for i, reply in enumerate(chat.replies)])
        if chat.replies:  # Regenerate and Continue carry on as the chat was decoded, not as the last one was
            self.settings_restored.emit(chat.replies[-1].request.settings)
        self.chats_changed.emit(chat_id)

    def compare_drafters(self, options: TurnOptions) -> None:
        """Decode the last prompt again with the draft model, copying only, both, and plain AR, on the same target
        and these settings; the conversation is not changed. Reported by `drafters_compared`."""
        if self.busy or not self.ready:
            return
        if self.remote is not None:
            self.notice_posted.emit("Compare drafters runs on the local pair: switch back to it first")
            return
        if not self.turns:
            self.notice_posted.emit("Compare drafters runs the last prompt: send one first")
            return
        # the message the last reply answered, as sent: a continued reply's last part would decode its continuation
        messages = tuple(dict(m) for m in self.turns[self.first_part(len(self.turns) - 1)].request.messages)
        self._set_state(TurnState.COMPARING)
        self.saved_pair = None  # its runs re-time the loaded pair's costs, which the why tab then shows
        self.drafters_requested.emit(ReplyRequest(messages, dataclasses.replace(options.settings, mode=Mode.SPEC)))

    def export(self, base: Path) -> list[Path]:
        """The conversation's JSON, CSV and (given the window's charts) PNG; raises ExportError, writing nothing.
        Its pair is the one that decoded the last local reply (another may have been loaded since; the one still
        loaded has its costs as its rounds refined them, as the window shows), and each reply names its own."""
        done = [turn for turn in self.turns if turn.reply is not None]
        last = next((turn for turn in reversed(done) if turn.pair is not None), None)
        session = self.session
        if last is not None and not same_models(last.pair, self.pair):
            session = dataclasses.replace(session, pair=last.pair, runtime=last.runtime or session.runtime)
        return export_session(session, base, self.chart_image)

    def export_to(self, base: Path) -> None:
        """File ▸ Export: `export`, reported as `exported` or `export_failed`."""
        try:
            written = self.export(base)
        except ExportError as exc:
            self.export_failed.emit(str(exc))
            return
        self.exported.emit(written)

    # -- the saved chats, for the history list -------------------------------------------------------------

    def list_chats(self) -> list[ChatSummary] | None:
        """None when the database cannot be read (the message is posted)."""
        try:
            return self.store.list_chats()
        except ChatStoreError as exc:
            self.notice_posted.emit(str(exc))
            return None

    def rename_chat(self, chat_id: int, title: str) -> None:
        if title.strip():
            try:
                self.store.rename_chat(chat_id, title)
            except ChatStoreError as exc:  # a read-only database: the notice says where to fix it
                self.notice_posted.emit(str(exc))
                return
            if chat_id == self.chat_id:
                self.given_title = title.strip()
                self._emit_status()
            self.chats_changed.emit(self.chat_id)

    def delete_chat(self, chat_id: int) -> None:
        try:
            self.store.delete_chat(chat_id)
        except ChatStoreError as exc:
            self.notice_posted.emit(str(exc))
            return
        if chat_id == self.chat_id:
            self.new_chat()
        else:
            self.chats_changed.emit(self.chat_id)

    def export_chat(self, chat_id: int, base: Path) -> list[Path]:
        """A saved chat as the conversation on screen is exported (JSON and CSV; no chart image)."""
        chat = self.store.load_chat(chat_id)
        return export_session(Session(chat.pair, chat.replies, chat.comparisons, chat.title, runtime=chat.runtime,
                                      drafters=chat.drafters, reply_pairs=chat.reply_pairs), base)

    # -- slots for the worker's signals --------------------------------------------------------------------

    def on_models_loaded(self, info: PairInfo, runtime: Runtime | None = None) -> None:
        """`runtime`: what runs the pair here (None where the worker did not say)."""
        if not same_models(info, self.pair):  # another pair's rounds say nothing of this one; the chat keeps them
            self.drafter_comparisons = ()
        self.saved_pair = None
        if runtime is not None:
            self.timing_at_load = self.quiet_timings.judge(QuietTimings.key(info, runtime), info.costs, datetime.now())
            if self.timing_at_load.busy:
                info = dataclasses.replace(info, costs=self.timing_at_load.costs,
                                           target_step_s=self.timing_at_load.quiet_step_ms / 1e3)
                self.costs_replaced.emit(info.costs)
        self.timing.clear()  # the last pair's step times are neither this one's median nor its quiet speed
        self.timing.add(info.target_step_s)  # one timing before the first reply's own: a slow one is then caught
        self.pair, self.runtime = info, runtime
        self._loaded_request = self._load_request
        self.state = TurnState.IDLE
        self.pair_loaded.emit(info)
        if self.timing_at_load.busy:
            self.notice_posted.emit(self.timing_at_load.note)
        self._emit_status()
        self._emit_why()

    def on_costs_measured(self, costs: dict) -> None:
        """The worker's cost model after a reply or Compare drafters: its rounds keep each block's fastest timing.
        The chat keeps it too, for its why tab when reopened."""
        if self.pair is not None:
            self.pair = dataclasses.replace(self.pair, costs=dict(costs))
            self.recorder.pair_timed(self.pair)

    def on_drafters_progressed(self, drafting: str, tokens: int) -> None:
        self.drafters_progressed.emit(drafting, tokens)

    def on_drafters_compared(self, comparison: DrafterComparison) -> None:
        previous = next((kept for kept in self.drafter_comparisons if kept.request == comparison.request), None)
        self.drafter_comparisons = kept_drafters(self.drafter_comparisons, comparison)
        self.recorder.drafters_compared(self.drafter_comparisons)
        drawn_ar = next((turn.reply.stats.tokens_per_s for turn in reversed(self.turns)
                         if turn.reply is not None and not turn.reply.stopped
                         and turn.request.settings.mode is Mode.AR
                         and turn.request.messages == comparison.request.messages), 0.0)
        self.drafters_compared.emit(DraftersShown(comparison, previous, drawn_ar))
        self._finish_turn()

    def on_context_fitted(self, notice: ContextNotice) -> None:
        self._notice = notice

    def on_prefill_progressed(self, progress: PrefillProgress) -> None:
        self.prefill_progressed.emit(progress)

    def on_round_finished(self, event: RoundEvent) -> None:
        self.timing.add_round(event)  # live rounds only: a reopened chat's timings are from another moment
        self.recorder.round_finished(event)
        self.round_received.emit(RoundShown(event, live=True))

    def on_reply_finished(self, reply: Reply) -> None:
        # slow steps beside idle programs and an idle host were this window's own drawing
        others, host = self.other_programs.cores(), self.other_programs.host_cores()
        reply = dataclasses.replace(reply, others_cores=others, host_cores=host)
        if reply.request.settings.mode is Mode.SPEC:  # measured against the recent median, judged by the quiet floor
            reply = dataclasses.replace(reply, reference_s=self.timing.seconds,
                                        machine_busy=machine_was_busy(reply.events, self.timing)
                                        and others_took_cores(others, host))
        index = len(self.turns) - 1
        self.turns[index] = dataclasses.replace(self.turns[index], reply=reply,
                                                context_notice=self._notice.message if self._notice else "")
        self.recorder.reply_finished(reply)
        self.chats_changed.emit(self.chat_id)  # its count of replies: a turn holds one from its first round
        self.reply_finished.emit(ReplyShown(index, reply, self.whole_reply(index), self.can_continue, live=True,
                                            pair=self.turns[index].pair))
        if reply.request.compare_ar and not reply.stopped:
            self.other_programs.start()  # the comparison's runs are judged by what other programs did beside them
            if self.state is TurnState.REPLYING:
                self._set_state(TurnState.COMPARING)
            self._emit_why()  # the reply's acceptance and costs, not only once its comparison is done (a long
            # prompt's comparison reads it in twice again: 33 s)
            self._quiet_loop.watch()  # its runs start once the window's drawing of this reply has all run
            return
        self._finish_turn()

    def on_comparison_reading(self, progress: PrefillProgress) -> None:
        self.comparison_reading.emit(progress)

    def on_comparison_progressed(self, tokens: int, aim: int) -> None:
        """Compare with AR's runs have produced `tokens` of the `aim` (the worker's count of them)."""
        self.comparison_progressed.emit(tokens, aim)

    def on_comparison_finished(self, comparison: Comparison) -> None:
        for event in comparison.ar_events:
            self.timing.add_round(event)  # every AR step is a fresh single-token timing
        index = len(self.turns) - 1
        reply = self.turns[index].reply
        reply_events = reply.events if reply else ()
        busy = machine_was_busy(comparison.ar_events, self.timing) and others_took_cores(
            self.other_programs.cores(), self.other_programs.host_cores())
        comparison = dataclasses.replace(comparison, machine_busy=busy,
                                         unequal_loads=unequal_loads(comparison.spec_events or reply_events,
                                                                     comparison.ar_events))
        self.turns[index] = dataclasses.replace(self.turns[index], comparison=comparison)
        self.recorder.comparison_finished(comparison)
        self.comparison_finished.emit(ComparisonShown(index, comparison, self.turns[index].reply, self.pair,
                                                      self.fair_measured(index), self.part_number(index)))
        self._finish_turn()

    def fair_measured(self, last: int) -> tuple[float, ...]:
        """The measured speedups of the fair comparisons of turns 0..`last`."""
        return tuple(turn.comparison.speedup for turn in self.turns[:last + 1]
                     if turn.comparison is not None and turn.comparison.fair)

    def on_failed(self, message: str) -> None:
        """A failed load leaves the worker's decoder as it was: the previous pair, if any, still answers. A
        failed reply is dropped, here and on disk: the user can send it again."""
        loading = self.state is TurnState.LOADING
        self._end_failed_turn(self.failed, message)
        if loading and self.pair is not None:
            self.load_failed.emit(self.pair, self._loaded_request)

    # -- slots for the remote worker's signals -------------------------------------------------------------

    def on_remote_connected(self, model: str) -> None:
        if self._connecting is None:  # a connection the user has since left behind
            return
        self.remote = EngineTarget(public_url(self._connecting), model)
        self._connecting = None
        self.state = TurnState.IDLE
        self.remote_connected.emit(self.remote)
        self._emit_status()

    def on_remote_text_received(self, piece: TextDelta) -> None:
        if self.remote is not None and self.busy:
            self._remote_pieces.append(piece.text)
            self.remote_text_received.emit(piece)

    def on_remote_reply_finished(self, reply: RemoteReply) -> None:
        if self.remote is None or not self.busy:
            return
        self._finish_remote_reply(reply.text, stopped=False, reply=reply)

    def on_remote_stopped(self) -> None:
        if self.remote is not None and self.busy:
            self._finish_remote_reply("".join(self._remote_pieces), stopped=True, reply=None)

    def on_remote_failed(self, message: str) -> None:
        """A connection that fails leaves the local pair answering, as a failed load does; a reply that fails is
        dropped as a local one is. Either way the message is one line, for the status bar."""
        if self._connecting is not None:
            self._connecting = None
            self.state = TurnState.IDLE
            if self.remote is not None:
                message += f" (still using {self.remote.url})"
            else:
                message += (f" (still using the local pair {self.pair.target.name})" if self.pair is not None
                            else "; no local pair is loaded: choose one in the model pane and press Load pair")
                self.remote_left.emit(self._local_request())  # the picker shows what still answers
            self._emit_status()
            self.remote_failed.emit(message)
            return
        self._end_failed_turn(self.remote_failed, message)

    # -- helpers -------------------------------------------------------------------------------------------

    def _end_failed_turn(self, signal, message: str) -> None:
        """The turn ends with `message` on `signal`; a reply in flight is dropped, here and on disk, so the user
        can send it again."""
        in_flight = self.busy and self.turns and self.turns[-1].reply is None
        self.state = TurnState.IDLE
        signal.emit(message)
        if in_flight:
            self.recorder.turn_failed()
            self._replay(self.turns[:-1])
        self._finish_turn()

    def _finish_remote_reply(self, text: str, stopped: bool, reply: RemoteReply | None) -> None:
        index = len(self.turns) - 1
        request = self.turns[index].request
        source = RemoteSource(self.remote.url, reply.model if reply is not None else self.remote.model, reply)
        finished = Reply(request, (), text, stopped, remote=source)
        self.turns[index] = dataclasses.replace(self.turns[index], reply=finished)
        self.recorder.reply_finished(finished)
        self.reply_finished.emit(ReplyShown(index, finished, self.whole_reply(index), self.can_continue, live=True))
        self._finish_turn()

    def _leave_remote(self) -> None:
        self.remote = None
        self._connecting = None
        self.remote_left.emit(self._local_request())

    def _local_request(self) -> tuple | None:
        """The local pair's load request (names alone for an injected pair), for the picker to show."""
        if self._loaded_request is not None or self.pair is None:
            return self._loaded_request
        return self.pair.target.name, self.pair.draft.name if self.pair.draft else None

    def _start_turn(self, messages: list[dict], options: TurnOptions) -> None:
        system = [{"role": "system", "content": options.system_prompt}] if options.system_prompt.strip() else []
        settings = options.settings
        remote = self.remote is not None
        request = ReplyRequest(tuple(system + [dict(m) for m in messages]), settings,
                               compare_ar=options.compare_ar and settings.mode is Mode.SPEC and not remote)
        self.editing = None
        self._notice = None
        self.saved_pair = None  # from here on the chat is decoded, and drawn, by the loaded pair's costs
        self.gammas = [settings.gamma]
        self._remote_pieces = []
        pair, runtime = (None, None) if remote else (self.pair, self.runtime)
        self.recorder.turn_started(len(self.turns), request, pair, runtime)
        self.turns.append(Turn(request, stored_id=self.recorder.turn_id, pair=pair, runtime=runtime))
        self.turn_started.emit(TurnStarted(len(self.turns) - 1, request, live=True))
        self.chats_changed.emit(self.chat_id)
        self._set_state(TurnState.REPLYING)
        self.other_programs.start()
        if remote:  # the engine applies its own chat template and drafts with its own speculative config
            self.remote_prompt_requested.emit([dict(m) for m in request.messages], settings)
        else:
            self.prompt_requested.emit(request)

    def _emit_why(self) -> None:
        """Recompute what the "why this γ" charts show: after every turn, and for a conversation replayed."""
        self.why = why_gamma(self.session, self.timing_at_load.note)
        self.why_changed.emit(self.why)

    def _finish_turn(self) -> None:
        self._emit_why()
        self.state = TurnState.IDLE
        if self._notice is not None:
            notice, self._notice = self._notice, None
            self.context_fitted.emit(notice)
        self._emit_status()
        self.turn_completed.emit()
        if self._after_turn is not None:
            action, self._after_turn = self._after_turn, None
            action()

    def _after_stop(self, action: Callable[[], None]) -> bool:
        """With a reply in flight, stop it and run `action` once its turn has ended (True); else do nothing."""
        if not self.busy:
            return False
        self._after_turn = action
        self.stop()
        return True

    def _truncate(self, n_turns: int) -> None:
        """Keep the first `n_turns` turns; the store forgets the rest when the next turn starts."""
        self._replay(self.turns[:n_turns])

    def _replay(self, turns: list[Turn]) -> None:
        """Make `turns` the conversation and send it to the window as it was streamed: the same signals as live,
        each round charted against the reference step its reply was measured with."""
        self.turns = list(turns)
        self.editing = None
        self.conversation_cleared.emit()
        for index, turn in enumerate(self.turns):
            reply = turn.reply
            self.turn_started.emit(TurnStarted(index, turn.request, live=False))
            for event in reply.events:
                self.round_received.emit(RoundShown(event, live=False))
            self.reply_finished.emit(ReplyShown(index, reply, self.whole_reply(index),
                                                index == len(self.turns) - 1 and self.can_continue, live=False,
                                                pair=turn.pair))
            if turn.comparison is not None:
                self.comparison_finished.emit(ComparisonShown(index, turn.comparison, reply, self.pair,
                                                              self.fair_measured(index), self.part_number(index)))
        self._emit_status()
        self._emit_why()

    def _set_state(self, state: TurnState) -> None:
        self.state = state
        self._emit_status()

    def _emit_status(self) -> None:
        self.status_changed.emit(self.status)
