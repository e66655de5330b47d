"""The bench's arithmetic on synthetic runs, the seed's naive algorithm against our AR, and a tiny end-to-end run."""
import json

import pytest
import torch

from app.cli import bench as cli_bench
from engine.benchmark import bench, summary
from engine.benchmark.bench import Config, Row, Run
from engine.benchmark.naive import speculative_decode
from engine.events import DecodeSettings, DraftedToken, EmittedToken, Fate, RoundEvent
from engine.remote_records import EngineSpecStats
from engine.stats import expected_tokens_per_round
from tests.tiny import EOS_ID, PROMPT, tiny_decoder


def event(gamma: int, n_accepted: int, draft_s: float = 0.0, verify_s: float = 0.01) -> RoundEvent:
    """A round that drafted γ tokens and accepted the first n_accepted (then a correction or the bonus)."""
    looked_at = min(n_accepted + 1, gamma)
    drafted = tuple(DraftedToken(5, "", 0.5, 0.5, None, i < n_accepted) for i in range(looked_at))
    fates = [Fate.ACCEPTED] * n_accepted + [Fate.CORRECTED if n_accepted < gamma else Fate.BONUS]
    if gamma == 0:
        fates = [Fate.TARGET]
    emitted = tuple(EmittedToken(5, "", fate, 0.5) for fate in fates)
    return RoundEvent(index=0, gamma=gamma, drafted=drafted, emitted=emitted, text_delta="", draft_s=draft_s,
                      verify_s=verify_s, round_s=draft_s + verify_s)


def run(config: Config, tokens: list[int], wall_s: float, events=None, prompt_index: int = 0, **kw) -> Run:
    return Run(config, prompt_index, 0, tokens, wall_s, events=events, **kw)


def test_plan_puts_methods_in_a_fixed_order_with_one_row_per_gamma_and_stop_rule():
    configs = bench.plan(["spec", "ar", "hf_assisted"], ["greedy"], [2, 4], [0.0, 0.3])
    assert [(c.method, c.gamma, c.schedule, c.stop_below) for c in configs] == [
        ("ar", None, None, None), ("spec", 2, None, 0.0), ("spec", 4, None, 0.0),
        ("spec", 2, None, 0.3), ("spec", 4, None, 0.3),
        ("hf_assisted", 2, "constant", None), ("hf_assisted", 4, "constant", None),
        ("hf_assisted", None, "default", None), ("hf_assisted", None, "heuristic", None),
    ]
    assert [c.gamma_label for c in configs[1:5]] == ["2", "4", "≤2, stop 0.3", "≤4, stop 0.3"]


@pytest.mark.parametrize("methods, decodings, gammas, message", [
    (["fast"], ["greedy"], [1], "unknown bench method"),
    (["ar"], ["beam"], [1], "unknown decoding"),
    (["spec"], ["greedy"], [0], "gamma must be between"),
    (["spec"], ["greedy"], [], "--gammas is empty"),
])
def test_plan_rejects_bad_input_with_one_line(methods, decodings, gammas, message):
    with pytest.raises(ValueError, match=message):
        bench.plan(methods, decodings, gammas)
    with pytest.raises(ValueError, match="stop-below must be in"):
        bench.plan(["spec"], ["greedy"], [2], [1.0])


def test_speedup_is_tokens_per_second_over_ar_of_the_same_decoding_mode():
    ar = Row(Config("ar", "greedy"), [run(Config("ar", "greedy"), [1] * 10, 2.0, [event(0, 0)] * 10)])
    spec_config = Config("spec", "greedy", 4)
    # 4 rounds: accepted 4, 2, 0, 4 of 4 drafts -> 5 + 3 + 1 + 5 = 14 tokens; 2 + ... verified: 4 + 3 + 1 + 4
    events = [event(4, n, draft_s=0.04) for n in (4, 2, 0, 4)]
    spec = Row(spec_config, [run(spec_config, [1] * 14, 1.4, events)])
    sampled_ar = Row(Config("ar", "sample"), [run(Config("ar", "sample"), [1] * 10, 10.0, [event(0, 0)] * 10)])
    result = summary.summarize([ar, spec, sampled_ar])
    ar_record, spec_record, sampled_record = result["runs"]
    assert ar_record["speedup_vs_ar"] == 1.0
    assert ar_record["tokens_per_round"] == 1.0
    assert spec_record["tokens_per_s"] == pytest.approx(10.0)
    assert spec_record["speedup_vs_ar"] == pytest.approx(10.0 / 5.0)  # not vs the slower sampled AR
    assert spec_record["alpha"] == pytest.approx(10 / 12)
    assert spec_record["acceptance_rate"] == pytest.approx(10 / 16)
    assert spec_record["tokens_per_round"] == pytest.approx(14 / 4)
    assert spec_record["per_position_acceptance"] == pytest.approx([3 / 4, 3 / 3, 2 / 3, 2 / 2])
    assert spec_record["theory_tokens_per_round"] == pytest.approx(expected_tokens_per_round(10 / 12, 4))
    # T_q = 0.16 s / 16 drafts, T_p = AR's mean verify step 0.01 s: E / (1 + 4 · 1)
    assert spec_record["t_q_s"] == pytest.approx(0.01)
    assert spec_record["t_p_s"] == pytest.approx(0.01)
    assert spec_record["modelled_speedup"] == pytest.approx(expected_tokens_per_round(10 / 12, 4) / 5)
    assert sampled_record["speedup_vs_ar"] == 1.0


