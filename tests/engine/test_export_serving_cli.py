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


ADVICE = {"drafting": "both", "gamma": 4, "stop_below": 0.2, "speedup": 1.4}


def refusal(results, capsys) -> str:
    """The one line export-serving answers `results` with, after checking it exits 1 with it alone."""
    assert main(["export-serving", "--engine", "vllm", "--from-bench", str(results)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"specdec: error: --from-bench {results}: ") and "Error" not in err
    return err.strip()


@pytest.mark.parametrize("text, lacks", [
    ("[1, 2]", "a JSON list, not an object with 'recommendations'"),
    ('"results"', "a JSON str, not an object with 'recommendations'"),
    ('{"recommendations": {"drafters": {}}}', "its 'recommendations' is not a list"),
    ('{"recommendations": [3]}', "recommendation 1 has no 'method' and 'recommended' object"),
    (json.dumps({"recommendations": [{"recommended": ADVICE}]}),
     "recommendation 1 has no 'method' and 'recommended' object"),
    (json.dumps({"env": ["org/target"], "recommendations": [{"method": "drafters", "recommended": ADVICE}]}),
     "its 'env' is not an object"),
])
def test_json_that_is_not_a_bench_result_says_what_it_lacks(tmp_path, capsys, text, lacks):
    results = tmp_path / "results.json"
    results.write_text(text)
    assert refusal(results, capsys).endswith(f"not a bench's results.json: {lacks}")


@pytest.mark.parametrize("field, value, says", [
    ("drafting", None, "'drafting' is missing (one of model, lookup, both, none)"),
    ("drafting", "sideways", "'drafting' is \"sideways\", not one of model, lookup, both, none"),
    ("gamma", None, "'gamma' is missing (a whole number)"),
    ("gamma", "4", "'gamma' is \"4\", not a whole number"),
    ("stop_below", None, "'stop_below' is missing (a number)"),
    ("speedup", None, "'speedup' is missing (a number)"),
])
def test_a_bench_recommendation_missing_a_field_names_it(tmp_path, capsys, field, value, says):
    advice = {k: v for k, v in ADVICE.items() if k != field} | ({} if value is None else {field: value})
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"env": {"target": {"name": "org/target"}}, "recommendations": [
        {"method": "spec", "recommended": ADVICE}, {"method": "drafters", "recommended": advice}]}))
    assert refusal(results, capsys).endswith(f"recommendation 2's {says}")


def test_a_bench_file_that_is_not_json_is_one_line(tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text('{"recommendations": [')
    assert "not a bench's results.json: not JSON (Expecting value: line 1" in refusal(results, capsys)


def test_a_missing_bench_file_is_named(tmp_path, capsys):
    assert refusal(tmp_path / "results.json", capsys).endswith("results.json: No such file or directory")


def test_an_unknown_engine_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["export-serving", "--engine", "tgi"])
    assert exit_.value.code == 2 and "choose from vllm, llama-server, transformers" in capsys.readouterr().err
