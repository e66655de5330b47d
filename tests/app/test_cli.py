"""The CLI: argument handling and bad input (tiny in-memory models), and what a terminal shows (a pty)."""
import json
import re
import sys

import pytest

from app.cli import main
from app.cli.arguments import build_parser
from app.cli.commands import PrefillBar, resolve_pair
from engine.events import DecodeSettings, PrefillProgress
from engine.kernels import q4q8
from engine.models.pairing import PRESETS


def test_presets_name_a_target_and_a_draft():
    args = build_parser().parse_args(["generate", "hi", "--preset", "qwen3-4b"])
    assert resolve_pair(args) == ("Qwen/Qwen3-4B", "Qwen/Qwen3-0.6B")
    assert {"embedded", "smollm2-1.7b", "qwen3-4b", "llama-3.1-8b"} <= set(PRESETS)


def test_an_explicit_draft_wins_and_a_lone_target_drafts_for_itself():
    parse = build_parser().parse_args
    assert resolve_pair(parse(["generate", "hi", "--draft", "embedded"])) == ("embedded", "embedded")
    assert resolve_pair(parse(["generate", "hi", "--target", "some/model"])) == ("some/model", "some/model")


def test_draft_none_decodes_plain_ar(monkeypatch, capsys):
    from engine.decoding.decoder import Decoder
    from tests.tiny import tiny_decoder

    assert resolve_pair(build_parser().parse_args(["generate", "hi", "--draft", "None"])) == ("embedded", None)
    loaded = []

    def load(cls, target, draft, *args, **kwargs):
        loaded.append((target, draft))
        return tiny_decoder()

    monkeypatch.setattr(Decoder, "load", classmethod(load))
    assert main(["generate", "w3 w7", "--target", "tiny-0", "--draft", "none", "--max-new-tokens", "4",
                 "--json"]) == 0
    reply = json.loads(capsys.readouterr().out)
    assert loaded == [("tiny-0", None)]
    assert reply["settings"]["mode"] == "ar"


def test_unknown_preset_is_a_clear_error():
    with pytest.raises(SystemExit, match="unknown preset"):
        resolve_pair(build_parser().parse_args(["generate", "hi", "--preset", "nope"]))


def test_bench_lists_parse():
    args = build_parser().parse_args(["bench", "--gammas", "1,3", "--decoding", "greedy", "--stop-below", "0,0.3"])
    assert args.gammas == [1, 3] and args.decoding == ["greedy"] and args.stop_below == [0.0, 0.3]


