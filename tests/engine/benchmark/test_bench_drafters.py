"""`specdec bench --drafters`: the drafting choices side by side, acceptance by position in the JSON and CSV, and
the recommended γ beside the best measured one."""
import csv
import json

import pytest

from app.cli import bench as cli_bench
from engine.benchmark import bench, summary
from engine.decoding.costs import CostModel
from tests.tiny import tiny_decoder


def test_drafters_name_their_methods_and_keep_other_methods_given():
    assert cli_bench.bench_methods(None, ["model", "lookup", "both", "none"]) == ["spec_draft", "spec_lookup", "spec",
                                                                              "ar"]
    assert cli_bench.bench_methods(["ar", "naive"], ["lookup"]) == ["spec_lookup", "ar", "naive"]
    assert "spec_lookup" not in cli_bench.bench_methods(None, None)


@pytest.fixture(scope="module")
def drafters_run(tmp_path_factory):
    from app import cli
    from engine.decoding.decoder import Decoder

    decoder = tiny_decoder()
    tmp = tmp_path_factory.mktemp("drafters")
    prompts = tmp / "prompts.txt"
    prompts.write_text("w3 w7 w11 w5 w9 w3 w7 w11 w5 w9 w3 w7\nw9 w2 w4 w9 w2 w4 w9 w2\n")
    out = tmp / "out"
    original = Decoder.load
    Decoder.load = classmethod(lambda cls, *a, **k: decoder)
    try:
        argv = ["bench", "--target", "tiny-0", "--draft", "tiny-1", "--prompts", str(prompts), "--max-new-tokens",
                "16", "--gammas", "1,3", "--decoding", "greedy", "--drafters", "model,lookup,both,none"]
        import contextlib
        import io

        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            assert cli.main(argv + ["--out", str(out)]) == 0
    finally:
        Decoder.load = original
    return text.getvalue(), json.loads((out / "results.json").read_text()), out


def test_the_drafters_table_has_one_row_per_drafting_and_gamma(drafters_run):
    text, _, _ = drafters_run
    table = text[text.index("| drafters |"):].split("\n\n")[0].splitlines()
    assert table[0] == ("| drafters | decoding | γ | tokens/s | α | tokens/round | accepted/round | seed's E "
                        "| speedup vs ar |")
    assert [line.split(" | ")[0].lstrip("| ") for line in table[2:]] == ["none", "both", "both", "model", "model",
                                                                         "lookup", "lookup"]


def test_every_drafting_is_lossless_in_greedy_mode(drafters_run):
    _, result, _ = drafters_run
    assert result["greedy_identical"] is True
    lookup = [r for r in result["runs"] if r["method"] == "spec_lookup"]
    assert all(r["identical_to_ar"] == "2/2" for r in lookup)
    assert all(r["position_acceptance"]["copied"] == r["position_acceptance"]["drafted"] for r in lookup)


def test_the_csv_has_a_line_per_row_and_draft_position(drafters_run):
    _, result, out = drafters_run
    with (out / "position_acceptance.csv").open() as f:
        lines = list(csv.DictReader(f))
    expected = sum(len(r["position_acceptance"]["drafted"]) for r in result["runs"] if r.get("position_acceptance"))
    assert len(lines) == expected > 0
    assert set(lines[0]) == set(summary.CSV_FIELDS)


def test_the_bench_prints_the_recommended_gamma_beside_the_best_measured(drafters_run):
    text, result, _ = drafters_run
    methods = {r["method"] for r in result["recommendations"]}
    assert {"spec", "spec_draft", "spec_lookup", "drafters"} <= methods
    assert "best measured " in text and "recommended drafters" in text
    assert all(("recommended γ " in line or "recommended plain AR" in line) for line in text.splitlines()
               if "best measured " in line)


def record(method: str, gamma: int, tokens_per_s: float, kept: list[float]) -> dict:
    n = len(kept)
    return {"method": method, "decoding": "greedy", "gamma": gamma, "stop_below": 0.0, "tokens_per_s": tokens_per_s,
            "speedup_vs_ar": tokens_per_s / 10, "position_acceptance": {
                "n_rounds": 100, "drafted": [1.0] * n, "copied": [0.0] * n, "kept": kept, "conditional": [0.8] * n,
                "alpha": 0.8, "mean_accepted": sum(kept), "tokens_per_round": 1 + sum(kept),
                "seed_tokens_per_round": 1 + sum(kept)}}


def test_recommendations_use_the_widest_row_and_name_the_fastest_measured():
    costs = CostModel([(10 + k) / 1e3 for k in range(9)], draft_step_s=1e-3, copy_s=1e-5, overhead_s=5e-4)
    kept = [0.8 ** i for i in range(1, 7)]
    records = [record("spec_draft", 2, 20.0, kept[:2]), record("spec_draft", 6, 18.0, kept)]
    (found,) = summary.recommendations(records, costs)
    assert found["best_measured_gamma"] == 2 and found["gammas"] == [2, 6]
    assert 2 <= found["recommended"]["gamma"] <= 6
    line, = summary.recommendation_lines([found])
    assert line.startswith(f"spec_draft greedy γ drafts: recommended γ {found['recommended']['gamma']}")


def test_plain_ar_counts_as_gamma_0_when_every_draft_length_measured_slower():
    costs = CostModel([(10 + 8 * k) / 1e3 for k in range(9)], draft_step_s=6e-3, copy_s=1e-5, overhead_s=5e-4)
    kept = [0.3 ** i for i in range(1, 5)]
    ar = {"method": "ar", "decoding": "greedy", "gamma": None, "tokens_per_s": 10.0, "speedup_vs_ar": 1.0}
    records = [ar, record("spec_draft", 1, 8.0, kept[:1]), record("spec_draft", 4, 5.0, kept)]
    (found,) = summary.recommendations(records, costs)
    assert found["gammas"] == [0, 1, 4] and found["best_measured_gamma"] == 0
    assert found["recommended"]["gamma"] == 0 and found["within_one_step"]
    assert "best measured plain AR (1.00x), within one step" in summary.recommendation_lines([found])[0]


def test_one_step_is_the_measured_neighbours_of_the_best_gamma():
    grid = [0, 1, 2, 3, 4, 6, 8]
    assert summary.within_one_step(5, 4, grid) and summary.within_one_step(3, 4, grid)
    assert summary.within_one_step(0, 1, grid) and summary.within_one_step(8, 6, grid)
    assert not summary.within_one_step(2, 4, grid) and not summary.within_one_step(8, 4, grid)