def test_adaptive_rows_report_drafts_per_round_and_leave_out_the_fixed_gamma_formulas():
    ar = Row(Config("ar", "greedy"), [run(Config("ar", "greedy"), [1] * 10, 2.0, [event(0, 0)] * 10)])
    config = Config("spec", "greedy", 6, stop_below=0.3)
    events = [event(g, n, draft_s=0.01) for g, n in ((3, 3), (1, 0), (2, 1))]  # 4 + 1 + 2 tokens
    record = summary.summarize([ar, Row(config, [run(config, [1] * 7, 0.7, events)])])["runs"][1]
    assert record["drafts_per_round"] == pytest.approx(2.0) and record["tokens_per_round"] == pytest.approx(7 / 3)
    assert record["stop_below"] == 0.3 and record["t_q_s"] == pytest.approx(0.005)
    assert "theory_tokens_per_round" not in record and "modelled_speedup" not in record


def test_theory_curve_is_the_seeds_geometric_sum():
    assert expected_tokens_per_round(0.7, 5) == pytest.approx(2.94, abs=0.01)  # the seed's table 19-3
    assert expected_tokens_per_round(0.0, 5) == 1.0
    assert expected_tokens_per_round(1.0, 5) == 6.0


def test_greedy_identity_counts_replies_equal_to_ar_prompt_by_prompt():
    ar_config, spec_config = Config("ar", "greedy"), Config("spec", "greedy", 2)
    hf_config = Config("hf_generate", "greedy")
    ar = Row(ar_config, [run(ar_config, [1, 2, 3], 1.0, prompt_index=0), run(ar_config, [4, 5], 1.0, prompt_index=1)])
    same = Row(spec_config, [run(spec_config, [1, 2, 3], 1.0, prompt_index=0),
                             run(spec_config, [4, 5], 1.0, prompt_index=1)])
    hf = Row(hf_config, [run(hf_config, [1, 2, 3], 1.0, prompt_index=0), run(hf_config, [4, 6], 1.0, prompt_index=1)])
    assert summary.identical_to_ar(same, ar) == (2, 2)
    assert summary.identical_to_ar(hf, ar) == (1, 2)
    assert summary.identical_to_ar(ar, ar) is None
    assert summary.greedy_identical([ar, same, hf]) is True  # only spec rows decide the top-level flag
    other = Row(Config("spec", "greedy", 4), [run(Config("spec", "greedy", 4), [1, 2, 9], 1.0, prompt_index=0)])
    assert summary.greedy_identical([ar, same, other]) is False
    assert summary.summarize([ar, hf])["runs"][1]["identical_to_ar"] == "1/2"
    assert summary.greedy_identical([same]) is None  # no AR row: nothing to compare with


def test_hf_assisted_counts_rounds_from_target_forwards_and_reports_no_alpha():
    ar_config, config = Config("ar", "greedy"), Config("hf_assisted", "greedy", None, "default")
    ar = Row(ar_config, [run(ar_config, [1] * 12, 1.0, [event(0, 0)] * 12)])
    row = Row(config, [run(config, [1] * 12, 0.5, target_calls=4, draft_calls=20)])
    record = summary.summarize([ar, row])["runs"][1]
    assert record["alpha"] is None
    assert record["tokens_per_round"] == 3.0
    assert record["speedup_vs_ar"] == pytest.approx(2.0)
    table = summary.markdown_table([record])
    assert "| hf_assisted | greedy | default | 12 | 0.50 | 24.0 | n/a | 5.00 | 3.00 | 2.00x |" in table