def argument_error(capsys, argv: list[str]) -> str:
    """The one line argparse says about `argv`, which must be refused with exit status 2."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.mark.parametrize("argv, expected", [
    (["generate", "hi", "--gamma", "-3"], "argument --gamma: must be between 1 and 64, not -3"),
    (["generate", "hi", "--gamma", "0"], "argument --gamma: must be between 1 and 64, not 0"),
    (["generate", "hi", "--gamma", "x"], "argument --gamma: 'x' is not a whole number"),
    (["generate", "hi", "--temperature", "-1"], "argument --temperature: must be positive when sampling"),
    (["generate", "hi", "--temperature", "0"], "argument --temperature: must be positive when sampling"),
    (["generate", "hi", "--max-new-tokens", "0"], "argument --max-new-tokens: must be >= 1"),
    (["generate", "hi", "--top-k", "-1"], "argument --top-k: must be >= 0"),
    (["generate", "hi", "--top-p", "2"], "argument --top-p: must be in (0, 1]"),
    (["generate", "hi", "--stop-below", "1"], "argument --stop-below: must be in [0, 1)"),
    (["generate", "hi", "--dtype", "float8"], "argument --dtype: invalid choice: 'float8'"),
    (["bench", "--gammas", "2,0"], "argument --gammas: must be between 1 and 64, not 0"),
    (["bench", "--gammas", ","], "argument --gammas: give at least one value"),
    (["bench", "--stop-below", "0,1.5"], "argument --stop-below: must be in [0, 1)"),
    (["bench", "--methods", "ar,fast"], "argument --methods: unknown 'fast'; choose from ar, spec,"),
    (["bench", "--decoding", "beam"], "argument --decoding: unknown 'beam'; choose from greedy, sample"),
    (["bench", "--repeats", "0"], "argument --repeats: must be >= 1, not 0"),
    (["bench", "--max-new-tokens", "-5"], "argument --max-new-tokens: must be >= 1"),
    (["bench", "--temperature", "0"], "argument --temperature: must be positive"),
    (["train-draft", "--workers", "0"], "argument --workers: must be >= 1, not 0"),
    (["train-draft", "--layers", "0,-1"], "argument --layers: must be >= 0, not -1"),
    (["generate", "hi", "--seed", "18446744073709551616"],
     "argument --seed: must be from 0 to 2**63 - 1, not 18446744073709551616"),
    (["generate", "hi", "--seed", "-1"], "argument --seed: must be from 0 to 2**63 - 1, not -1"),
    (["bench", "--seed", str(2 ** 63)], f"argument --seed: must be from 0 to 2**63 - 1, not {2 ** 63}"),
    (["train-draft", "--seed", str(2 ** 32)], f"argument --seed: must be from 0 to 2**32 - 1, not {2 ** 32}"),
])
def test_bad_values_are_refused_by_the_argument_parser_in_one_line(monkeypatch, capsys, argv, expected):
    from app.cli import bench as cli_bench
    from engine.decoding.decoder import Decoder
    from engine.training import distill

    for owner, name in ((Decoder, "load"), (cli_bench, "run_bench"), (distill, "run_recipe")):  # were a value let through
        monkeypatch.setattr(owner, name, lambda *a, **k: pytest.fail(f"{name} ran"))
    err = argument_error(capsys, argv)
    assert err.startswith(f"specdec {argv[0]}: error: {expected}"), err
    assert err.endswith(f"see `specdec {argv[0]} --help`"), err


def test_a_path_that_does_not_exist_is_named_without_the_prepare_hint(capsys, tmp_path):
    missing = tmp_path / "no-such-model"
    for option in ("--target", "--draft"):
        err = argument_error(capsys, ["generate", "hi", option, str(missing)])
        assert f"argument {option}: {missing} does not exist: give a model directory, a .gguf file or a hub id" in err
        assert "prepare" not in err
    assert "does not exist" in argument_error(capsys, ["bench", "--target", "./nowhere/model.gguf"])
    args = build_parser().parse_args(["generate", "hi", "--target", str(tmp_path), "--draft", "some/hub-model"])
    assert (args.target, args.draft) == (str(tmp_path), "some/hub-model")  # existing paths and hub ids pass


def test_the_loader_says_a_missing_path_does_not_exist_and_an_unprepared_pair_needs_prepare(monkeypatch, tmp_path):
    from engine.models.loading import ModelLoadError, load_tokenizer

    with pytest.raises(ModelLoadError) as missing:
        load_tokenizer(str(tmp_path / "nothing"))
    assert str(missing.value) == (f"{tmp_path / 'nothing'} does not exist: give a model directory, a .gguf file "
                                  "or a hub id")
    monkeypatch.setenv("SPECDEC_HOME", str(tmp_path / "empty-home"))
    for name in ("embedded", "embedded-draft"):
        with pytest.raises(ModelLoadError, match=r"the embedded pair is not prepared \(.*\): run `specdec prepare`"):
            load_tokenizer(name)


def test_a_model_error_is_said_as_it_is_and_an_unforeseen_one_is_named(monkeypatch, capsys):
    from engine.decoding.decoder import Decoder
    from engine.models.loading import ModelLoadError

    def load(cls, *args, **kwargs):
        raise error

    monkeypatch.setattr(Decoder, "load", classmethod(load))
    error = ModelLoadError("no model 'nobody/x' on the Hugging Face Hub")
    assert main(["generate", "hi", "--target", "nobody/x", "--mode", "ar"]) == 1
    assert capsys.readouterr().err == "specdec: error: no model 'nobody/x' on the Hugging Face Hub\n"
    error = RuntimeError("out of memory")
    assert main(["generate", "hi", "--target", "nobody/x", "--mode", "ar"]) == 1
    assert capsys.readouterr().err == ("specdec: error: RuntimeError: out of memory (set SPECDEC_DEBUG=1 for "
                                       "details)\n")


def test_bad_values_are_refused_before_torch_is_imported():
    import subprocess
    import sys

    # A fresh interpreter: this one imported torch long ago
    script = """
