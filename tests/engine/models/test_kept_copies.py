"""What a load keeps of a GGUF (its weights prepared for the kernel, its tokenizer and config) is never used unless
it reads back as it was made: a damaged copy is named in one line and made again from the GGUF, and the reply is
the one the file gives."""
import shutil
import struct

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter, TokenType
from gguf.quants import quantize
from transformers import AutoConfig

from app.cli import main
from engine.kernels import q4q8
from engine.models import gguf_native
from engine.paths import cache_dir

pytestmark = pytest.mark.skipif(not q4q8.available(), reason="prepared weights are our kernel's")

EXACT = "the tokens of greedy AR decoding"  # the line that says a greedy reply is the target's
VOCAB, HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, HEAD_DIM = 64, 64, 128, 2, 1, 32
SHAPES = {"attn_q": (HEADS * HEAD_DIM, HIDDEN), "attn_k": (KV_HEADS * HEAD_DIM, HIDDEN),
          "attn_v": (KV_HEADS * HEAD_DIM, HIDDEN), "attn_output": (HIDDEN, HEADS * HEAD_DIM),
          "ffn_gate": (INTERMEDIATE, HIDDEN), "ffn_up": (INTERMEDIATE, HIDDEN), "ffn_down": (HIDDEN, INTERMEDIATE)}


