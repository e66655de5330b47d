"""The decoding worker: lives on a QThread, loads models and iterates the engine's round generator.

It never touches a widget. Each slot runs on the worker thread (queued from the window); `request_stop` and
`request_gamma` are called directly from the GUI thread and only set values the round loop reads between rounds
(and between the chunks of a long prompt's prefill, so Stop and closing the window are heard within one chunk);
`request_quit`, from the app's shutdown, is heard between the steps of the timing at load as well.
"""
from __future__ import annotations

import copy
import dataclasses
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from statistics import median

import torch
from PySide6.QtCore import QObject, Signal, Slot

from app.chat.labels import with_byte_labels
from app.pair.machine import described
from engine.benchmark.ranking import LOOKUP
from engine.decoding.costs import RoundPlanner
from engine.decoding.decoder import Decoder
from engine.decoding.drafters import LookupDrafter
from engine.decoding.recommend import cost_model_from_dict
from engine.events import ContextNotice, Drafting, Mode, PrefillProgress
from engine.models.loading import ModelLoadError
from engine.models.pairing import PairingError
from engine.stats import BUSY_FACTOR, LOADED_ROUNDS, reply_stats, went_faster
from words.records import Comparison, DrafterComparison, DrafterRun, Reply, ReplyRequest

# Compare drafters runs these in this order; none is plain AR, the baseline of the others
COMPARED_DRAFTINGS = (Drafting.MODEL, Drafting.LOOKUP, Drafting.BOTH, Drafting.NONE)
# ... all of them this many times over, in turn, each row its drafting's fastest run: on 2 cores one run of plain AR's
# work read 102.6 tok/s, and the next 56.5 (the nineteenth walk), and the fastest of runs taken in turn is the one
# least slowed by whatever else the machine did, for every drafting alike
DRAFTER_PASSES = 2
# A decode whose last LOADED_ROUNDS rounds ran, by their median, BUSY_FACTOR times slower than the cost model's quiet
# machine goes on with one thread. Another program on one of the cores stalls torch's and our kernel's threads at
# every parallel loop, each waiting for the one that lost its core: on 2 cores with one busy loop a plain step ran
# at 36-44 tok/s on two threads and at 103-105 on one (167 quiet on two, 107-109 quiet on one). Every decode starts
# again on all of the machine's threads; the output is the same bits on any number of them. The switch checks itself:
# where its next LOADED_ROUNDS rounds on one thread made their tokens no faster (engine.stats.went_faster) than the
# last ones on all did, the rounds read as loaded without another program (a long context the cost model prices low:
# a 3,327-token prompt's reply ran at half plain AR's speed on one thread of a quiet machine), and the decode goes
# back to all its threads.
# Only a drawn decode (a reply) switches: the undrawn runs that are measured against each other (Compare with AR,
# Compare drafters) keep all their threads, as a switch in one run of a pair and not in the other makes their ratio
# the switch's (the twenty-fifth walk, a quiet machine: 1.28x, then 0.66x, one run of each pair on one thread).
# Compare with AR's runs wait for the window to have drawn the reply they follow (at most this long): that drawing
# (its text, notes and charts, the stored reply: 8-20 ms here) would otherwise meet plain AR's run alone, which
# comes first.
DRAWN_WAIT_S = 2.0
# An undrawn run reports its progress at most this often: the window's progress bar and status bar paint at each
# report, in Python, and a report per round (one per 10 ms step) took the interpreter from the run at every step.
PROGRESS_EVERY_S = 0.1


def user_message(exc: BaseException) -> str:
    """The engine's own errors are written for users; anything else gets its type and first line (and the
    full traceback on stderr, for a bug report)."""
    if isinstance(exc, (ModelLoadError, PairingError, ValueError)):
        return str(exc)
    traceback.print_exception(exc)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Quitting(Exception):
    """The app is closing: the pair being timed at load is dropped."""


