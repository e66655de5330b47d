"""Picking the draft that pays: each candidate measured beside plain AR, ranked, kept, and stoppable."""
import json

import pytest

from engine.benchmark import pick_draft as picking
from engine.benchmark import ranking as ranked
from engine.benchmark.ranking import LOOKUP, NONE, Pick
from tests.app.test_cli import saved_chain_pair
from tests.tiny import cheap_draft_costs, tiny_model

PROMPTS = ["a", "b"]


@pytest.fixture
def cheap_drafts(monkeypatch):
    """Tiny models' draft steps cost what their targets' do, so cost-aware rounds would draft nothing: plan on
    costs under which drafts pay, as a real small draft beside a large target does."""
    from engine.decoding.decoder import Decoder

    monkeypatch.setattr(Decoder, "warm_up", lambda self, **kw: self.set_costs(cheap_draft_costs()))


def test_rank_puts_the_fastest_first_and_candidates_not_measured_last():
    picks = [Pick(NONE, 1.0), Pick("broken", problem="damaged"), Pick("small", 1.3), Pick(LOOKUP, 0.97)]
    assert [p.draft for p in ranked.rank(picks)] == ["small", NONE, LOOKUP, "broken"]


def test_prompts_of_a_kind_are_the_same_every_pick_and_not_the_measurement_prompts():
    from engine.prompts import EVAL_PROMPTS

    code = picking.prompts_of("code")
    assert code == picking.prompts_of("code") and len(set(code)) == picking.PROMPTS_PER_PICK
    assert code != picking.prompts_of("chat")
    assert not set(code + picking.prompts_of("chat")) & set(EVAL_PROMPTS)
    with pytest.raises(ValueError, match="unknown kind of prompts"):
        picking.prompts_of("poetry")


def saved_other_tokenizer_model(tmp_path) -> str:
    other = tiny_model(3)
    other.model.save_pretrained(tmp_path / "other")
    other.tokenizer.save_pretrained(tmp_path / "other")
    return str(tmp_path / "other")


def test_each_candidate_is_measured_beside_plain_ar_and_one_that_cannot_pair_says_why(tmp_path, cheap_drafts):
    target, draft = saved_chain_pair(tmp_path)
    other = saved_other_tokenizer_model(tmp_path)
    picks = picking.pick_draft(target, [draft, other, LOOKUP, NONE], PROMPTS, max_new_tokens=16)
    by_draft = {p.draft: p for p in picks}
    assert set(by_draft) == {draft, other, LOOKUP, NONE}
    assert by_draft[NONE].measured_speedup == 1.0
    drafted = by_draft[draft]
    # the draft spells the target's chain but for one byte: most of its drafts are kept
    assert drafted.alpha > 0.5 and drafted.tokens_per_round > 1.5
    assert drafted.measured_speedup > 0 and drafted.predicted_speedup > 0 and drafted.draft_step_ms > 0
    assert by_draft[LOOKUP].measured_speedup is not None and by_draft[LOOKUP].draft_step_ms is None
    assert "vocabularies differ" in by_draft[other].problem and by_draft[other].measured_speedup is None
    assert picks[-1].draft == other  # not measured: ranked last


def test_a_progress_callback_that_raises_stops_the_pick_between_replies(tmp_path):
    target, draft = saved_chain_pair(tmp_path)
    seen = []

    def progress(done, total, what):
        seen.append(done)
        if done == 3:
            raise picking.PickStopped

    with pytest.raises(picking.PickStopped):
        picking.pick_draft(target, [draft, LOOKUP], PROMPTS, max_new_tokens=8, progress=progress)
    assert seen == [1, 2, 3]


def test_a_kept_ranking_reads_back_and_a_damaged_one_is_not_used(tmp_path):
    ranking = picking.new_ranking("t.gguf", "code", [Pick("d", 1.31, 1.25, 0.8, 2.1, [0.9, 0.7], 5.0, 20.0),
                                                   Pick(NONE, 1.0)])
    file = tmp_path / "picks" / "r.json"
    ranked.keep(ranking, file)
    assert ranked.kept_ranking(file) == ranking
    assert ranked.summary_line(ranking.best, ranking).startswith("1.31x on code here, measured ")
    file.write_text(json.dumps({"target": "t.gguf"}))  # a ranking cut short
    assert ranked.kept_ranking(file) is None
    file.write_bytes(b"\x00" * 40)
    assert ranked.kept_ranking(file) is None


def test_the_cli_prints_the_ranking_best_first_and_keeps_it(tmp_path, capsys, monkeypatch):
    from app import cli

    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "cache"))
    target, draft = saved_chain_pair(tmp_path)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a\nb\n")
    code = cli.main(["pick-draft", target, "--drafts", f"{draft},lookup,none", "--prompts", str(prompts),
                     "--max-new-tokens", "16"])
    out = capsys.readouterr().out
    assert code == 0, out
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| rank")]
    assert len(rows) == 3 and rows[0].startswith("| 1 |")
    assert "best: " in out
    kept = list((tmp_path / "cache" / "draft-picks").glob("*.json"))
    assert len(kept) == 1 and len(ranked.kept_ranking(kept[0]).picks) == 3


def test_the_default_candidates_are_the_drafts_the_library_finds_for_the_target_then_lookup_and_none(monkeypatch):
    from engine.models import library
    from engine.models.library import ModelRecord, TokenizerPrint

    qwen = TokenizerPrint(151936, "q" * 64, None, 151645)
    records = [ModelRecord("/m/big.gguf", "big", "studio", "gguf", "qwen2", 1_500_000_000, tokenizer=qwen),
               ModelRecord("/m/small.gguf", "small", "studio", "gguf", "qwen2", 500_000_000, tokenizer=qwen),
               ModelRecord("/m/other.gguf", "other", "studio", "gguf", "llama", 135_000_000,
                           tokenizer=TokenizerPrint(49152, "s" * 64, 1, 2))]
    monkeypatch.setattr(library, "scan", lambda folders=(): records)
    assert picking.default_candidates("big") == ["/m/small.gguf", LOOKUP, NONE]


def test_a_picks_progress_names_the_file_and_the_run_in_words():
    from engine.benchmark.pick_draft import run_said

    assert run_said("/home/me/models/small.gguf", "prompt 2 spec_draft") == "small.gguf: prompt 2, drafting"
    assert run_said(LOOKUP, "warm-up ar") == "lookup: warm-up, plain AR"
    assert run_said(LOOKUP, "prompt 1 spec_lookup") == "lookup: prompt 1, copying"