def write_chat_gguf(path, seed: int = 0):
    """A one-layer random llama with the metadata a chat model's file has (a 64-token sentencepiece-style
    vocabulary, the config's sizes): Q4_0 projections, Q8_0 embeddings and head."""
    rng = np.random.default_rng(seed)
    writer = GGUFWriter(str(path), "llama")
    writer.add_vocab_size(VOCAB)
    writer.add_context_length(256)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(INTERMEDIATE)
    writer.add_block_count(1)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    tokens = ["<unk>", "<s>", "</s>", "▁", *letters, *("▁" + c for c in letters), "th", "he", "in", "er", "an", "re",
              "on", "at"]
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([-float(i) for i in range(VOCAB)])
    writer.add_token_types([TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.NORMAL] * (VOCAB - 3))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)

    def weights(rows: int, cols: int, std: float, qtype: Q) -> np.ndarray:
        return quantize((std * rng.standard_normal((rows, cols))).astype(np.float32), qtype)

    writer.add_tensor("token_embd.weight", weights(VOCAB, HIDDEN, 0.5, Q.Q8_0), raw_dtype=Q.Q8_0)
    writer.add_tensor("output.weight", weights(VOCAB, HIDDEN, 0.5, Q.Q8_0), raw_dtype=Q.Q8_0)
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    for name, shape in SHAPES.items():  # q and k larger, so attention is not uniform
        writer.add_tensor(f"blk.0.{name}.weight", weights(*shape, 0.16 if name in ("attn_q", "attn_k") else 0.02,
                                                            Q.Q4_0), raw_dtype=Q.Q4_0)
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(HIDDEN, np.float32))
    writer.add_tensor("blk.0.ffn_norm.weight", np.ones(HIDDEN, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def garble(file) -> None:
    """Random bytes in place of every tensor's: the header still reads, the weights are nonsense."""
    data = bytearray(file.read_bytes())
    start = 8 + struct.unpack("<Q", data[:8])[0]
    data[start:] = np.random.default_rng(1).integers(0, 256, len(data) - start, dtype=np.uint8).tobytes()
    file.write_bytes(bytes(data))


def generate(gguf, capsys) -> tuple[str, list[str]]:
    """A greedy speculative reply of the file drafting for itself (its weights prepared twice: the target's and the
    compacted draft's), and the lines it says on stderr (its figures and the exactness line left out)."""
    assert main(["generate", "hello there", "--target", str(gguf), "--draft", str(gguf), "--greedy",
                 "--max-new-tokens", "12", "--dtype", "float32", "--device", "cpu", "--target-weights", "native"]) == 0
    out, err = capsys.readouterr()
    assert EXACT in err.strip().splitlines()[-1]
    return out, [line for line in err.splitlines() if line.startswith("specdec:")]


def test_garbled_prepared_weights_are_made_again_and_the_reply_is_the_file_s(tmp_path, capsys):
    gguf = write_chat_gguf(tmp_path / "chat.gguf")
    reply, _ = generate(gguf, capsys)
    prepared = sorted((cache_dir() / "prepared").glob("*.safetensors"))
    assert len(prepared) == 2  # the target's and the draft's
    for file in prepared:
        garble(file)
    again, said = generate(gguf, capsys)
    assert again == reply
    assert len(said) == 2 and all(any(line.startswith(f"specdec: {file} is not used (") for line in said)
                                  for file in prepared), said
    assert all(line.endswith("does not match its checksum): made again from chat.gguf") for line in said), said
    assert generate(gguf, capsys) == (reply, [])  # what was made again reads back


def tiny_load(gguf):
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = gguf_native.load(gguf, config, torch.float32)
    return model(input_ids=torch.tensor([[3, 7, 11, 5, 9]])).logits


def truncate(file) -> None:
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


def drop_the_seal(file) -> None:
    """The file as this version writes it, less its checksums (as an older version wrote it)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(file, "pt") as f:
        tensors, metadata = {name: f.get_tensor(name) for name in f.keys()}, f.metadata()
    save_file(tensors, str(file), metadata={"layout": metadata["layout"]})


def made_from_another_gguf(file) -> None:
    other = write_chat_gguf(file.parent.parent / "other.gguf", seed=1)
    tiny_load(other)
    shutil.copyfile(gguf_native.prepared_path(other, False), file)


@pytest.mark.parametrize("damage, why", [
    (garble, "does not match its checksum"), (truncate, "unreadable: "),
    (drop_the_seal, "it carries no checksums"), (made_from_another_gguf, "it was made from another file"),
], ids=["garbled", "truncated", "older, unsealed", "another file's"])
def test_prepared_weights_that_do_not_read_back_are_made_again_from_the_gguf(tmp_path, capsys, damage, why):
    gguf = write_chat_gguf(tmp_path / "chat.gguf")
    fresh = tiny_load(gguf)
    file = gguf_native.prepared_path(gguf, False)
    damage(file)
    capsys.readouterr()
    torch.testing.assert_close(tiny_load(gguf), fresh, rtol=0, atol=0)
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(f"specdec: {file} is not used (") and why in err, err
    assert err.endswith("): made again from chat.gguf\n"), err
    tiny_load(gguf)
    assert capsys.readouterr().err == ""  # what was made again reads back


def delete(file) -> None:
    file.unlink()


@pytest.mark.parametrize("name, damage", [("tokenizer.json", delete), ("tokenizer.json", truncate),
                                          ("config.json", delete)],
                         ids=["tokenizer.json deleted", "tokenizer.json truncated", "config.json deleted"])
def test_a_kept_tokenizer_or_config_that_does_not_read_back_is_made_again_and_named(tmp_path, capsys, name, damage):
    gguf = write_chat_gguf(tmp_path / "chat.gguf")
    reply, _ = generate(gguf, capsys)
    (folder,) = (cache_dir() / "gguf-metadata").iterdir()
    damage(folder / name)
    again, said = generate(gguf, capsys)
    assert again == reply
    why = "is missing" if damage is delete else "does not match its checksum"
    assert said == [f"specdec: {folder} is not used ({name} {why}): made again from chat.gguf"]
    assert generate(gguf, capsys) == (reply, [])  # the folder made again reads back
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]  # nothing left beside it


def test_an_ollama_blob_without_the_gguf_suffix_loads_and_replies_as_its_file(tmp_path, capsys):
    """Ollama keeps a model as blobs/sha256-<hash>: a GGUF known by its first bytes, not its name."""
    write_chat_gguf(tmp_path / "model.gguf")
    blob = tmp_path / "blobs" / "sha256-0123abcd"
    blob.parent.mkdir()
    shutil.copyfile(tmp_path / "model.gguf", blob)
    assert generate(blob, capsys)[0] == generate(tmp_path / "model.gguf", capsys)[0]
