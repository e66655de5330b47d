"""The export numbers replies as the chat shows them: a continued reply (Stop, then Continue) is one reply, numbered
1, 2, ... the same in the JSON, both CSVs, the Markdown and the PNG, its continuation kept apart as its part 2; the
Markdown writes the lines the chat shows under each reply."""
from __future__ import annotations

import csv
import dataclasses
import json

import pytest

from app.chat.export import export_session, hard_line_breaks
from app.pair.machine import described
from app.why import why_gamma
from engine.events import ContextNotice, DecodeSettings, Mode, ModelInfo, PairInfo
from tests.ui.helpers import shown_window
from tests.ui.synthetic import accepted_round, plain_steps, rejected_round
from ui.why.gamma_charts import why_panel
from words.records import (Comparison, ComparisonShown, Reply, ReplyRequest, ReplyShown, RoundShown, Runtime, Session,
                           TurnStarted)
from words.transcript import ComparisonView
from words.wording import comparison_line

SPEC = DecodeSettings(gamma=4, lookup=False)
PAIR = PairInfo(ModelInfo("t", "/t", 1, 64), ModelInfo("d", "/d", 1, 64), "cpu", "float32")


def reply(messages: list[tuple[str, str]], events: tuple, text: str, stopped: bool = False) -> Reply:
    request = ReplyRequest(tuple({"role": role, "content": content} for role, content in messages), SPEC)
    return Reply(request, events, text, stopped, reference_s=0.01)


def hash_table_then_a_continued_story() -> Session:
    """Reply 1 answers; reply 2 is a story stopped after two rounds, then continued for three more."""
    answer = reply([("user", "hash table?")], (accepted_round(0, ["a"], "b"),), "ab")
    story = reply([("user", "hash table?"), ("assistant", "ab"), ("user", "a story")],
                  (accepted_round(0, ["Once"], " upon"), rejected_round(1, [], "x", " a")), "Once upon a", stopped=True)
    more = reply([("user", "hash table?"), ("assistant", "ab"), ("user", "a story"), ("assistant", "Once upon a")],
                 (accepted_round(0, [" time"], ","), accepted_round(1, [" the"], " end"),
                  rejected_round(2, [], "x", ".")), " time, the end.")
    comparison = Comparison((), " time, the end.", 0.1, 0.2, 30.0, 15.0, None)
    return Session(PAIR, [answer, story, more], {2: comparison}, "hash table?")


def exported(tmp_path, session: Session) -> tuple[dict, list[dict], list[dict], str]:
    export_session(session, tmp_path / "chat")
    with (tmp_path / "chat.csv").open(newline="", encoding="utf-8") as f:
        rounds = list(csv.DictReader(f))
    with (tmp_path / "chat-positions.csv").open(newline="", encoding="utf-8") as f:
        positions = list(csv.DictReader(f))
    return (json.loads((tmp_path / "chat.json").read_text(encoding="utf-8")), rounds, positions,
            (tmp_path / "chat.md").read_text(encoding="utf-8"))


def test_the_json_holds_a_continued_reply_as_one_reply_numbered_from_1(tmp_path):
    data, _, _, _ = exported(tmp_path, hash_table_then_a_continued_story())
    assert [r["reply"] for r in data["replies"]] == [1, 2]
    story = data["replies"][1]
    assert story["text"] == "Once upon a time, the end." and not story["stopped"]
    assert story["stats"]["n_rounds"] == len(story["rounds"]) == 5
    assert story["comparison"]["speedup"] == 2.0  # the comparison of its last part


def test_the_json_keeps_a_continued_replys_parts_apart(tmp_path):
    data, _, _, _ = exported(tmp_path, hash_table_then_a_continued_story())
    story = data["replies"][1]
    assert [(p["part"], p["stopped"], p["n_rounds"]) for p in story["parts"]] == [(1, True, 2), (2, False, 3)]
    assert [(r["part"], r["index"]) for r in story["rounds"]] == [(1, 0), (1, 1), (2, 0), (2, 1), (2, 2)]


def test_the_json_environment_says_what_ran_the_pair(tmp_path):
    runtime = Runtime(cpu_capability="AVX2", threads=2, target_kernel="Q4×Q8 native kernel (avx2)",
                      draft_weights="int8 on torch's weight-only int8 kernel (_weight_int8pack_mm)")
    data, _, _, _ = exported(tmp_path, dataclasses.replace(hash_table_then_a_continued_story(), runtime=runtime))
    environment = data["environment"]
    assert {key: environment[key] for key in dataclasses.asdict(runtime)} == dataclasses.asdict(runtime)
    assert environment["cpu"]  # the CPU's model name


