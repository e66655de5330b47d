"""Model ▸ Serve the embedded pair on vLLM: a real vLLM (from .venv-vllm, `make serving-peer`) serving the embedded
target's de-quantised directory with the tuned pair's speculative config, started on its own thread (it takes
minutes to answer) and stopped when the studio leaves it or closes. The studio then chats with it as with any
remote engine.
"""
from __future__ import annotations

import threading

from PySide6.QtCore import QObject, Signal, Slot

from app.why import WhyGamma
from engine.benchmark.vllm_peer import VllmServer
from engine.events import Drafting
from engine.remote import RemoteError
from engine.serving import TunedPair, vllm_speculative_config


def tuned_choice(why: WhyGamma, gamma: int) -> tuple[Drafting, int]:
    """The drafting and γ to serve: the session's recommendation where it drafts with something vLLM runs alone
    (the draft model, or n-gram lookup), else the draft model at the slider's γ."""
    recommendation = why.recommendation
    if recommendation is not None and recommendation.drafting in (Drafting.MODEL, Drafting.LOOKUP):
        return recommendation.drafting, recommendation.gamma
    return Drafting.MODEL, gamma


def embedded_pair(drafting: Drafting, gamma: int) -> TunedPair:
    """The embedded pair as vLLM loads it: the target's de-quantised directory, the draft's prepared one."""
    from app.cli import served_name
    from engine.benchmark.vllm_peer import servable_dir

    draft = served_name("embedded-draft", "vllm") if drafting.draft_model else None
    return TunedPair(servable_dir("embedded"), draft, drafting, gamma)


class ServingPeer(QObject):
    """Owns at most one server. `on_start_requested` runs on its thread; `request_stop` may be called from any."""

    started = Signal(str)  # the ready server's base URL
    failed = Signal(str)  # one line

    def __init__(self, make_server=VllmServer, pair_for=embedded_pair):
        super().__init__()
        self.make_server, self.pair_for = make_server, pair_for
        self.url: str | None = None  # of the server that answers
        self._server = None
        self._lock = threading.Lock()

    @Slot(str, int)
    def on_start_requested(self, drafting: str, gamma: int) -> None:
        self.request_stop(wait=True)
        try:
            pair = self.pair_for(Drafting(drafting), gamma)
            server = self.make_server(pair.target, vllm_speculative_config(pair))
        except (RemoteError, OSError, ValueError) as exc:
            self.failed.emit(f"Cannot serve the embedded pair: {exc}")
            return
        with self._lock:
            self._server = server
        try:
            server.start()
        except RemoteError as exc:
            with self._lock:
                cancelled = self._server is not server
                self._server = None
            if not cancelled:  # a stop while it started ends it with an error that is no news
                self.failed.emit(str(exc))
            return
        with self._lock:
            if self._server is not server:
                return
            self.url = server.base_url
        self.started.emit(server.base_url)

    def request_stop(self, wait: bool = False) -> None:
        """Stop the server (one still starting, too); `wait` blocks until its processes are gone, else they are
        ended on a helper thread, so the window never waits for them."""
        with self._lock:
            server, self._server, self.url = self._server, None, None
        if server is None:
            return
        if wait:
            server.stop()
        else:
            threading.Thread(target=server.stop, name="vllm-stop").start()
