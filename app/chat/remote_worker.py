"""The worker for a remote target: lives on a QThread, streams a reply from a running engine (engine.remote) and
emits what arrives. It never touches a widget; the local DecodeWorker keeps working beside it.

studio.window.build moves it to its own QThread and connects it to the chat controller: `on_target_requested(url,
model)` to choose and connect to an engine, `on_prompt_submitted(messages, settings)` for a reply, `request_stop`
directly from the GUI thread.
"""
from __future__ import annotations

import threading

from PySide6.QtCore import QObject, Signal, Slot

from engine.events import DecodeSettings
from engine.remote import RemoteEngine, RemoteError
from engine.remote_records import RemoteReply


class RemoteWorker(QObject):
    connected = Signal(str)  # the served model's name
    text_received = Signal(object)  # TextDelta: one engine step's text
    reply_finished = Signal(object)  # RemoteReply
    stopped = Signal()  # a reply cut short by request_stop
    failed = Signal(str)  # one line

    def __init__(self, url: str = "", model: str | None = None, timeout_s: float = 60.0):
        super().__init__()
        self.url, self.model, self.timeout_s = url, model, timeout_s
        self.engine: RemoteEngine | None = None
        self._stop = threading.Event()

    def request_stop(self) -> None:
        """Called from the GUI thread: the reply ends at the next streamed piece."""
        self._stop.set()

    @Slot(str, object)
    def on_target_requested(self, url: str, model: str | None) -> None:
        """Talk to another engine from now on (connected at once, so a wrong URL or model name shows now)."""
        self.url, self.model, self.engine = url, model, None
        self.on_connect_requested()

    @Slot()
    def on_connect_requested(self) -> None:
        try:
            self.engine = RemoteEngine(self.url, self.model, timeout_s=self.timeout_s)
            self.connected.emit(self.engine.connect())
        except RemoteError as exc:
            self.engine = None
            self.failed.emit(str(exc))

    @Slot(object, object)
    def on_prompt_submitted(self, messages: list[dict], settings: DecodeSettings) -> None:
        self._stop.clear()
        if self.engine is None:
            self.on_connect_requested()
            if self.engine is None:
                return
        try:
            stream = self.engine.stream_chat(messages, settings)
            for piece in stream:
                if isinstance(piece, RemoteReply):
                    self.reply_finished.emit(piece)
                elif self._stop.is_set():
                    stream.close()  # closes the connection: the engine aborts the request
                    self.stopped.emit()
                    return
                else:
                    self.text_received.emit(piece)
        except RemoteError as exc:
            self.failed.emit(str(exc))
