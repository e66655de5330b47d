"""The CLI's argument handling, without loading models."""
import pytest

from app.cli import build_parser, main, resolve_pair
from engine.events import DecodeSettings
from engine.models.pairing import PRESETS


def test_presets_name_a_target_and_a_draft():
    args = build_parser().parse_args(["generate", "hi", "--preset", "qwen3-4b"])
    assert resolve_pair(args) == ("Qwen/Qwen3-4B", "Qwen/Qwen3-0.6B")
    assert {"embedded", "smollm2-1.7b", "qwen3-4b", "llama-3.1-8b"} <= set(PRESETS)


def test_an_explicit_draft_wins_and_a_lone_target_drafts_for_itself():
    parse = build_parser().parse_args
    assert resolve_pair(parse(["generate", "hi", "--draft", "embedded"])) == ("embedded", "embedded")
    assert resolve_pair(parse(["generate", "hi", "--target", "some/model"])) == ("some/model", "some/model")


def test_unknown_preset_is_a_clear_error():
    with pytest.raises(SystemExit, match="unknown preset"):
        resolve_pair(build_parser().parse_args(["generate", "hi", "--preset", "nope"]))


def test_bench_lists_parse_and_bad_settings_fail_in_one_line(capsys):
    args = build_parser().parse_args(["bench", "--gammas", "1,3", "--decoding", "greedy", "--stop-below", "0,0.3"])
    assert args.gammas == [1, 3] and args.decoding == ["greedy"] and args.stop_below == [0.0, 0.3]
    assert main(["generate", "hi", "--gamma", "0", "--target", "embedded", "--draft", "embedded"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("specdec: error:") and "gamma" in err and len(err.strip().splitlines()) == 1


def test_no_lookup_and_stop_below_reach_the_decoder(monkeypatch, capsys):
    from engine.decoding.decoder import Decoder
    from tests.tiny import tiny_decoder

    decoder, seen = tiny_decoder(), []
    stream = decoder.stream

    def recording_stream(messages, settings):
        seen.append(settings)
        return stream(messages, settings)

    monkeypatch.setattr(decoder, "stream", recording_stream)
    monkeypatch.setattr(Decoder, "load", classmethod(lambda cls, *a, **k: decoder))
    for flags in ([], ["--no-lookup", "--stop-below", "0"]):
        assert main(["generate", "w3 w7", "--target", "tiny-0", "--draft", "tiny-1", "--max-new-tokens", "4", "--json",
                     *flags]) == 0
    assert [(s.lookup, s.stop_below) for s in seen] == [(True, DecodeSettings().stop_below), (False, 0.0)]
    capsys.readouterr()


def test_draft_weights_choose_int8_or_the_load_dtype(monkeypatch, capsys):
    from engine.models import fast_llama
    from engine.decoding.decoder import Decoder
    from tests.tiny import tiny_model

    draft_qkv = []

    def load(cls, target, draft, device, dtype, *, draft_int8):
        decoder = cls(tiny_model(0), draft=tiny_model(1, layers=1), draft_int8=draft_int8)
        draft_qkv.append(decoder.drafter.runner.cache.weights.layers[0].qkv)
        return decoder

    monkeypatch.setattr(Decoder, "load", classmethod(load))
    for flags in ([], ["--draft-weights", "dtype"]):
        assert main(["generate", "w3 w7", "--target", "tiny-0", "--draft", "tiny-1", "--max-new-tokens", "2", "--json",
                     *flags]) == 0
    assert [isinstance(qkv, fast_llama.Int8Weight) for qkv in draft_qkv] == [True, False]
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
