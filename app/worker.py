"""The decoding worker: lives on a QThread, loads models and iterates the engine's round generator.

It never touches a widget. Each slot runs on the worker thread (queued from the window); `request_stop` and
`request_gamma` are called directly from the GUI thread and only set values the round loop reads between rounds
(and between the chunks of a long prompt's prefill, so Stop and closing the window are heard within one chunk).
"""
from __future__ import annotations

import dataclasses
import threading
import traceback

from PySide6.QtCore import QObject, Signal, Slot

from app.labels import with_byte_labels
from engine.decoding.decoder import Decoder
from engine.events import ContextNotice, Mode, PrefillProgress
from engine.models.loading import ModelLoadError
from engine.models.pairing import PairingError
from engine.stats import reply_stats
from ui.session import Comparison, Reply, ReplyRequest


def user_message(exc: BaseException) -> str:
    """The engine's own errors are written for users; anything else gets its type and first line (and the
    full traceback on stderr, for a bug report)."""
    if isinstance(exc, (ModelLoadError, PairingError, ValueError)):
        return str(exc)
    traceback.print_exception(exc)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class DecodeWorker(QObject):
    models_loaded = Signal(object)  # PairInfo
    context_fitted = Signal(object)  # ContextNotice: turns were left out or the budget cut, before the prefill
    prefill_progressed = Signal(object)  # PrefillProgress, after each chunk of the prompt
    round_finished = Signal(object)  # RoundEvent
    reply_finished = Signal(object)  # Reply
    comparison_finished = Signal(object)  # Comparison
    comparison_progressed = Signal(int)  # tokens the plain AR run behind a comparison has produced so far
    failed = Signal(str)

    def __init__(self, decoder: Decoder | None = None):
        super().__init__()
        self.decoder = decoder
        self.rounds_emitted = 0  # over the worker's lifetime; tests read it to check stop/γ latency
        self._stop = threading.Event()

    # -- called directly from the GUI thread ---------------------------------------------------------------

    def request_stop(self) -> None:
        self._stop.set()

    def request_gamma(self, gamma: int) -> None:
        if self.decoder is not None:
            self.decoder.request_gamma(gamma)

    # -- slots, run on the worker thread ---------------------------------------------------------------------

    @Slot()
    def on_thread_started(self) -> None:
        """Announce an injected decoder as if it had just been loaded."""
        if self.decoder is not None:
            self.models_loaded.emit(self.decoder.info())

    @Slot(str, object, str, str, str)
    def on_load_requested(self, target: str, draft: str | None, device: str, dtype: str, weights: str) -> None:
        try:
            decoder = Decoder.load(target, draft, device=device, dtype=dtype, target_weights=weights)
            decoder.warm_up()
        except Exception as exc:  # noqa: BLE001 - every failure becomes a dialog, never a traceback
            self.failed.emit(user_message(exc))
            return
        self.decoder = decoder
        self.models_loaded.emit(decoder.info())

    @Slot(object)
    def on_prompt_submitted(self, request: ReplyRequest) -> None:
        self._stop.clear()
        try:
            events, text, stopped = self._decode(request, emit=True)
            reply = Reply(request, tuple(events), text, stopped)
            self.reply_finished.emit(reply)
            if request.compare_ar and not stopped:
                self.comparison_finished.emit(self._compare(request, reply))
        except Exception as exc:  # noqa: BLE001
            self.failed.emit(user_message(exc))

    @Slot()
    def on_new_chat_requested(self) -> None:
        if self.decoder is not None:
            self.decoder.reset()

    # -- helpers ---------------------------------------------------------------------------------------

    def _decode(self, request: ReplyRequest, emit: bool) -> tuple[list, str, bool]:
        """Run the engine's stream to its end or to a stop request (checked between rounds and prefill chunks)."""
        events, pieces = [], []
        if emit and request.settings.mode is Mode.SPEC:
            self.decoder.measure_target_step()  # fresh, so the live AR-speedup estimate tracks machine load
        stream = self.decoder.stream([dict(m) for m in request.messages], request.settings)
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
                else:
                    item = with_byte_labels(item, self.decoder.tokenizer)
                    events.append(item)
                    pieces.append(item.text_delta)
                    finished = item.finish_reason is not None
                    if emit:
                        self.rounds_emitted += 1
                        self.round_finished.emit(item)
                    else:
                        self.comparison_progressed.emit(len(events))  # plain AR: one token per round
                if self._stop.is_set():
                    return events, "".join(pieces), not finished
        finally:
            stream.close()
        return events, "".join(pieces), False

    def _compare(self, request: ReplyRequest, reply: Reply) -> Comparison:
        """Decode the same messages with plain AR; the chat history is not touched."""
        ar_request = dataclasses.replace(request, settings=dataclasses.replace(request.settings, mode=Mode.AR))
        ar_events, ar_text, stopped = self._decode(ar_request, emit=False)
        spec, ar = reply.stats, reply_stats(ar_events)
        same = [t.token_id for t in reply.tokens] == [t.token_id for e in ar_events for t in e.emitted]
        return Comparison(ar_events=tuple(ar_events), ar_text=ar_text, spec_wall_s=spec.wall_s, ar_wall_s=ar.wall_s,
                          spec_tokens_per_s=spec.tokens_per_s, ar_tokens_per_s=ar.tokens_per_s,
                          identical=same if request.settings.greedy and not stopped else None, stopped=stopped)
