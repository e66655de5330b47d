"""`specdec`: generate, bench, export-serving, prepare and train-draft from the command line.

Errors reach the user as one line on stderr and a non-zero exit, never as a traceback.
"""
from __future__ import annotations

import os
import sys

from app.cli.arguments import build_parser
from app.cli.commands import (cmd_bench, cmd_export_serving, cmd_generate, cmd_install_pair, cmd_models, cmd_pick_draft,
                              cmd_prepare, cmd_presets, cmd_train_draft)


def main(argv: list[str] | None = None) -> int:
    # Ctrl+C can come at any moment, the first seconds of imports (torch, transformers) included
    try:
        return run(argv)
    except KeyboardInterrupt:
        print("\nspecdec: interrupted", file=sys.stderr)
        return 130


def run(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"generate": cmd_generate, "bench": cmd_bench, "export-serving": cmd_export_serving,
                "prepare": cmd_prepare, "pick-draft": cmd_pick_draft,
                "train-draft": cmd_train_draft, "models": cmd_models, "presets": cmd_presets,
                "install-pair": cmd_install_pair}
    try:
        return commands[args.command](args)
    except Exception as exc:
        if is_for_the_user(exc):
            print(f"specdec: error: {exc}", file=sys.stderr)
            return 1
        if os.environ.get("SPECDEC_DEBUG"):  # anything unforeseen still gets one line unless asked for the traceback
            raise
        print(f"specdec: error: {type(exc).__name__}: {exc} (set SPECDEC_DEBUG=1 for details)", file=sys.stderr)
        return 1


def is_for_the_user(exc: Exception) -> bool:
    """Whether `exc` says what the user should change (a path, a prompt, a setting, a model pair): its message is
    written for them. PairingError is a ValueError; ModelLoadError is looked up only if its module was imported
    (nothing else raises it), since importing it means importing torch; RemoteError (a remote engine) likewise."""
    loading = sys.modules.get("engine.models.loading")
    remote = sys.modules.get("engine.remote")
    return isinstance(exc, (FileNotFoundError, ValueError)) or (
        loading is not None and isinstance(exc, loading.ModelLoadError)) or (
        remote is not None and isinstance(exc, remote.RemoteError))