import json, sys
from app.cli import main
codes = []
for argv in (["generate", "hi", "--gamma", "-3"], ["generate", "hi", "--temperature", "-1"],
             ["generate", "hi", "--max-new-tokens", "0"], ["generate", "hi", "--dtype", "x"],
             ["generate", "hi", "--target", "/nonexistent"], ["bench", "--gammas", "0"], ["generate"]):
    try:
        codes.append(main(argv))
    except SystemExit as exit_:
        codes.append(exit_.code)
print(json.dumps({"codes": codes, "heavy": sorted({"torch", "transformers"} & set(sys.modules))}))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"codes": [2, 2, 2, 2, 2, 2, 1], "heavy": []}, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == ("specdec: error: give the prompt as an argument, '-' for standard "
                                              "input, or --prompt-file (one of them)")


def help_text(capsys, monkeypatch, command: str) -> str:
    monkeypatch.setenv("COLUMNS", "300")  # no wrapped help lines
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"] if command else ["--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def option_helps(text: str) -> dict[str, str]:
    """Each option's help in a --help text: {"--gamma": "most draft ... (default: 6)"}. A help too long to share
    the option's line is on the next one."""
    helps, option = {}, None
    for line in text.splitlines():
        start = re.match(r"  (-[^\s,]+)(?:, (--\S+))?(?: \S+)?(?:\s{2,}(.*))?$", line)
        if start:
            option = start.group(2) or start.group(1)
            helps[option] = start.group(3) or ""
        elif option and line.startswith(" " * 10):
            helps[option] = (helps[option] + " " + line.strip()).strip()
        else:
            option = None
    return helps


FLAGS = {"--help", "--greedy", "--no-lookup", "--stop-repeating", "--json", "--force"}  # off unless given: nothing to show


@pytest.mark.parametrize("command", ["generate", "bench", "train-draft", "prepare"])
def test_every_option_in_a_commands_help_shows_its_default(capsys, monkeypatch, command):
    helps = option_helps(help_text(capsys, monkeypatch, command))
    assert "--help" in helps and len(helps) > 1, helps  # the options were found
    for option, text in helps.items():
        if option not in FLAGS:
            assert "(default: " in text, f"{option}: {text!r}"


def test_help_shows_defaults_as_one_would_type_them(capsys, monkeypatch):
    generate = option_helps(help_text(capsys, monkeypatch, "generate"))
    defaults = DecodeSettings()
    assert generate["--gamma"].endswith(f"(default: {defaults.gamma})")
    assert generate["--max-new-tokens"].endswith(f"(default: {defaults.max_new_tokens})")
    assert generate["--dtype"].endswith("(default: auto)") and generate["--mode"].endswith("(default: spec)")
    assert generate["--target"].endswith("(default: embedded, or the preset's)")
    bench = option_helps(help_text(capsys, monkeypatch, "bench"))
    assert bench["--gammas"].endswith("(default: 1,2,4,6,8)")  # as typed, not as a Python list
    assert bench["--decoding"].endswith("(default: greedy,sample)")
    top = help_text(capsys, monkeypatch, "")
    for command in ("generate", "bench", "prepare", "train-draft", "presets"):
        assert re.search(rf"^    {command}\b", top, re.M), top
    assert "`specdec COMMAND --help`" in top