def test_markdown_table_has_the_required_columns():
    records = summary.summarize([Row(Config("ar", "greedy"), [run(Config("ar", "greedy"), [1] * 10, 2.0)])])["runs"]
    header, rule, line = summary.markdown_table(records).splitlines()
    assert header == ("| method | decoding | γ | tokens | wall s | tokens/s | α | drafts/round | tokens/round "
                      "| speedup vs ar | predicted | slowest prompt | greedy = ar |")
    assert rule.count("|") == header.count("|")
    assert line == "| ar | greedy |  | 10 | 2.00 | 5.0 |  |  | 1.00 | 1.00x |  |  |  |"


def test_cut_at_eos_keeps_the_eos_token():
    assert bench.cut_at_eos([4, 5, 2, 7], {2}) == [4, 5, 2]
    assert bench.cut_at_eos([4, 5], {2}) == [4, 5]


def _naive_tokens(decoder, draft_model, gamma: int, greedy: bool, max_tokens: int = 24, seed: int = 0):
    events = list(speculative_decode(
        decoder.target.model, draft_model, decoder.chat_ids(PROMPT), gamma, max_tokens, greedy=greedy,
        temperature=0.8, generator=torch.Generator().manual_seed(seed), eos_ids=decoder.eos_ids,
        vocab_size=decoder.vocab_size,
    ))
    return events, [t.token_id for e in events for t in e.emitted]


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_naive_greedy_equals_our_ar_output(gamma):
    decoder = tiny_decoder()
    decoder.eos_ids = set()  # run the full budget: a longer comparison
    ar = [t.token_id for e in decoder.generate(PROMPT, DecodeSettings(mode="ar", max_new_tokens=24))
          for t in e.emitted]
    events, tokens = _naive_tokens(decoder, decoder.draft.model, gamma, greedy=True)
    assert tokens == ar
    assert all(e.gamma == gamma for e in events)


def test_naive_greedy_with_the_target_as_its_own_draft_accepts_everything():
    # The printed seed code indexes past the target's logits once more than γ/2 drafts are accepted; ours must not.
    decoder = tiny_decoder(draft_seed=None)
    decoder.eos_ids = set()
    ar = [t.token_id for e in decoder.generate(PROMPT, DecodeSettings(mode="ar", max_new_tokens=24))
          for t in e.emitted]
    events, tokens = _naive_tokens(decoder, decoder.target.model, 4, greedy=True)
    assert tokens == ar
    assert all(t.accepted for e in events for t in e.drafted)
    assert [t.fate for t in events[0].emitted] == [Fate.ACCEPTED] * 4 + [Fate.BONUS]


def test_naive_sampling_stops_at_the_budget_and_at_eos():
    decoder = tiny_decoder()
    events, tokens = _naive_tokens(decoder, decoder.draft.model, 4, greedy=False, max_tokens=30, seed=3)
    assert 1 <= len(tokens) <= 30
    assert events[-1].finish_reason in ("eos", "length")
    assert EOS_ID not in tokens[:-1]
    assert all(e.n_accepted <= e.gamma for e in events)
    again = _naive_tokens(decoder, decoder.draft.model, 4, greedy=False, max_tokens=30, seed=3)[1]
    assert again == tokens  # the generator, not global state, decides