class DecodeWorker(QObject):
    models_loaded = Signal(object, object)  # PairInfo, Runtime (app.pair.machine.described)
    context_fitted = Signal(object)  # ContextNotice: turns were left out or the budget cut, before the prefill
    prefill_progressed = Signal(object)  # PrefillProgress, after each chunk of the prompt
    round_finished = Signal(object)  # RoundEvent
    reply_finished = Signal(object)  # Reply
    timing_started = Signal()  # the pair is loaded; its costs are being timed, which an idle machine times right
    timing_progressed = Signal(int, int)  # (done, total) steps of that timing
    comparison_finished = Signal(object)  # Comparison
    # tokens a comparison's runs (plain AR, then a speculative reply again) have made so far, and all they aim at
    comparison_progressed = Signal(int, int)
    comparison_reading = Signal(object)  # PrefillProgress: a comparison's run reads the prompt in again
    costs_measured = Signal(object)  # the cost model (CostModel.as_dict) as the reply's rounds left it
    drafters_progressed = Signal(str, int)  # Compare drafters: the drafting running, its tokens so far
    drafters_compared = Signal(object)  # DrafterComparison
    failed = Signal(str)

    def __init__(self, decoder: Decoder | None = None):
        super().__init__()
        self.decoder = decoder
        self.rounds_emitted = 0  # over the worker's lifetime; tests read it to check stop/γ latency
        self.threads: int | None = None  # torch's threads for this thread as the machine has them (first decode's)
        self._stop = threading.Event()
        self._quit = threading.Event()
        self._drawn = threading.Event()  # the window has drawn the last reply

    # -- called directly from the GUI thread ---------------------------------------------------------------

    def request_stop(self) -> None:
        self._stop.set()

    def request_quit(self) -> None:
        """Stop what runs and load nothing more: under load a pair's timing takes minutes, and the app's exit
        waits for this thread."""
        self._quit.set()
        self._stop.set()

    def request_gamma(self, gamma: int) -> None:
        if self.decoder is not None:
            self.decoder.request_gamma(gamma)

    def reply_drawn(self) -> None:
        """The window has drawn the reply just finished: a Compare with AR waiting for it may start."""
        self._drawn.set()

    # -- slots, run on the worker thread ---------------------------------------------------------------------

    @Slot()
    def on_thread_started(self) -> None:
        """Announce an injected decoder as if it had just been loaded."""
        if self.decoder is not None:
            self.models_loaded.emit(*described(self.decoder))

    @Slot(str, object, str, str, str)
    def on_load_requested(self, target: str, draft: str | None, device: str, dtype: str, weights: str) -> None:
        if self._quit.is_set():
            return
        try:
            copying_only = draft == LOOKUP
            decoder = Decoder.load(target, None if copying_only else draft, device=device, dtype=dtype,
                                   target_weights=weights)
            if copying_only:  # the draft list's "lookup only": no draft model, every draft a copy
                decoder.drafter = LookupDrafter(decoder.vocab_size, decoder.target.device)
            self.timing_started.emit()
            decoder.warm_up(self._timing_step, reuse=True)
        except _Quitting:
            return
        except Exception as exc:  # noqa: BLE001 - every failure becomes a dialog, never a traceback
            self.failed.emit(user_message(exc))
            return
        self.decoder = decoder
        self.models_loaded.emit(*described(decoder))

    def _timing_step(self, done: int, total: int) -> None:
        self.timing_progressed.emit(done, total)
        if self._quit.is_set():
            raise _Quitting

    @Slot(object)
    def on_costs_replaced(self, costs: dict) -> None:
        """Plan on `costs` (CostModel.as_dict) instead of the timing at load: the machine's load slowed that."""
        self.decoder.set_costs(cost_model_from_dict(costs))

    @Slot(object)
    def on_prompt_submitted(self, request: ReplyRequest) -> None:
        self._stop.clear()
        try:
            cached = len(self.decoder.runner)  # what the target had read before this reply
            events, text, stopped = self._decode(request, emit=True)
            reply = Reply(request, tuple(events), text, stopped)
            if self.decoder.costs is not None:  # its rounds refined it: the window's cost chart follows
                self.costs_measured.emit(self.decoder.costs.as_dict())
            self._drawn.clear()
            self.reply_finished.emit(reply)
            if request.compare_ar and not stopped:
                self.comparison_finished.emit(self._compare(request, reply, cached))
        except Exception as exc:  # noqa: BLE001
            self.failed.emit(user_message(exc))

    @Slot(object)
    def on_drafters_requested(self, request: ReplyRequest) -> None:
        """Compare drafters: decode the request's messages with each drafting choice on the same target and
        settings. The conversation is not touched; the decoder's own drafter and planner are put back after."""
        self._stop.clear()
        try:
            comparison = self._compare_drafters(request)
        except Exception as exc:  # noqa: BLE001
            self.failed.emit(user_message(exc))
            return
        if self.decoder.costs is not None:
            self.costs_measured.emit(self.decoder.costs.as_dict())
        self.drafters_compared.emit(comparison)

    @Slot()
    def on_new_chat_requested(self) -> None:
        if self.decoder is not None:
            self.decoder.reset()
            self.decoder.planner.forget_acceptance()

    # -- helpers ---------------------------------------------------------------------------------------

    def _decode(self, request: ReplyRequest, emit: bool, progress: Callable[[int], None] = lambda _tokens: None,
                reading: Callable[[PrefillProgress], None] = lambda _read: None) -> tuple[list, str, bool]:
        """Run the engine's stream to its end or to a stop request (checked between rounds and prefill chunks, and
        by the engine between a read-in block's layers); drawn (`emit`), on one thread from where the machine's
        load stalls its threads (LOADED_ROUNDS). Unless `emit`, the tokens so far are reported to `progress` after
        a round, and the prompt read so far to `reading` after a chunk but the last (whose report the window would
        draw beside the first, timed, round), at most every PROGRESS_EVERY_S."""
        events, pieces, n_tokens, reported_at = [], [], 0, time.monotonic()
        self.threads = self.threads or torch.get_num_threads()  # read on the thread that decodes: it is that thread's
        torch.set_num_threads(self.threads)
        recent = deque(maxlen=LOADED_ROUNDS)  # the last rounds
        on_all = None  # the rounds before the switch to one thread, while the rounds after it are judged
        switched = False  # once judged, the decode keeps its threads
        if emit and request.settings.mode is Mode.SPEC:
            self.decoder.measure_target_step()  # fresh, so the live AR-speedup estimate tracks machine load
        stream = self.decoder.stream([dict(m) for m in request.messages], request.settings, self._stop)
        finished = False
        try:
            for item in stream:
                if isinstance(item, ContextNotice):
                    if emit:
                        self.context_fitted.emit(item)
                    continue
                finished = False
                if isinstance(item, PrefillProgress):
                    if emit:
                        self.prefill_progressed.emit(item)
                    elif item.done < item.total and time.monotonic() - reported_at >= PROGRESS_EVERY_S:
                        reported_at = time.monotonic()
                        reading(item)
                else:
                    item = dataclasses.replace(with_byte_labels(item, self.decoder.tokenizer),
                                               threads=torch.get_num_threads())
                    recent.append(item)
                    if (emit and not switched and len(recent) == LOADED_ROUNDS
                            and median(e.load for e in recent) > BUSY_FACTOR and torch.get_num_threads() > 1):
                        torch.set_num_threads(1)
                        on_all, switched = list(recent), True
                        recent.clear()
                    elif on_all is not None and len(recent) == LOADED_ROUNDS:
                        if not went_faster(on_all, recent):
                            torch.set_num_threads(self.threads)
                        on_all = None
                    events.append(item)
                    pieces.append(item.text_delta)
                    finished = item.finish_reason is not None
                    if emit:
                        self.rounds_emitted += 1
                        self.round_finished.emit(item)
                    else:
                        n_tokens += len(item.emitted)
                        if finished or time.monotonic() - reported_at >= PROGRESS_EVERY_S:
                            reported_at = time.monotonic()
                            progress(n_tokens)
                if self._stop.is_set():
                    return events, "".join(pieces), not finished
        finally:
            stream.close()
            torch.set_num_threads(self.threads)  # a load or timing after a stalled reply runs on all threads again
        return events, "".join(pieces), not finished  # a stream stopped in a read-in block ends without a last round

    def _await_drawn(self) -> None:
        """Until the window has drawn the last reply, a stop or a quit comes, or DRAWN_WAIT_S passes."""
        deadline = time.monotonic() + DRAWN_WAIT_S
        while not self._drawn.wait(0.02):
            if self._stop.is_set() or time.monotonic() > deadline:
                return

    def _compare(self, request: ReplyRequest, reply: Reply, cached: int) -> Comparison:
        """Decode the same messages again, undrawn, with plain AR and then with the reply's own settings, and measure
        the one against the other: the reply streamed beside the window's drawing, which an undrawn run never meets
        (on 2 cores a 40-token reply streamed at 139 tok/s, the same decode undrawn at 160-187 and plain AR at 171).
        Before each run the target forgets what it read for the reply (`cached`: the positions it held before it),
        so each reads the same new part of the prompt; the rerun plans with a copy of the planner's acceptance, so
        the reply's verdicts are not counted twice. The chat history is not touched."""
        decoder = self.decoder
        rerun_wanted = request.settings.mode is Mode.SPEC
        aim = (2 if rerun_wanted else 1) * len(reply.tokens)  # each run aims at the reply's length
        self.comparison_progressed.emit(0, aim)  # the window shows its progress bar while it draws the reply
        self._await_drawn()
        decoder.runner.rollback(min(cached, len(decoder.runner)))
        ar_request = dataclasses.replace(request, settings=dataclasses.replace(request.settings, mode=Mode.AR))
        ar_events, ar_text, ar_stopped = self._decode(ar_request, emit=False,
                                                      progress=lambda n: self.comparison_progressed.emit(n, aim),
                                                      reading=self.comparison_reading.emit)
        ar = reply_stats(ar_events)
        rerun, stopped = [], ar_stopped
        if not stopped and rerun_wanted:
            kept = decoder.planner
            decoder.planner = dataclasses.replace(kept, acceptance=copy.deepcopy(kept.acceptance),
                                                  resting=copy.deepcopy(kept.resting))
            try:
                decoder.runner.rollback(min(cached, len(decoder.runner)))
                rerun, _, stopped = self._decode(
                    request, emit=False, progress=lambda n: self.comparison_progressed.emit(ar.n_tokens + n, aim),
                    reading=self.comparison_reading.emit)
            finally:
                decoder.planner = kept
        spec = reply_stats(rerun) if rerun and not stopped else reply.stats
        same = [t.token_id for t in reply.tokens] == [t.token_id for e in ar_events for t in e.emitted]
        return Comparison(ar_events=tuple(ar_events), ar_text=ar_text, spec_wall_s=spec.wall_s, ar_wall_s=ar.wall_s,
                          spec_tokens_per_s=spec.tokens_per_s, ar_tokens_per_s=ar.tokens_per_s,
                          identical=same if request.settings.greedy and not ar_stopped else None, stopped=stopped,
                          spec_prefill_s=spec.prefill_s, ar_prefill_s=ar.prefill_s,
                          spec_events=tuple(rerun) if not stopped else ())

    def _compare_drafters(self, request: ReplyRequest) -> DrafterComparison:
        """Each drafting on the same decoder with its own planner that starts from what the conversation's rounds
        taught the live one (its acceptance by position and calibration): a cost-aware round drafts only once drafts
        were seen kept, so a planner that knew nothing would draft nothing beside a reply that drafted. One
        drafting's verdicts do not steer another's rounds, nor the live planner's; the caches are reset before each
        run, and a fresh target step is timed before each speculative one."""
        decoder = self.decoder
        if decoder.costs is None:
            decoder.warm_up()
        kept = decoder.drafter, decoder.planner
        model = kept[0] if decoder.draft is not None else None
        lookup = LookupDrafter(decoder.vocab_size, decoder.target.device)
        attempts = {drafting: [] for drafting in COMPARED_DRAFTINGS}
        try:
            for drafting in (d for _ in range(DRAFTER_PASSES) for d in COMPARED_DRAFTINGS):
                runs = attempts[drafting]
                if drafting.draft_model and model is None:
                    runs.append(DrafterRun(drafting, (), skipped="no draft model loaded"))
                    continue
                if self._stop.is_set():
                    runs.append(DrafterRun(drafting, (), stopped=True))
                    continue
                label = f"{drafting.label} (run {len(runs) + 1} of {DRAFTER_PASSES})"
                speculative = drafting is not Drafting.NONE
                settings = dataclasses.replace(request.settings, mode=Mode.SPEC if speculative else Mode.AR,
                                               lookup=drafting.lookup)
                decoder.drafter = model if drafting.draft_model else lookup if speculative else kept[0]
                decoder.planner = RoundPlanner(decoder.costs, copy.deepcopy(kept[1].acceptance))
                decoder.reset()
                if speculative:
                    decoder.measure_target_step()
                events, _, stopped = self._decode(
                    dataclasses.replace(request, settings=settings, compare_ar=False), emit=False,
                    progress=lambda n, name=label: self.drafters_progressed.emit(name, n))
                runs.append(DrafterRun(drafting, tuple(events), stopped))
        finally:
            decoder.drafter, decoder.planner = kept
            decoder.reset()  # the conversation's next reply prefills afresh, as after a new chat
        return DrafterComparison(request, tuple(runs[0] if runs[0].skipped else DrafterRun.fastest(drafting, runs)
                                                for drafting, runs in attempts.items()))
