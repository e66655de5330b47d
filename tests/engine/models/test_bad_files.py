"""Files the user points at that cannot be used: damaged GGUFs, a folder without a tokenizer, pickle-only weights.
Each is refused in one line naming the file, the file is left as it was, and the next request works."""
import struct
import tracemalloc

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from app.cli import main
from engine.models import gguf_native
from tests.app.test_cli import one_error_line
from tests.engine.models.test_gguf_native import write_gguf
from tests.tiny import tiny_model

GGUF_MAGIC = 0x46554747


@pytest.fixture
def saved_tiny(tmp_path, capsys):
    """A tiny model saved as a model folder (safetensors): what the next request loads."""
    loaded = tiny_model(0)
    loaded.model.save_pretrained(tmp_path / "tiny")
    loaded.tokenizer.save_pretrained(tmp_path / "tiny")
    capsys.readouterr()  # transformers' progress bar
    return tmp_path / "tiny"


def next_request_works(folder) -> None:
    assert main(["generate", "w3 w4", "--target", str(folder), "--mode", "ar", "--max-new-tokens", "2",
                 "--dtype", "float32", "--device", "cpu"]) == 0


def small_gguf(path):
    rng = np.random.default_rng(0)
    write_gguf(path, {"token_embd.weight": (rng.standard_normal((64, 32)).astype(np.float32), Q.F32),
                      "output_norm.weight": (np.ones(32, dtype=np.float32), Q.F32)})
    return path


def test_a_truncated_gguf_is_named_as_damaged_in_one_line_and_left_as_it_was(tmp_path, capsys, saved_tiny):
    whole = small_gguf(tmp_path / "whole.gguf").read_bytes()
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(whole[: len(whole) // 2])
    assert main(["generate", "hi", "--target", str(truncated), "--mode", "ar"]) == 1
    one_error_line(capsys, f"{truncated} is damaged or truncated: tensor 'token_embd.weight' ends at byte")
    assert truncated.read_bytes() == whole[: len(whole) // 2]
    next_request_works(saved_tiny)


@pytest.mark.parametrize("header, claim", [
    (struct.pack("<IIQQ", GGUF_MAGIC, 3, 2 ** 40, 0), "claims 1099511627776 tensors"),
    (struct.pack("<IIQQQ", GGUF_MAGIC, 3, 0, 1, 2 ** 62), "reads on to byte .* \\(a string\\)"),
    (struct.pack("<IIQQQ", GGUF_MAGIC, 3, 0, 1, 2) + b"\xd0\xd0", "can't decode byte 0xd0"),
    (struct.pack("<IIQQQ", GGUF_MAGIC, 3, 1, 0, 1) + b"t" + struct.pack("<IQQIQ", 2, 2 ** 40, 2 ** 40, 0, 0),
     "tensor 't' ends at byte"),
], ids=["2**40 tensors", "2**62-byte string", "not UTF-8", "2**80-row tensor"])
def test_an_absurd_gguf_header_is_refused_without_allocating_what_it_claims(tmp_path, header, claim):
    path = tmp_path / "absurd.gguf"
    path.write_bytes(header + bytes(4096))
    tracemalloc.start()
    try:
        with pytest.raises(gguf_native.GGUFError, match=f"^{path} is damaged.*{claim}") as error:
            gguf_native.read_tensors(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20 and len(str(error.value).splitlines()) == 1
    assert gguf_native.read_tensors(small_gguf(tmp_path / "whole.gguf"))[1].keys() == {"token_embd.weight",
                                                                                       "output_norm.weight"}


def test_a_file_that_is_not_a_gguf_says_so(tmp_path, capsys):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"PK\x03\x04" + bytes(100))
    assert main(["generate", "hi", "--target", str(path), "--mode", "ar"]) == 1
    one_error_line(capsys, f"{path} is not a GGUF file (it does not start with 'GGUF')")


def test_a_folder_with_only_config_json_says_it_has_no_tokenizer_files(tmp_path, capsys, saved_tiny):
    folder = tmp_path / "config-only"
    folder.mkdir()
    (folder / "config.json").write_bytes((saved_tiny / "config.json").read_bytes())
    assert main(["generate", "hi", "--target", str(folder), "--mode", "ar"]) == 1
    one_error_line(capsys, f"{folder} has no tokenizer files")
    assert [p.name for p in folder.iterdir()] == ["config.json"]
    next_request_works(saved_tiny)


@pytest.fixture
def pickle_only(tmp_path, capsys):
    import torch

    loaded = tiny_model(0)
    (tmp_path / "pickled").mkdir()
    torch.save(loaded.model.state_dict(), tmp_path / "pickled" / "pytorch_model.bin")  # as older releases saved
    loaded.model.config.save_pretrained(tmp_path / "pickled")
    loaded.tokenizer.save_pretrained(tmp_path / "pickled")
    assert not list((tmp_path / "pickled").glob("*.safetensors"))
    return tmp_path / "pickled"


def test_a_pickle_only_checkpoint_is_refused_and_says_why(pickle_only, capsys, monkeypatch):
    monkeypatch.delenv("SPECDEC_ALLOW_PICKLE", raising=False)
    before = (pickle_only / "pytorch_model.bin").read_bytes()
    assert main(["generate", "w3", "--target", str(pickle_only), "--mode", "ar", "--dtype", "float32"]) == 1
    one_error_line(capsys, "has only pickle weights (pytorch_model.bin)", "a pickle can run code when it is loaded",
                   "SPECDEC_ALLOW_PICKLE=1")
    assert (pickle_only / "pytorch_model.bin").read_bytes() == before


def test_a_pickle_only_checkpoint_loads_when_explicitly_allowed(pickle_only, monkeypatch):
    monkeypatch.setenv("SPECDEC_ALLOW_PICKLE", "1")
    next_request_works(pickle_only)


def test_a_hub_model_is_asked_for_safetensors_and_refused_without_them(monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM

    from engine.models import loading

    asked = []

    def from_pretrained(source, **kwargs):
        asked.append(kwargs.get("use_safetensors"))
        raise OSError(f"{source} does not appear to have a file named model.safetensors or "
                      "model.safetensors.index.json and thus cannot be loaded with `safetensors`.")

    monkeypatch.delenv("SPECDEC_ALLOW_PICKLE", raising=False)
    monkeypatch.setattr(loading, "_hub_access", lambda repo_id: {})
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", from_pretrained)
    with pytest.raises(loading.ModelLoadError, match="^someone/old-model has no safetensors weights on the hub, "
                                                     "and a pickle can run code"):
        loading.load_model("someone/old-model", torch.device("cpu"), torch.float32, tokenizer=tiny_model(0).tokenizer)
    assert asked == [True]


def test_a_gguf_path_that_is_a_folder_is_named_as_a_folder(tmp_path):
    from engine.models.loading import ModelLoadError, load_tokenizer

    (tmp_path / "model.gguf").mkdir()
    with pytest.raises(ModelLoadError, match="is a folder, not a GGUF file"):
        load_tokenizer(str(tmp_path / "model.gguf"))


def test_a_gguf_without_tokenizer_metadata_names_the_file_and_what_it_lacks(tmp_path):
    from engine.models.loading import ModelLoadError, load_tokenizer

    write_gguf(tmp_path / "bare.gguf", {"token_embd.weight": (np.zeros((64, 32), np.float32), Q.F32)})
    with pytest.raises(ModelLoadError, match=r"bare\.gguf lacks a complete tokenizer"):
        load_tokenizer(str(tmp_path / "bare.gguf"))
