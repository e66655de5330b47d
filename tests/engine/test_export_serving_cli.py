"""`specdec export-serving`: the options or a bench's recommendation, written for one engine."""
import json
import shlex

import pytest

from app.cli import main


def command_line(out: str) -> list[str]:
    (line,) = [line for line in out.splitlines() if line and not line.startswith("#")]
    return shlex.split(line)


def test_the_options_reach_the_vllm_config(capsys):
    assert main(["export-serving", "--engine", "vllm", "--target", "org/target", "--draft", "org/draft",
                 "--gamma", "5", "--drafters", "model"]) == 0
    argv = command_line(capsys.readouterr().out)
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 5}
    assert argv[argv.index("--model") + 1] == "org/target"


def test_a_bench_s_recommendation_is_exported(tmp_path, capsys):
    results = tmp_path / "results.json"
    advice = {"drafting": "lookup", "gamma": 3, "stop_below": 0.27, "speedup": 1.3}
    results.write_text(json.dumps({
        "env": {"target": {"name": "org/target"}, "draft": {"name": "org/draft"}},
        "recommendations": [{"method": "spec", "recommended": {**advice, "drafting": "both", "speedup": 1.1}},
                            {"method": "drafters", "recommended": advice}]}))
    assert main(["export-serving", "--engine", "llama-server", "--from-bench", str(results)]) == 0
    argv = command_line(capsys.readouterr().out)
    assert argv[argv.index("--spec-type") + 1] == "ngram-simple"
    assert argv[argv.index("--spec-ngram-simple-size-m") + 1] == "3" and "--model-draft" not in argv


def test_a_bench_file_without_a_recommendation_is_one_line(tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"runs": []}))
    assert main(["export-serving", "--engine", "vllm", "--from-bench", str(results)]) == 1
    assert capsys.readouterr().err.startswith("specdec: error: --from-bench")


def test_an_unknown_engine_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["export-serving", "--engine", "tgi"])
    assert exit_.value.code == 2 and "choose from vllm, llama-server, transformers" in capsys.readouterr().err