def test_tiny_end_to_end_bench_with_every_method(monkeypatch, tmp_path, capsys):
    from app import cli
    from engine.decoding.decoder import Decoder

    decoder = tiny_decoder()
    monkeypatch.setattr(Decoder, "load", classmethod(lambda cls, *a, **k: decoder))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("w3 w7 w11 w5\n\nw9 w2 w4\n")
    out = tmp_path / "out"
    code = cli.main(["bench", "--target", "tiny-0", "--draft", "tiny-1", "--prompts", str(prompts),
                     "--max-new-tokens", "12", "--gammas", "1,3", "--json", "--out", str(out)])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result == json.loads((out / "results.json").read_text())
    keys = {"method", "decoding", "gamma", "tokens", "wall_s", "tokens_per_s", "alpha", "tokens_per_round",
            "speedup_vs_ar", "identical_to_ar"}
    runs = result["runs"]
    assert all(keys <= set(r) for r in runs)
    assert {r["method"] for r in runs} == {"ar", "spec", "spec_draft", "hf_generate", "hf_assisted", "naive"}
    # 2 decodings x (ar + hf_generate + spec·2 + spec_draft·2 + naive·2 + hf_assisted·(2 + default + heuristic))
    assert len(runs) == 2 * (2 + 2 + 2 + 2 + 4)
    assert all(r["replies"] == 2 and r["tokens"] >= 2 for r in runs)
    assert result["greedy_identical"] is True
    for r in runs:
        if r["decoding"] == "greedy" and r["method"] in ("spec", "spec_draft", "naive"):
            assert r["identical_to_ar"] == "2/2"
        if r["decoding"] == "greedy" and r["method"] in ("hf_generate", "hf_assisted"):
            assert r["identical_to_ar"].endswith("/2")
        if r["method"] == "hf_assisted":
            assert r["alpha"] is None and r["tokens_per_round"] >= 1.0
        if r["method"] in ("spec", "spec_draft", "naive"):
            assert 0.0 <= r["alpha"] <= 1.0
    assert result["env"]["device"] == "cpu" and result["env"]["prompts"] == 2
    assert sorted(p.name for p in out.glob("*.png")) == [
        "alpha_tokens_per_round.png", "per_position_acceptance.png", "speedup.png"]