def test_the_json_environment_leaves_what_is_not_known_empty(tmp_path):
    data, _, _, _ = exported(tmp_path, hash_table_then_a_continued_story())  # no runtime: a chat reopened
    assert data["environment"]["target_kernel"] is None and data["environment"]["threads"] is None


def test_the_session_carries_what_runs_the_loaded_pair(make_studio, mixed_decoder):
    studio = make_studio(mixed_decoder)
    assert studio.chat.session.runtime == described(mixed_decoder)[1]
    assert studio.chat.session.pair.draft.weights == described(mixed_decoder)[0].draft.weights


def test_the_rounds_csv_numbers_replies_as_the_json_with_the_part_of_each_round(tmp_path):
    data, rounds, _, _ = exported(tmp_path, hash_table_then_a_continued_story())
    assert [(r["reply"], r["part"], r["round"]) for r in rounds] == [
        ("1", "1", "0"), ("2", "1", "0"), ("2", "1", "1"), ("2", "2", "0"), ("2", "2", "1"), ("2", "2", "2")]
    assert "".join(r["text"] for r in rounds if r["reply"] == "2") == data["replies"][1]["text"]


def test_each_reply_is_exported_with_its_live_speedup_as_the_window_measured_it(tmp_path):
    """A speculative reply with plain rounds among its rounds has its measured figure in the JSON, and each of its
    rounds one in the CSV from the plain rounds on; a reply with too few plain rounds says it is not measured, and a
    plain AR reply's rounds, the baseline itself, have none."""
    plain = Reply(ReplyRequest(({"role": "user", "content": "hi"},), DecodeSettings(mode=Mode.AR)), plain_steps(3),
                  "xxx", False, reference_s=0.01)
    mixed_events = (accepted_round(0, ["a"], "b"), *[dataclasses.replace(e, index=i + 1) for i, e in
                                                    enumerate(plain_steps(2))], accepted_round(3, ["c"], "d"))
    mixed = Reply(ReplyRequest(({"role": "user", "content": "hi"},), DecodeSettings()), mixed_events, "abxxcd", False)
    session = hash_table_then_a_continued_story()
    session.replies[:0] = [plain, mixed]
    session.comparisons = {}
    data, rounds, _, _ = exported(tmp_path, session)
    measured = data["replies"][1]["stats"]["speedup"]
    assert measured["fair"] and measured["value"] == pytest.approx(mixed.speedup.value) and measured["value"] > 1
    assert data["replies"][2]["stats"]["speedup"]["value"] is None
    assert "not measured yet" in data["replies"][2]["stats"]["speedup"]["note"]
    assert {r["speedup"] for r in rounds if r["reply"] == "1"} == {""}
    assert [r["speedup"] == "" for r in rounds if r["reply"] == "2"] == [True, False, False, False]

def test_the_positions_csv_has_one_row_for_a_continued_reply(tmp_path):
    _, _, positions, _ = exported(tmp_path, hash_table_then_a_continued_story())
    assert [(r["scope"], r["reply"], r["rounds"]) for r in positions] == [
        ("reply", "1", "1"), ("reply", "2", "5"), ("session", "", "6")]


def test_the_markdown_numbers_each_reply_as_the_other_files(tmp_path):
    _, _, _, markdown = exported(tmp_path, hash_table_then_a_continued_story())
    headers = [line for line in markdown.splitlines() if line.startswith("**Reply ")]
    assert [h.split(" · ")[0] for h in headers] == ["**Reply 1", "**Reply 2"]
    assert "Once upon a time, the end." in markdown


def test_the_png_has_a_column_for_each_reply_the_files_number(qtbot, tmp_path):
    session = hash_table_then_a_continued_story()
    data, _, _, _ = exported(tmp_path, session)
    window = shown_window(qtbot, 1400, 900)
    why = why_panel(session, why_gamma(session), window.charts.size())
    assert window.analysis.chart_image(session).width() == window.charts.width() * len(data["replies"]) + why.width()


def cut_and_fitted_reply() -> tuple[Reply, Comparison, ContextNotice]:
    """A reply cut at max new tokens part-way through a character, on a busy machine, compared with plain AR, in a
    conversation fitted into the window."""
    last = dataclasses.replace(rejected_round(1, ["c"], "x", "d"), finish_reason="length",
                               text_notice="the reply ended inside a character: its bytes were left out")
    cut = dataclasses.replace(reply([("user", "a story")], (accepted_round(0, ["a"], "b"), last), "abcd"),
                              machine_busy=True)
    comparison = Comparison((accepted_round(0, ["a"], "b"),), "ab", 0.1, 0.2, 30.0, 15.0, None)
    notice = ContextNotice(window=1024, prompt_tokens=900, dropped_messages=2, max_new_tokens=100,
                           requested_max_new_tokens=300)
    return cut, comparison, notice