def test_no_lookup_stop_below_and_stop_repeating_reach_the_decoder(monkeypatch, capsys):
    from engine.decoding.decoder import Decoder
    from tests.tiny import tiny_decoder

    decoder, seen = tiny_decoder(), []
    stream = decoder.stream

    def recording_stream(messages, settings):
        seen.append(settings)
        return stream(messages, settings)

    monkeypatch.setattr(decoder, "stream", recording_stream)
    monkeypatch.setattr(Decoder, "load", classmethod(lambda cls, *a, **k: decoder))
    for flags in ([], ["--no-lookup", "--stop-below", "0", "--stop-repeating"]):
        assert main(["generate", "w3 w7", "--target", "tiny-0", "--draft", "tiny-1", "--max-new-tokens", "4", "--json",
                     *flags]) == 0
    assert [(s.lookup, s.stop_below, s.stop_repeating) for s in seen] == [(True, DecodeSettings().stop_below, False),
                                                                         (False, 0.0, True)]
    capsys.readouterr()


def summary_line(monkeypatch, capsys, *flags: str) -> str:
    """The figures `specdec generate` prints after a reply on the tiny pair."""
    from engine.decoding.decoder import Decoder
    from tests.tiny import tiny_decoder

    monkeypatch.setattr(Decoder, "load", classmethod(lambda cls, *a, **k: tiny_decoder()))
    assert main(["generate", "w3 w7", "--target", "tiny-0", "--draft", "tiny-1", "--max-new-tokens", "4",
                 *flags]) == 0
    return capsys.readouterr().err.strip().splitlines()[0]


def test_a_plain_ar_run_prints_no_alpha(monkeypatch, capsys):
    line = summary_line(monkeypatch, capsys, "--mode", "ar")
    assert "α" not in line and line.endswith("before); no drafts, 1.00 tokens/round over 4 rounds]")


def test_a_speculative_run_prints_its_alpha(monkeypatch, capsys):
    line = summary_line(monkeypatch, capsys, "--stop-below", "0")  # γ drafts every round
    assert re.search(r"before\); α [01]\.\d\d, ", line), line


def test_the_summary_words_alpha_as_the_windows_stats_line_does(monkeypatch, capsys):
    import words.wording

    worded = []

    def alpha_wording(stats):
        worded.append(stats.n_verified)
        return "ALPHA-AS-THE-WINDOW-SAYS"

    monkeypatch.setattr(words.wording, "alpha_wording", alpha_wording)
    line = summary_line(monkeypatch, capsys, "--stop-below", "0")
    assert "before); ALPHA-AS-THE-WINDOW-SAYS, " in line and len(worded) == 1 and worded[0] > 0


def test_draft_weights_choose_int8_or_the_load_dtype(monkeypatch, capsys):
    from engine.decoding.decoder import Decoder
    from engine.models import fast_llama
    from tests.tiny import tiny_model

    draft_qkv = []

    def load(cls, target, draft, device, dtype, *, draft_int8, **_other_options):
        decoder = cls(tiny_model(0), draft=tiny_model(1, layers=1), draft_int8=draft_int8)
        draft_qkv.append(decoder.drafter.runner.cache.weights.layers[0].qkv)
        return decoder

    monkeypatch.setattr(Decoder, "load", classmethod(load))
    for flags in ([], ["--draft-weights", "dtype"]):
        assert main(["generate", "w3 w7", "--target", "tiny-0", "--draft", "tiny-1", "--max-new-tokens", "2", "--json",
                     *flags]) == 0
    int8 = (fast_llama.Int8Weight, q4q8.Q4Q8Weight)  # the Q4 × Q8 kernel's Q8_0 blocks where it runs fast
    assert [isinstance(qkv, int8) for qkv in draft_qkv] == [True, False]
    capsys.readouterr()


