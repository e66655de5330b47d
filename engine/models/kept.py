"""What a load keeps per model file (a GGUF's tokenizer and prepared weights, a pair's measured costs, under
engine.paths.cache_dir): the key that ties it to one version of the file."""
from __future__ import annotations

import hashlib
from pathlib import Path


def file_key(path: Path, *more: object) -> str:
    """A short hash of the file's resolved path, size and modification time, and of `more`: a copy kept under it is
    made again once the file is replaced or moved."""
    stat = path.stat()
    parts = [str(path.resolve()), str(stat.st_size), str(stat.st_mtime_ns), *map(str, more)]
    return hashlib.sha256(":".join(parts).encode()).hexdigest()[:16]
