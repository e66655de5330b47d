"""Measure the worst GUI event-loop stall while the real window streams a reply from real models.

    QT_QPA_PLATFORM=offscreen .venv/bin/python -m tests.ui.stall_real [TARGET] [DRAFT] [MAX_NEW_TOKENS]

Not a pytest test: it loads real weights and its figure depends on machine load (the 50 ms bar is checked
here, on a quiet machine); tests/ui/window/test_responsiveness.py checks with tiny models that the loop keeps running.
"""
from __future__ import annotations

import sys

from PySide6.QtWidgets import QApplication

from engine.events import DecodeSettings
from studio.window import build
from ui.window.stall_probe import StallProbe

PROMPT = "Write a short paragraph about why speculative decoding is lossless."


def main() -> int:
    target = sys.argv[1] if len(sys.argv) > 1 else "embedded"
    draft = sys.argv[2] if len(sys.argv) > 2 else "embedded"
    max_new_tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 96
    app = QApplication(sys.argv[:1])
    studio = build(target=target, draft=draft, defaults=DecodeSettings(max_new_tokens=max_new_tokens))
    window = studio.window
    probe = StallProbe(10)
    studio.chat.prompt_requested.connect(probe.start)

    def report() -> None:
        probe.stop()
        reply = studio.chat.replies[-1]
        stats = reply.stats
        print(f"{target} + {draft}: {stats.n_tokens} tokens, {stats.n_rounds} rounds, {stats.tokens_per_s:.1f} tok/s; "
              f"worst event-loop stall {probe.worst_stall_s * 1000:.1f} ms over {len(probe.gaps)} ticks "
              f"(10 ms probe timer)")
        app.quit()

    def send(_info) -> None:
        window.message_box.setPlainText(PROMPT)
        window.message_box.submit()

    window.models_shown.connect(send)
    window.turn_completed.connect(report)
    studio.worker.failed.connect(lambda message: (print(message, file=sys.stderr), app.exit(1)))
    app.aboutToQuit.connect(studio.shutdown)
    studio.start()
    window.show()
    window.picker.request_load()
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
