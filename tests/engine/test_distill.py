"""The draft recipe's pieces on tiny models: initialisation, draft vocabulary, the loss, saving and assembling."""
import torch

from engine.models import embedded, preparing
from engine.decoding.decoder import Decoder
from engine.training.distill import Sample, _loss_and_agreement, build_draft, draft_vocabulary, save_assets
from engine.events import DecodeSettings
from tests.tiny import PROMPT, tiny_model


def test_draft_layers_start_as_copies_of_the_chosen_target_layers():
    target = tiny_model(0, layers=4).model
    draft = build_draft(target, layers=(0, 3))
    assert draft.config.num_hidden_layers == 2
    assert torch.equal(draft.model.layers[1].mlp.up_proj.weight, target.model.layers[3].mlp.up_proj.weight.float())
    assert torch.equal(draft.model.embed_tokens.weight, target.model.embed_tokens.weight)
    assert torch.equal(draft.lm_head.weight, target.lm_head.weight)  # untied here: both shared with the target
    assert not draft.model.embed_tokens.weight.requires_grad and not draft.lm_head.weight.requires_grad


def _sample(ids, n_prompt, vocab=64):
    n = len(ids) - n_prompt
    teacher_ids = torch.tensor([[ids[n_prompt + i]] + list(range(15)) for i in range(n)], dtype=torch.int32)
    teacher_probs = torch.zeros(n, 16, dtype=torch.float16)
    teacher_probs[:, 0] = 1.0
    return Sample(ids, n_prompt, teacher_ids, teacher_probs, greedy=True)


def test_draft_vocabulary_ranks_emitted_tokens_and_keeps_special_ones():
    samples = [_sample([5, 6, 7, 7, 7, 9], 2), _sample([5, 7, 9, 9, 8], 1)]
    assert draft_vocabulary(samples, size=3, always=[1]) == [1, 7, 9]


def test_distillation_loss_falls_and_agreement_rises_on_a_fixed_batch():
    target = tiny_model(0, layers=2)
    draft = build_draft(target.model, layers=(0,))
    samples = [_sample([3, 4, 5, 6, 7, 8, 9, 10], 3), _sample([11, 12, 13, 14, 15, 16], 2)]
    vocab = list(range(64))
    weight = draft.get_output_embeddings().weight[torch.tensor(vocab)].detach()
    to_vocab = torch.arange(64)
    optim = torch.optim.AdamW([p for p in draft.parameters() if p.requires_grad], lr=1e-2)
    first_loss, first_agree = _loss_and_agreement(draft, samples, weight, to_vocab)
    for _ in range(40):
        loss, agree = _loss_and_agreement(draft, samples, weight, to_vocab)
        optim.zero_grad()
        loss.backward()
        optim.step()
    assert loss.item() < first_loss.item() / 2
    assert agree > first_agree and agree >= 0.8


