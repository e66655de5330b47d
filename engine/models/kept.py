"""What a load keeps per model file (a GGUF's tokenizer and prepared weights, a pair's measured costs, under
engine.paths.cache_dir): the key that ties it to one version of the file, and the seal of a kept copy (the prepared
weights, the tokenizer and config): the checksums of the file it was made from and of its own parts. A copy whose
seal does not hold is never used: it is said in one line and made again from its source."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import zlib
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path

SEAL_FILE = "kept.json"  # a kept folder's seal, beside the files it vouches for


def file_key(path: Path, *more: object) -> str:
    """A short hash of the file's resolved path, size and modification time, and of `more`: a copy kept under it is
    made again once the file is replaced or moved."""
    stat = path.stat()
    parts = [str(path.resolve()), str(stat.st_size), str(stat.st_mtime_ns), *map(str, more)]
    return hashlib.sha256(":".join(parts).encode()).hexdigest()[:16]


def checksum(data) -> str:
    """CRC-32 of a buffer's bytes: it finds damage (any burst of up to 32 bits; one random change in 2³² goes
    unseen), not tampering, and is about twice as fast as the hashes, for a prepared file is checked on every load."""
    return f"{zlib.crc32(data):08x}"


def seal(source: str, parts: Mapping[str, object]) -> str:
    """The seal of a kept copy made from the source known by `source` (a file_key): each part's checksum."""
    return json.dumps({"source": source, "checksums": {name: checksum(data) for name, data in parts.items()}})


def damage(sealed: str | None, source: str, parts: Mapping[str, object | None]) -> str | None:
    """Why `parts` (None: a part that could not be read) are not what `sealed` vouches for, made from `source`; None
    when they are."""
    if sealed is None:
        return "it carries no checksums: made before they were kept, or damaged"
    try:
        record = json.loads(sealed)
        made_from, checksums = record["source"], dict(record["checksums"])
    except (ValueError, KeyError, TypeError):
        return "its checksums are unreadable"
    if made_from != source:
        return "it was made from another file"
    for name in sorted(checksums.keys() | parts.keys()):
        if parts.get(name) is None:
            return f"{name} is missing"
        if name not in checksums:
            return f"{name} is not in its checksums"
        if checksum(parts[name]) != checksums[name]:
            return f"{name} does not match its checksum"
    return None


def say_damaged(copy: Path, why: str, source: Path) -> None:
    """The one line saying a kept copy is being made again (on stderr whatever it is: unlike a phase's line, a
    reader of the output must learn that the cache was not what it was)."""
    print(f"specdec: {copy} is not used ({why}): made again from {source.name}", file=sys.stderr, flush=True)


def seal_folder(folder: Path, source: str) -> None:
    """Write the seal of every file in `folder` (a kept copy made from `source`) beside them."""
    parts = {file.name: file.read_bytes() for file in sorted(folder.iterdir()) if file.name != SEAL_FILE}
    (folder / SEAL_FILE).write_text(seal(source, parts))


def folder_damage(folder: Path, source: str) -> str | None:
    """Why the kept `folder` does not read back as sealed (`damage`), or None."""
    seal_file = folder / SEAL_FILE
    sealed = seal_file.read_text(errors="replace") if seal_file.is_file() else None
    return damage(sealed, source, {file.name: file.read_bytes() for file in folder.iterdir() if file != seal_file})


def put_in_place(partial: Path, folder: Path) -> None:
    """Move the freshly made folder `partial` to `folder`, where a damaged copy may be: a reader finds the old copy,
    the new one or none, never a mix. Where another process put its copy in place first, that one is kept."""
    old = folder.with_name(f"{folder.name}.{os.getpid()}.old")
    with suppress(FileNotFoundError):
        folder.rename(old)
    try:
        partial.rename(folder)
    except OSError:  # another process made it first
        shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