def test_train_draft_passes_the_chosen_layers_to_the_recipe(monkeypatch, capsys):
    from engine.training import distill

    calls = []

    def recipe(**kwargs):
        calls.append(kwargs)
        return {"result": {"history": [{"agreement": 0.5}]}, "total_s": 1}

    monkeypatch.setattr(distill, "run_recipe", recipe)
    assert main(["train-draft", "--steps", "3", "--layers", "0,1,18,29"]) == 0
    assert main(["train-draft", "--steps", "3"]) == 0
    assert calls[0]["layers"] == (0, 1, 18, 29) and calls[0]["steps"] == 3
    assert "layers" not in calls[1]  # the recipe's own default
    assert calls[1]["steps"] == 3 and not {"n_prompts", "seed"} & calls[1].keys()
    capsys.readouterr()


# -- bad input: one line, a non-zero exit, and the next command works ---------------------------------------


def chain_decoder(monkeypatch, window: int = 512):
    """Make every `Decoder.load` return a decoder whose target spells tests.chain.CHAIN_TEXT."""
    from engine.decoding.decoder import Decoder
    from tests.chain import byte_tokenizer, chain_ids, chain_model

    tokenizer = byte_tokenizer()
    monkeypatch.setattr(Decoder, "load", classmethod(
        lambda cls, *a, **k: cls(chain_model(tokenizer, chain_ids(tokenizer), window))))


def one_error_line(capsys, *needles: str) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("specdec: error:"), err
    for needle in needles:
        assert needle in err, err
    return err


def test_paths_that_are_not_models_are_named_for_what_they_are(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("x")
    (tmp_path / "weights.bin").write_bytes(b"x")
    assert main(["generate", "hi", "--target", str(tmp_path / "notes"), "--mode", "ar"]) == 1
    one_error_line(capsys, "is a directory but not a model: it holds no config.json")
    assert main(["generate", "hi", "--target", str(tmp_path / "weights.bin"), "--mode", "ar"]) == 1
    one_error_line(capsys, "weights.bin is a file, not a model")


def test_an_unreachable_hub_fails_at_once_with_one_line(monkeypatch, capsys):
    import huggingface_hub

    def no_network(repo_id, **kwargs):
        raise ConnectionError("[Errno -2] Name or service not known")

    monkeypatch.setattr(huggingface_hub, "model_info", no_network)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    assert main(["generate", "hi", "--target", "nobody/no-such-model", "--mode", "ar"]) == 1
    one_error_line(capsys, "cannot download 'nobody/no-such-model': the Hugging Face Hub cannot be reached")


def test_non_finite_numbers_are_refused_at_the_argument(capsys):
    for flags in (["--temperature", "nan"], ["--temperature", "inf"], ["--top-p", "nan"], ["--stop-below=-inf"]):
        with pytest.raises(SystemExit) as exit_:
            main(["generate", "hi", *flags])
        assert exit_.value.code == 2
        assert "must be a finite number" in capsys.readouterr().err


def test_a_prompt_that_is_not_utf8_is_refused_before_any_model_loads(monkeypatch, tmp_path, capsys):
    import io

    from engine.decoding.decoder import Decoder

    monkeypatch.setattr(Decoder, "load", classmethod(lambda *a, **k: pytest.fail("models were loaded")))
    assert main(["generate", "w3 \udcff"]) == 1
    one_error_line(capsys, "not valid UTF-8 text (byte 0xff at character 3)")
    (tmp_path / "p.txt").write_bytes(b"w3 \xe6\x97")
    assert main(["generate", "--prompt-file", str(tmp_path / "p.txt")]) == 1
    one_error_line(capsys, "p.txt is not valid UTF-8 text (byte 0xe6 at byte 3)")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"\xff")))
    assert main(["generate", "-"]) == 1
    one_error_line(capsys, "standard input is not valid UTF-8")


