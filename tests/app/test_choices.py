"""Choices named once: the mode is an enum that still reads and compares as its string, and the CLI, the app's
options and the side pane offer the same devices, dtypes and weights."""
from __future__ import annotations

import json

import pytest

from app.chat.store import request_from_json, request_json
from app.cli.arguments import build_parser
from engine.choices import DEVICES, DTYPES, TARGET_WEIGHTS
from engine.events import DecodeSettings, Mode
from studio.window import parse_args
from words.records import ReplyRequest


def test_a_mode_given_as_a_string_becomes_the_enum():
    settings = DecodeSettings(mode="ar")
    assert settings.mode is Mode.AR and settings.mode == "ar"


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="mode must be 'spec' or 'ar'"):
        DecodeSettings(mode="beam")


def test_a_saved_request_keeps_its_mode_as_the_string_and_reads_back_the_enum():
    request = ReplyRequest(({"role": "user", "content": "x"},), DecodeSettings(mode=Mode.AR))
    assert json.loads(request_json(request))["settings"]["mode"] == "ar"
    assert request_from_json(request_json(request)).settings.mode is Mode.AR


@pytest.mark.parametrize("option, choices", [("--device", DEVICES), ("--dtype", DTYPES),
                                             ("--target-weights", TARGET_WEIGHTS)])
def test_the_app_and_the_cli_offer_the_same_choices(option, choices):
    parse_args([option, choices[-1]])  # accepted by the app
    with pytest.raises(SystemExit):
        parse_args([option, "nonsense"])
    actions = {a.dest: a for sub in build_parser()._subparsers._group_actions for p in sub.choices.values()
               for a in p._actions}
    assert tuple(actions[option[2:].replace("-", "_")].choices) == choices


def test_the_loader_accepts_exactly_the_dtypes_offered():
    from engine.models import loading  # torch: only this test needs it

    assert set(loading.DTYPES) == set(DTYPES) - {"auto"}