def test_the_markdown_has_the_lines_the_chat_shows_under_a_reply(qtbot, tmp_path):
    cut, comparison, notice = cut_and_fitted_reply()
    window = shown_window(qtbot, 1400, 900)
    window.on_turn_started(TurnStarted(0, cut.request, live=True))
    for event in cut.events:
        window.on_round_received(RoundShown(event, live=True))
    window.on_reply_finished(ReplyShown(0, cut, cut, can_continue=True, live=True))
    window.on_comparison_finished(ComparisonShown(0, comparison, cut, PAIR))
    window.chat_pane.on_context_fitted(notice)
    [item] = window.chat.transcript.replies()
    shown = [line.replace("\u00a0", " ") for note in item.notes for line in
             ((note.summary, note.explanation) if isinstance(note, ComparisonView) else (note.text,))]
    assert len(shown) == 7  # figures, busy machine, cut, bytes left out, comparison and why, context
    _, _, _, markdown = exported(tmp_path, Session(PAIR, [cut], {0: comparison}, "a story", {0: notice.message}))
    reply_lines = markdown.split("**Reply 1 ·")[1].splitlines()
    assert [line[1:-1] for line in reply_lines if line.startswith("*") and not line.startswith("**")] == shown
    busy = next(note for note in item.notes if not isinstance(note, ComparisonView) and note.details)
    assert reply_lines[reply_lines.index(f"*{busy.text}*") + 2] == busy.details  # what the chat's tooltip holds
    ar = reply_lines.index("**Plain AR's text (the comparison)**")  # a sampled comparison's other text, as shown
    assert reply_lines[ar + 2] == comparison.ar_text


def test_a_continued_replys_markdown_has_the_notes_of_its_last_part(tmp_path):
    session = hash_table_then_a_continued_story()
    session.context_notices = {1: "left out the oldest message", 2: "left out the oldest 2 messages"}
    _, _, _, markdown = exported(tmp_path, session)
    story = markdown.split("**Reply 2 ·")[1]
    assert "*Context: left out the oldest 2 messages*" in story and "oldest message*" not in story


def test_a_continued_replys_comparison_is_written_of_the_continued_part_as_the_chat_shows_it(tmp_path):
    session = hash_table_then_a_continued_story()
    more = session.replies[2]
    ar_steps = tuple(dataclasses.replace(e, gamma=0, drafted=()) for e in more.events)  # the same 5 tokens
    comparison = Comparison(ar_steps, more.text, 0.1, 0.2, 30.0, 15.0, identical=True)
    session.comparisons = {2: comparison}
    _, _, _, markdown = exported(tmp_path, session)
    story = markdown.split("**Reply 2 ·")[1]
    # the line the window shows under the part it measured
    assert f"*part 2 (continued): {comparison_line(comparison, more)}*" in story
    assert "part 2 (continued): plain AR, run undrawn: 5 tokens" in story.replace("\u00a0", " ")
    assert "Plain AR produced the same 5 tokens" in story and "part at token" not in story
    assert "Plain AR's text" not in story  # the same text as the part it decoded again


def test_each_parts_comparison_is_written_as_the_chat_shows_each(tmp_path):
    """Part 1 (stopped, so its comparison says no speed) and part 2 each compared: both lines, in order, and the
    JSON's parts name each part's figure."""
    session = hash_table_then_a_continued_story()
    story, more = session.replies[1], session.replies[2]
    first = Comparison((), "Once", 0.1, 0.1, 20.0, 10.0, None, stopped=True)
    last = session.comparisons[2]
    session.comparisons = {1: first, 2: last}
    data, _, _, markdown = exported(tmp_path, session)
    told = markdown.split("**Reply 2 ·")[1]
    # each named by its part, as the chat names them once the reply is continued
    assert (told.index(f"*part 1: {comparison_line(first, story)}*")
            < told.index(f"*part 2 (continued): {comparison_line(last, more)}*"))
    assert [(p["part"], p["speedup"]) for p in data["replies"][1]["parts"]] == [(1, 2.0), (2, 2.0)]


def test_the_markdown_keeps_a_poems_lines_and_leaves_code_as_it_is():
    poem = "Roses are red,\nviolets are blue.\n\n```\nx = 1\ny = 2\n```\n- one\n- two"
    assert hard_line_breaks(poem) == ("Roses are red,  \nviolets are blue.\n\n```\nx = 1\ny = 2\n```\n- one  \n"
                                      "- two")
    assert hard_line_breaks("one line") == "one line"