def test_an_empty_prompt_is_refused_before_any_model_loads(monkeypatch, tmp_path, capsys):
    import io

    from engine.decoding.decoder import Decoder

    monkeypatch.setattr(Decoder, "load", classmethod(lambda *a, **k: pytest.fail("models were loaded")))
    assert main(["generate", " \n"]) == 1
    one_error_line(capsys, "the prompt is empty")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"")))
    assert main(["generate", "-"]) == 1
    one_error_line(capsys, "the prompt in standard input is empty")
    (tmp_path / "p.txt").write_text("\n\n")
    assert main(["generate", "--prompt-file", str(tmp_path / "p.txt")]) == 1
    one_error_line(capsys, "p.txt is empty")


def test_long_prompts_come_from_stdin_or_a_file_and_max_new_tokens_is_cut_with_a_note(monkeypatch, tmp_path,
                                                                                       capsys):
    import io

    from tests.chain import CHAIN_TEXT

    chain_decoder(monkeypatch, window=512)
    prompt = "hello " * 70  # 420 bytes, one token each
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(prompt.encode())))
    assert main(["generate", "-", "--mode", "ar", "--json", "--max-new-tokens", "100000"]) == 0
    out, err = capsys.readouterr()
    reply = json.loads(out)
    assert reply["text"] == CHAIN_TEXT
    assert reply["context"]["max_new_tokens"] == 512 - 420 and reply["context"]["prompt_tokens"] == 420
    assert "specdec: note: cut the reply to at most 92 new tokens (asked for 100000)" in err
    (tmp_path / "long.txt").write_text("x" * 600)
    assert main(["generate", "--prompt-file", str(tmp_path / "long.txt"), "--mode", "ar"]) == 1
    one_error_line(capsys, "the prompt is 600 tokens on its own, but the model's window is 512 positions")
    assert main(["generate", "hi", "--mode", "ar"]) == 0
    assert capsys.readouterr().out.startswith(CHAIN_TEXT)


def test_the_largest_seed_decodes(monkeypatch, capsys):
    chain_decoder(monkeypatch)
    assert main(["generate", "hi", "--mode", "ar", "--temperature", "1", "--seed", str(2 ** 63 - 1)]) == 0