def test_a_long_prompt_before_every_prompt_is_read_in_and_timed_apart_from_the_decoding(monkeypatch, tmp_path, capsys):
    from app import cli
    from engine.decoding.decoder import Decoder

    decoder = tiny_decoder()
    monkeypatch.setattr(Decoder, "load", classmethod(lambda cls, *a, **k: decoder))
    prompts, paste = tmp_path / "prompts.txt", tmp_path / "paste.txt"
    prompts.write_text("w3 w7 w11 w5\nw9 w2 w4\n")
    paste.write_text("\n".join(" ".join(f"w{(i * 7 + j) % 50 + 2}" for j in range(10)) for i in range(30)))
    args = ["bench", "--target", "tiny-0", "--draft", "tiny-1", "--prompts", str(prompts), "--max-new-tokens", "8",
            "--gammas", "3", "--decoding", "greedy", "--methods", "ar,spec", "--long-prompt", str(paste)]
    assert cli.main(args) == 0
    table = capsys.readouterr().out
    assert "| read-in tokens/s |" in table
    assert cli.main(args + ["--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    for r in runs:
        asked = decoder.chat_ids([{"role": "user", "content": paste.read_text().strip() + "\n\nw9 w2 w4"}])
        assert r["prompt_tokens"] >= len(asked) > 300 and r["read_in_s"] > 0
        assert r["read_in_tokens_per_s"] == pytest.approx(2 * r["prompt_tokens"] / r["read_in_s"], rel=0.01)
    assert runs[1]["identical_to_ar"] == "2/2"
    # the control: without it, no read-in figures and no column
    assert cli.main(args[:-2]) == 0 and "read-in" not in capsys.readouterr().out
    # our rows only: a peer's row would time its read-in inside its decoding
    assert cli.main(args[:-6] + ["--methods", "ar,hf_generate", "--long-prompt", str(paste)]) == 1
    assert "--long-prompt times our engine's rows only" in capsys.readouterr().err


def test_bench_defaults_to_the_held_out_evaluation_prompts():
    from engine.prompts import EVAL_PROMPTS

    assert bench.load_prompts(None) == EVAL_PROMPTS


def engine_spec(drafts: int, accepted_per_position: tuple[int, ...]) -> EngineSpecStats:
    return EngineSpecStats(drafts=drafts, draft_tokens=drafts * len(accepted_per_position),
                           accepted=sum(accepted_per_position), accepted_per_position=accepted_per_position,
                           requests=1, source="vLLM /metrics")


def test_vllm_ngram_row_sums_the_requests_metric_deltas():
    ar_config, config = Config("ar", "greedy"), Config("vllm_ngram", "greedy")
    ar = Row(ar_config, [run(ar_config, [1] * 10, 1.0, prompt_index=0), run(ar_config, [2] * 10, 1.0, prompt_index=1)])
    row = Row(config, [Run(config, 0, 0, [1] * 10, 0.5, engine_spec=engine_spec(2, (2, 1, 0, 0))),
                       Run(config, 1, 0, [2] * 10, 0.5, engine_spec=engine_spec(1, (1, 1, 1, 1)))])
    record = summary.summarize([ar, row])["runs"][1]
    assert record["acceptance_rate"] == pytest.approx(7 / 12)
    assert record["alpha"] == pytest.approx(7 / (7 + 2))  # two of the three drafts stopped before the end
    assert record["rounds"] == 20 - 7 and record["tokens_per_round"] == pytest.approx(20 / 13)
    assert record["per_position_acceptance"] == pytest.approx([3 / 3, 2 / 3, 1 / 2, 1 / 1])
    assert record["identical_to_ar"] == "2/2" and record["first_differences"] == []


def test_a_reply_unlike_ars_gives_its_first_differing_position():
    ar_config, config = Config("ar", "greedy"), Config("vllm", "greedy")
    ar = Row(ar_config, [run(ar_config, [1, 2, 3, 4], 1.0, prompt_index=0), run(ar_config, [5, 6], 1.0, prompt_index=1)])
    row = Row(config, [run(config, [1, 2, 9, 4], 1.0, prompt_index=0), run(config, [5, 6, 7], 1.0, prompt_index=1)])
    assert summary.first_differences(row, ar) == [{"prompt": 0, "repeat": 0, "position": 2},
                                                {"prompt": 1, "repeat": 0, "position": 2}]
    lines = summary.peer_identity_lines(summary.summarize([ar, row])["runs"])
    assert lines[0].startswith("vllm greedy output identical to our AR on 0 of 2 prompts; first differing token: "
                               "prompt 1 at token 2, prompt 2 at token 2")


def test_without_vllm_installed_its_rows_are_left_out_in_one_line(monkeypatch, capsys):
    from engine.benchmark import vllm_peer

    monkeypatch.setattr(vllm_peer, "VENV", vllm_peer.Path("/nonexistent/.venv-vllm"))
    assert bench.available_methods(["ar", "spec", "vllm", "vllm_ngram"], "embedded") == ["ar", "spec"]
    err = capsys.readouterr().err.strip()
    assert err == "specdec bench: no vllm rows (vLLM is not installed in .venv-vllm: make serving-peer)"


def test_vllm_rows_run_only_when_asked_for():
    from app.cli.arguments import build_parser

    args = build_parser().parse_args(["bench"])
    assert not {"vllm", "vllm_ngram"} & set(cli_bench.bench_methods(args.methods, args.drafters))
    assert "vllm_ngram" in cli_bench.bench_methods(["ar", "vllm_ngram"], None)


SPIN_THEN_SLEEP = ("import time\nstart = time.process_time()\nwhile time.process_time() - start < 0.6:\n    pass\n"
                   "time.sleep(60)\n")


def test_the_vllm_server_counts_as_idle_only_once_its_processes_stop_spinning():
    """A process group that burns 0.6 s of CPU, then sleeps, plays a server that spins after answering: the
    bench's wait for it to go idle returns only after the spinning (its CPU time is then all used)."""
    import subprocess
    import sys

    from engine.benchmark.vllm_peer import VllmServer

    def spinning() -> VllmServer:
        server = VllmServer("/unused", None)
        server.process = subprocess.Popen([sys.executable, "-c", SPIN_THEN_SLEEP], start_new_session=True)
        return server

    servers = []
    try:
        control = spinning()
        servers.append(control)
        assert control.cpu_s() < 0.55  # negative control: read at once, it is still spinning
        control.process.kill()
        waited = spinning()
        servers.append(waited)
        waited.wait_idle()
        assert waited.cpu_s() >= 0.55
    finally:
        for server in servers:
            server.process.kill()
            server.process.wait()


def test_hf_compiled_runs_after_every_other_row_warm_up_included():
    """torch.compile's graphs free cuBLAS's workspaces that our captured graphs use: nothing of ours runs after."""
    order = []

    class Recording:
        max_new_tokens = 4

        def run(self, config, prompt, seed, max_new_tokens=None):
            order.append(config.method)
            return Run(config, 0, 0, [1], 0.1)

    configs = bench.plan(["ar", "hf_compiled", "spec"], ["greedy"], [2])
    rows = bench.run_all(Recording(), configs, ["a", "b"], 1, 0, progress=False)
    first_compiled = order.index("hf_compiled")
    assert set(order[first_compiled:]) == {"hf_compiled"} and len(order) == 3 * 3
    assert [len(r.runs) for r in rows] == [2, 2, 2]