def test_the_markdown_closes_a_code_block_a_reply_cut_at_max_tokens_left_open():
    """The reply ends inside its C code: the block is closed, so the notes and turns after it read as text. The
    control: a closed block gets no second fence."""
    assert hard_line_breaks("Here:\n```c\nint main() {\n  return") == "Here:  \n```c\nint main() {\n  return\n```"
    assert hard_line_breaks("```c\nint x;\n```") == "```c\nint x;\n```"


def test_an_export_into_a_read_only_folder_fails_with_an_export_error_not_the_cleanup_s(tmp_path, monkeypatch):
    """The probe's case: the write fails with EROFS, and so does removing the partial file; the caller gets the
    ExportError that names the file (before, the cleanup's raw OSError replaced it)."""
    import errno
    import pathlib

    import pytest

    from app.chat.export import ExportError

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(pathlib.Path, "write_text", read_only)
    monkeypatch.setattr(pathlib.Path, "unlink", read_only)
    with pytest.raises(ExportError, match="Read-only file system"):
        export_session(hash_table_then_a_continued_story(), tmp_path / "chat")


def notes_under_replies_decoded_by(qtbot, pairs: list[PairInfo]) -> list[list[str]]:
    window = shown_window(qtbot, 1400, 900)
    for index, pair in enumerate(pairs):
        answer = reply([("user", f"q{index}")], (accepted_round(0, ["a"], "b", finish="eos"),), "ab")
        window.on_turn_started(TurnStarted(index, answer.request, live=False))
        window.on_reply_finished(ReplyShown(index, answer, answer, can_continue=False, live=False, pair=pair))
    return [[note.text for note in item.notes] for item in window.chat.transcript.replies()]


def test_a_reply_of_another_pair_than_the_one_above_says_which_decoded_it(qtbot):
    other = dataclasses.replace(PAIR, target=ModelInfo("qwen", "/q", 1, 64))
    notes = notes_under_replies_decoded_by(qtbot, [PAIR, other, other])
    said = [[text for text in texts if text.startswith("Decoded by")] for texts in notes]
    assert said == [[], ["Decoded by qwen + d · cpu · float32, not the pair of the reply above"], []]


def test_replies_of_one_pair_do_not_name_it(qtbot):
    """Control: the same pair throughout, timed again between the replies, is never named under them."""
    notes = notes_under_replies_decoded_by(qtbot, [PAIR, dataclasses.replace(PAIR, target_step_s=0.5)])
    assert not any(text.startswith("Decoded by") for texts in notes for text in texts)


def test_a_continued_reply_of_another_pair_still_says_so(qtbot):
    """Continue draws the reply again with its notes: the line naming its pair comes back with them."""
    other = dataclasses.replace(PAIR, target=ModelInfo("qwen", "/q", 1, 64))
    window = shown_window(qtbot, 1400, 900)
    asked = [("user", "q0"), ("assistant", "ab"), ("user", "q1")]
    turns = [(asked[:1], PAIR), (asked, other), (asked + [("assistant", "ab")], other)]  # the last continues
    for index, (messages, pair) in enumerate(turns):
        answer = reply(messages, (accepted_round(0, ["a"], "b", finish="eos"),), "ab")
        window.on_turn_started(TurnStarted(index, answer.request, live=False))
        window.on_reply_finished(ReplyShown(index, answer, answer, can_continue=False, live=False, pair=pair))
    notes = [[note.text for note in item.notes] for item in window.chat.transcript.replies()]
    assert len(notes) == 2 and any(text.startswith("Decoded by qwen") for text in notes[1])


def test_a_reply_that_reads_like_control_tokens_is_exported_and_compared_as_written(tmp_path):
    """The engine writes no text for a control token: a reply echoing a pasted "<|im_end|>" or Qwen's ordinary "</s>"
    keeps it in the Markdown, and the comparison column reads it too."""
    from words.transcript import clean_tokens

    text = "Type <|im_end|> to end a turn; HTML closes </s>."
    answer = reply([("user", "how do turns end?")], (accepted_round(0, ["Type"], " <|im_end|>"),), text)
    _, _, _, markdown = exported(tmp_path, Session(PAIR, [answer], {}, "turns"))
    assert text in markdown
    assert clean_tokens(("a", "</s>", "<|im_end|>")) == ("a</s><|im_end|>", [0, 1, 1, 1, 1] + [2] * 10)