def test_a_reply_cut_inside_a_character_has_no_replacement_character_in_its_json(monkeypatch, capsys):
    from tests.chain import CHAIN_TEXT

    chain_decoder(monkeypatch)
    assert main(["generate", "hi", "--mode", "ar", "--json", "--max-new-tokens", "6"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["text"] == "🐉" and "\ufffd" not in out and "\\ufffd" not in out
    assert main(["generate", "hi", "--mode", "ar", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["text"] == CHAIN_TEXT


def test_bench_with_an_empty_prompts_file_creates_no_out_folder(monkeypatch, tmp_path, capsys):
    from app.cli import bench as cli_bench

    ran = []
    monkeypatch.setattr(cli_bench, "run_bench", lambda *a: ran.append(a) or 0)
    (tmp_path / "empty.txt").write_text("\n  \n")
    assert main(["bench", "--prompts", str(tmp_path / "empty.txt"), "--out", str(tmp_path / "plots")]) == 1
    one_error_line(capsys, f"prompts file {tmp_path / 'empty.txt'} has no prompts (one per line)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.txt"]
    (tmp_path / "prompts.txt").write_text("hi\n")  # the next command gets as far as the benchmark
    assert main(["bench", "--prompts", str(tmp_path / "prompts.txt"), "--out", str(tmp_path / "plots")]) == 0
    assert len(ran) == 1 and (tmp_path / "plots").is_dir()


def test_bench_checks_its_prompts_and_out_before_running(monkeypatch, tmp_path, capsys):
    from app.cli import bench as cli_bench

    monkeypatch.setattr(cli_bench, "run_bench", lambda *a: pytest.fail("the benchmark ran"))
    assert main(["bench", "--prompts", str(tmp_path)]) == 1
    one_error_line(capsys, f"--prompts must be a text file with one prompt per line: {tmp_path} is a directory")
    (tmp_path / "file").write_text("x")
    assert main(["bench", "--out", str(tmp_path / "file" / "plots")]) == 1
    one_error_line(capsys, "cannot write to --out")


def run_in_terminal(args: list[str], interrupt_when=None, timeout: float = 120) -> tuple[str, int]:
    """Run `specdec` (as `python -m app.cli` from this checkout, which is what the script runs) with a
    pseudo-terminal as stdout and stderr; press Ctrl+C once `interrupt_when(pid)` holds, if given."""
    import os
    import pty
    import select
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    main_fd, child_fd = pty.openpty()
    root = Path(__file__).resolve().parents[2]
    # Ctrl+C reaches it as in a terminal even where this test runs in the background, whose SIGINT is ignored
    # and would be inherited (Python then installs no KeyboardInterrupt handler)
    process = subprocess.Popen([sys.executable, "-m", "app.cli", *args], stdin=subprocess.DEVNULL, stdout=child_fd,
                               stderr=child_fd, close_fds=True, cwd=root,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(child_fd)
    chunks, start, interrupted = [], time.monotonic(), False
    while True:
        if interrupt_when is not None and not interrupted and interrupt_when(process.pid):
            process.send_signal(signal.SIGINT)
            interrupted = True
        if time.monotonic() - start > timeout:
            process.kill()
            raise AssertionError("specdec did not finish: " + b"".join(chunks).decode(errors="replace"))
        ready, _, _ = select.select([main_fd], [], [], 0.01 if interrupt_when and not interrupted else 0.1)
        if ready:
            try:
                data = os.read(main_fd, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif process.poll() is not None:
            break
    os.close(main_fd)
    return b"".join(chunks).decode("utf-8"), process.wait()


def saved_chain_pair(tmp_path):
    """The chain target and a draft that gets one byte wrong, saved as model directories."""
    from tests.chain import byte_tokenizer, chain_ids, chain_model

    tokenizer = byte_tokenizer()
    chain = chain_ids(tokenizer)
    wrong = list(chain)
    wrong[5] = tokenizer("x", add_special_tokens=False)["input_ids"][0]
    paths = []
    for name, ids in (("target", chain), ("draft", wrong)):
        loaded = chain_model(tokenizer, ids, window=1024)
        loaded.model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
        paths.append(str(tmp_path / name))
    return paths


def test_the_terminal_shows_whole_characters_in_colour_and_a_prefill_progress_bar(tmp_path):
    from tests.chain import CHAIN_TEXT

    target, draft = saved_chain_pair(tmp_path)
    (tmp_path / "prompt.txt").write_text("a" * 700)
    output, code = run_in_terminal(["generate", "--prompt-file", str(tmp_path / "prompt.txt"), "--target", target,
                                    "--draft", draft, "--stop-below", "0", "--draft-weights", "dtype"])
    assert code == 0, output
    assert "reading the prompt [" in output and "699 of 699 tokens" in output
    reply = output.split("\x1b[K")[-1].split("\r\n")[0]  # after the progress bar is cleared
    # a rejected draft read after the accepted bytes (½ 日, then x) is shown as itself, without the bytes' '�'
    assert "\x1b[9;31mx\x1b[0m" in reply and "\ufffd" not in reply
    kept = re.sub("\x1b\\[9;31m.*?\x1b\\[0m", "", reply)  # rejected drafts are struck out; the rest is the reply
    assert re.sub("\x1b\\[[0-9;]*m", "", kept) == CHAIN_TEXT  # whole characters, no '�', no <|im_end|>
    assert {"\x1b[32m", "\x1b[34m", "\x1b[33m"} <= set(re.findall("\x1b\\[[0-9;]*m", kept))


def torch_is_loading(pid: int) -> bool:
    """The process has mapped torch's library: it is importing torch, with transformers and the models to come
    (a moment in its start-up however fast the machine; a fixed delay was over before a warm start was)."""
    from pathlib import Path

    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/maps")
def test_ctrl_c_while_starting_up_quits_without_a_traceback():
    output, code = run_in_terminal(["generate", "hi", "--mode", "ar"], interrupt_when=torch_is_loading)
    assert code == 130, output
    assert "Traceback" not in output and "specdec: interrupted" in output


def test_loading_a_model_prints_no_progress_bar(tmp_path, capsys):
    from transformers.utils import logging as transformers_logging

    from tests.engine.test_robustness import gpt2_model
    from tests.tiny import tiny_tokenizer

    gpt2_model(0, layers=2, window=64).save_pretrained(tmp_path / "gpt2")
    tiny_tokenizer().save_pretrained(tmp_path / "gpt2")
    capsys.readouterr()  # saving it draws a bar of its own
    enabled = transformers_logging.is_progress_bar_enabled()
    transformers_logging.enable_progress_bar()  # as a fresh process starts
    try:
        assert main(["generate", "w3 w4", "--target", str(tmp_path / "gpt2"), "--mode", "ar", "--max-new-tokens",
                     "2", "--dtype", "float32"]) == 0
    finally:
        (transformers_logging.enable_progress_bar if enabled else transformers_logging.disable_progress_bar)()
    err = capsys.readouterr().err
    assert "tokens/round" in err and "Loading weights" not in err and "%|" not in err


@pytest.mark.parametrize("mode", ["ar", "spec"])
def test_a_saved_gpt2_decodes_from_its_directory_through_the_fallback(tmp_path, capsys, mode):
    from tests.engine.test_robustness import gpt2_model
    from tests.tiny import tiny_tokenizer

    gpt2_model(0, layers=2, window=64).save_pretrained(tmp_path / "gpt2")
    tiny_tokenizer().save_pretrained(tmp_path / "gpt2")
    assert main(["generate", "w3 w4", "--target", str(tmp_path / "gpt2"), "--mode", mode, "--json",
                 "--max-new-tokens", "200", "--dtype", "float32"]) == 0
    out, err = capsys.readouterr()
    reply = json.loads(out)
    assert len(reply["token_ids"]) <= 64 - 2 and reply["context"]["window"] == 64
    assert "cut the reply to at most 62 new tokens" in err


def test_the_read_in_bar_says_the_tokens_read_and_the_time_left_once_a_chunk_is_timed():
    bar = PrefillBar()
    assert bar.text(PrefillProgress(0, 4096)) == f"reading the prompt [{'.' * 30}] 0 of 4,096 tokens"
    assert bar.text(PrefillProgress(1024, 4096, 0, 4.0, 256, 1.0)) == (
        f"reading the prompt [{'#' * 7}{'.' * 23}] 1,024 of 4,096 tokens, about 12 s left")
    assert bar.text(PrefillProgress(1024, 4096, 0, 40.0, 256, 10.0)).endswith("4,096 tokens, about 2 min left")


def test_a_home_folder_of_no_user_and_a_time_out_past_the_clocks_are_refused_in_one_line(capsys):
    """`~nosuchuser/model.gguf` raised RuntimeError from Path.expanduser, `--timeout 1e300` an OverflowError from
    the clock: each is refused as the argument it is. The controls: a week's time-out and ~ itself pass."""
    err = argument_error(capsys, ["generate", "hi", "--target", "~nosuchuser-specdec/model.gguf"])
    assert "argument --target: ~nosuchuser-specdec/model.gguf: ~nosuchuser-specdec names no user's home folder" in err
    for timeout in ("1e300", "0", "-1"):
        assert "argument --timeout: must be more than 0 and at most 604800 s" in argument_error(
            capsys, ["generate", "hi", "--target", "http://127.0.0.1:9/v1", "--timeout", timeout])
    args = build_parser().parse_args(["generate", "hi", "--target", "http://127.0.0.1:9/v1", "--timeout", "604800"])
    assert args.timeout == 604800.0
