"""Where the studio keeps what it makes for the user: a module of its own, so that the kernels and the models both
read it without importing each other."""
from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """SPECDEC_HOME, else ~/.cache/specdec-studio: the prepared embedded pair, installed pairs, built kernels."""
    return Path(os.environ.get("SPECDEC_HOME", Path.home() / ".cache" / "specdec-studio"))


def cache_dir() -> Path:
    """Where a load keeps what it made of a model file (engine.models.kept): SPECDEC_CACHE_DIR, else the home
    folder. The tests point it at their own folder, for the programs they start too."""
    return Path(os.environ.get("SPECDEC_CACHE_DIR", home()))