def test_saved_assets_hold_no_shared_tensor_and_assemble_into_a_working_draft(tmp_path, monkeypatch):
    target = tiny_model(0, layers=3)
    monkeypatch.setenv("SPECDEC_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(embedded, "ASSET_DIR", tmp_path / "assets")
    target.model.save_pretrained(embedded.target_dir())
    target.tokenizer.save_pretrained(embedded.target_dir())
    draft = build_draft(target.model, layers=(0, 2))
    save_assets(draft, list(range(40)), {"note": "test"}, embedded.ASSET_DIR)

    from safetensors.torch import load_file
    stored = load_file(embedded.ASSET_DIR / "weights.safetensors")
    assert "model.embed_tokens.weight" not in stored and "lm_head.weight" not in stored
    assert all(t.dtype == torch.bfloat16 for t in stored.values())

    preparing.prepare_draft()
    # the prepared copy: the package's GGUF is the real target, not this test's tiny one
    decoder = Decoder.load("embedded", "embedded-draft", device="cpu", dtype="float32", target_weights="dtype")
    assert decoder.drafter.runner.draft_vocab.tolist() == list(range(40))
    events = list(decoder.generate(PROMPT, DecodeSettings(gamma=3, max_new_tokens=12)))
    ar = list(decoder.generate(PROMPT, DecodeSettings(mode="ar", max_new_tokens=12)))
    assert [t.token_id for e in events for t in e.emitted] == [t.token_id for e in ar for t in e.emitted]
    assert all(t.token_id < 40 for e in events for t in e.drafted)  # drafts come from the draft vocabulary


def saved_tiny_target(tmp_path):
    """A tiny chat target saved to tmp_path/target and loaded back as `specdec train-draft` loads one."""
    from engine.models.loading import load_model

    tiny = tiny_model(0, layers=2)
    tiny.tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    tiny.model.save_pretrained(tmp_path / "target")
    tiny.tokenizer.save_pretrained(tmp_path / "target")
    target = load_model(str(tmp_path / "target"), torch.device("cpu"), torch.float32)
    return target


def test_parallel_answering_gives_the_same_data_as_one_process_and_resumes_interrupted_batches(tmp_path):
    from engine.training.distill import generate_data

    target = saved_tiny_target(tmp_path)
    recipe = dict(seed=3, batch_size=2, max_new_tokens=5, temperature=0.7, multi_turn_fraction=0.5)
    (tmp_path / "alone").mkdir()
    (tmp_path / "alone" / "batch-0001.claim").touch()  # left by an interrupted run: must be answered again
    alone = generate_data(target, 6, 1, chunk_dir=tmp_path / "alone", **recipe)
    shared = generate_data(target, 6, 2, chunk_dir=tmp_path / "shared", **recipe)
    assert len(alone) == 6 + 3  # a second turn for half of each batch
    assert [s.ids for s in shared] == [s.ids for s in alone]
    assert all(torch.equal(a.teacher_probs, b.teacher_probs) for a, b in zip(alone, shared))
    assert {s.greedy for s in alone} == {True, False}


class Planted:
    """A pickle that runs code when loaded: it creates the file named in it."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_batch_files_left_in_the_working_folder_are_never_unpickled(tmp_path):
    from engine.training.distill import generate_data

    target = saved_tiny_target(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    marker = tmp_path / "code-ran"
    # as an earlier release left an answered batch, or as anyone could plant one
    torch.save([Planted(marker)], work / "batch-0000.pt")
    (work / "batch-0000.claim").touch()
    samples = generate_data(target, 2, 1, chunk_dir=work, seed=3, batch_size=2, max_new_tokens=3, temperature=0.7,
                            multi_turn_fraction=0.0)
    assert not marker.exists() and len(samples) == 2
    assert sorted(p.name for p in work.iterdir()) == ["batch-0000.claim", "batch-0000.pt", "batch-0000.safetensors"]


def test_a_saved_batch_loads_back_sample_for_sample(tmp_path):
    from engine.training.distill import load_batch, save_batch

    samples = [_sample([5, 6, 7, 7, 7, 9], 2), _sample([5, 7, 9, 9, 8], 1)]
    save_batch(samples, tmp_path / "batch.safetensors")
    loaded = load_batch(tmp_path / "batch.safetensors")
    assert [(s.ids, s.n_prompt, s.greedy) for s in loaded] == [(s.ids, s.n_prompt, s.greedy) for s in samples]
    assert all(torch.equal(a.teacher_ids, b.teacher_ids) and torch.equal(a.teacher_probs, b.teacher_probs)
               for a, b in zip(loaded, samples))


def test_batched_answers_equal_each_prompt_decoded_alone():
    """Left padding must not leak into any row: a batch of prompts of different lengths gets, row by row, the
    greedy answer the model gives that prompt alone, and the kept top-k is the model's own distribution."""
    from engine.training.distill import TOP_K, generate_batch

    target = tiny_model(0, layers=2)
    prompts = [[5, 9, 3], [7, 2, 11, 13, 4, 8, 6], [10, 12, 14, 16, 18]]
    answers = generate_batch(target, prompts, greedy=True, temperature=1.0, max_new_tokens=6)
    for prompt, answer in zip(prompts, answers):
        ids = torch.tensor([prompt])
        alone = target.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False,
                                      eos_token_id=target.tokenizer.eos_token_id, pad_token_id=0)[0].tolist()
        assert answer.ids == alone and answer.n_prompt == len(prompt)
        logits = target.model(torch.tensor([answer.ids[:-1]])).logits[0, len(prompt) - 1:].float()
        expected_probs, expected_ids = logits.softmax(-1).topk(TOP_K, dim=-1)
        assert torch.equal(answer.teacher_ids, expected_ids.to(torch.int32))
        assert torch.allclose(answer.teacher_probs.float(), expected_probs, atol=1e-3)
