"""The inspector's words per mode: greedy never mentions r or min(1, p/q), text is escaped, copied drafts are
named, padding tokens are left out, look-alike tokens show their ids, formulas never wrap inside, the bonus
sentence counts the round's drafts, and a click pins."""
from __future__ import annotations

import dataclasses

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QTextDocument, QTextFormat
from PySide6.QtWidgets import QApplication

from engine.events import Fate, TokenProb
from tests.ui.helpers import REPLY_TIMEOUT_MS, send, text_of
from tests.ui.synthetic import accepted_round, rejected_round
from ui.chat.inspector import WORD_JOINER, TokenInspector, span_html
from ui.window.main_window import MIN_HEIGHT, MIN_WIDTH, MainWindow
from words.tokens import round_spans


def spans_of(event, lookup=False):
    return {s.fate: s for s in round_spans(event, lookup)}


def lines_of(html: str, width: float, font) -> list[str]:
    """The lines Qt lays `html` out in at `width` pixels, as the reader sees them."""
    document = QTextDocument()
    document.setDefaultFont(font)
    document.setHtml(html)
    document.setTextWidth(width)
    document.size()  # lays it out
    lines, block = [], document.begin()
    while block.isValid():
        layout = block.layout()
        for i in range(layout.lineCount()):
            line = layout.lineAt(i)
            lines.append(block.text()[line.textStart(): line.textStart() + line.textLength()])
        block = block.next()
    return [line.replace("\u00a0", " ").replace(WORD_JOINER, "").strip() for line in lines]


def sampled_copy_rejection():
    """A copied draft rejected in sampling mode, where the target's top two tokens both read "\\n"."""
    event = rejected_round(0, ["a"], "whether", "if", greedy=False, rejected_q=1.0)
    top_p = (TokenProb(198, "\n", 0.6), TokenProb(185, "\n", 0.0003), TokenProb(5, " whether", 0.1),
             TokenProb(6, "`", 0.05), TokenProb(7, "<|im_end|>", 0.01))
    draft = dataclasses.replace(event.drafted[-1], top_p=top_p, top_q=(TokenProb(2, "whether", 1.0),), r=0.8964)
    return spans_of(dataclasses.replace(event, drafted=event.drafted[:-1] + (draft,)), lookup=True)


def test_greedy_rejection_names_the_targets_choice_without_the_sampling_test():
    spans = spans_of(rejected_round(0, ["a"], "b", "c", greedy=True))
    text = text_of(span_html(spans[Fate.REJECTED]))
    assert "greedy" in text and "top choice" in text and "target's choice" in text
    for sampling_only in ("min(1, p/q)", "draw r", "r ≥", "r <"):
        assert sampling_only not in text
    assert "greedy" in text_of(span_html(spans[Fate.ACCEPTED])) and "min(1" not in span_html(spans[Fate.ACCEPTED])


def test_sampling_shows_the_draw_against_min_1_p_over_q_escaped():
    spans = spans_of(rejected_round(0, ["a"], "b", "c", greedy=False))
    accepted = span_html(spans[Fate.ACCEPTED])
    assert "r fell below min(1, p/q)" in text_of(accepted) and "0.1000\u00a0&lt;\u00a01.0000" in accepted
    rejected = text_of(span_html(spans[Fate.REJECTED]))
    assert "at or above min(1, p/q)" in rejected and "0.9500 ≥ 0.4286" in rejected
    assert "norm(max(0, p − q))" in text_of(span_html(spans[Fate.RESAMPLED]))


def test_token_text_is_escaped_and_padding_is_left_out_of_the_top_lists():
    spans = spans_of(rejected_round(0, [], "<b>", "x", greedy=False))
    html = span_html(spans[Fate.REJECTED])
    assert "&lt;b&gt;" in html and "<b>&lt;" not in html.replace("<b>&lt;b&gt;</b>", "")
    assert "im_start" not in html  # the zero-probability padding of the top-q list


def test_copied_drafts_are_named_with_q_equal_to_one_explained():
    spans = spans_of(rejected_round(0, [], "copy", "x", greedy=False, rejected_q=1.0), lookup=True)
    text = text_of(span_html(spans[Fate.REJECTED]))
    assert "copied from the conversation" in text and "q = 1" in text and "1 (copied)" in text
    # without prompt lookup a q of 1.0 is just a confident draft model
    assert "copied" not in span_html(spans_of(rejected_round(0, [], "d", "x", rejected_q=1.0))[Fate.REJECTED])


def test_the_token_that_replaced_a_copied_draft_says_the_draft_was_copied():
    spans = spans_of(rejected_round(0, [], "One", "Two", greedy=True, rejected_q=1.0), lookup=True)
    text = text_of(span_html(spans[Fate.CORRECTED]))  # the clean view's page on a copy's replacement
    assert "Where a draft copied from the conversation proposed One:" in text and "Why q = 1" in text
    # without prompt lookup a q of 1.0 is a certain draft model, and is worded as the draft's
    plain = text_of(span_html(spans_of(rejected_round(0, [], "One", "Two", rejected_q=1.0))[Fate.CORRECTED]))
    assert "Where the draft proposed One:" in plain and "copied" not in plain


def test_look_alike_tokens_show_their_ids_and_plain_ones_do_not():
    text = text_of(span_html(sampled_copy_rejection()[Fate.REJECTED]))
    assert "\\n (token id 198) 0.600" in text and "\\n (token id 185) 0.000" in text  # two tokens read "\\n"
    assert "whether 0.100" in text and "` 0.050" in text  # unambiguous: no id
    assert text.split("\n")[0].strip().endswith("(token id 2)")  # the header names the token's id, on its line


def test_formulas_and_figures_never_break_inside_and_pinned_stays_with_the_token_id(qtbot):
    spans = sampled_copy_rejection()
    font = QApplication.font()
    for width in (176, 240, 340):  # the inspector's text width in the smallest window, and wider
        lines = lines_of(span_html(spans[Fate.REJECTED], pinned=True), width, font)
        # the token heads the page; its id and "pinned" follow it, on its line where it is wide enough
        assert lines[0].startswith("whether") and "(token id 2) · pinned" in lines[0] + " " + lines[1], lines[:2]
        assert width < 240 or lines[0].endswith("(token id 2) · pinned"), lines[:2]
        text = " ".join(lines)
        for whole in ("min(1, p/q)", "min(1, p/1) = p", "0.8964 ≥ 0.3000", "q = 1"):
            assert any(whole in line for line in lines), (width, whole, lines)
            assert whole in text
        resampled = lines_of(span_html(spans[Fate.RESAMPLED]), width, font)
        assert any("norm(max(0, p − q))" in line for line in resampled), (width, resampled)


@pytest.mark.parametrize("size", [(MIN_WIDTH, MIN_HEIGHT), (1600, 1000)])
def test_a_rejected_draft_fits_the_inspector_width_and_at_1600_its_height(qtbot, size):
    window = MainWindow({})
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    window.resize(*size)
    window.inspector.pin(sampled_copy_rejection()[Fate.REJECTED])
    QApplication.processEvents()
    inspector = window.inspector
    assert not inspector.horizontalScrollBar().isVisible()  # nothing runs off to the right
    if size == (1600, 1000):  # the top lists of p and q used to run below the pane
        assert not inspector.verticalScrollBar().isVisible()


def test_the_bonus_sentence_counts_the_drafts_of_its_round():
    one = span_html(spans_of(accepted_round(0, ["a"], "b"))[Fate.BONUS])
    three = span_html(spans_of(accepted_round(0, ["a", "b", "c"], "d", greedy=False))[Fate.BONUS])
    assert "the round's only draft was accepted" in one and "all γ" not in one
    assert "all 3 of the round's drafts were accepted" in three and "a draw from p" in three


def test_a_click_pins_a_token_until_another_click(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, greedy=False, max_new_tokens=16, cost_aware=False, stop_below=0.0)
    send(qtbot, studio)
    window, chat = studio.window, studio.window.chat
    clean = [i for i, s in enumerate(chat.spans) if s.clean]
    first, second = clean[0], clean[-1]
    window.analysis.on_token_clicked(first)
    assert window.inspector.pinned and window.inspector.span is chat.spans[first]
    assert "pinned" in window.inspector.label.text()
    (outline,) = chat.extraSelections()  # the pinned token is underlined and keeps its own colours, to be read
    assert outline.cursor.selectedText() == chat.spans[first].text and outline.format.fontUnderline()
    assert not outline.format.hasProperty(QTextFormat.Property.ForegroundBrush)
    with qtbot.waitSignal(chat.token_hovered, timeout=2000):
        chat.token_hovered.emit(second)  # hovering elsewhere leaves the pinned token shown
    assert window.inspector.span is chat.spans[first]
    window.analysis.on_token_clicked(second)
    assert window.inspector.span is chat.spans[second]
    # a click on empty space releases it
    with qtbot.waitSignal(chat.background_clicked, timeout=2000):
        bottom_left = QPoint(5, chat.viewport().height() - 5)
        qtbot.mouseClick(chat.viewport(), Qt.MouseButton.LeftButton, pos=bottom_left)
    assert not window.inspector.pinned


def spans_shown_at_each_turn_start(studio) -> list:
    shown = []
    window = studio.window
    studio.chat.prompt_requested.connect(lambda _request: shown.append(window.inspector.span))
    return shown


def test_the_inspector_opens_on_a_token_the_view_draws_and_clears_for_a_new_reply(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, greedy=False, max_new_tokens=24, cost_aware=False, stop_below=0.0)
    window = studio.window
    send(qtbot, studio)
    assert any(s.fate is Fate.REJECTED for s in window.chat.spans)
    shown = window.inspector.span  # clean view: the token that replaced the first rejected draft, not the draft
    assert shown.clean and shown.replaces is not None and window.chat.shows(shown)
    assert "Where the draft proposed" in window.inspector.label.text()
    window.legend.trace_action.trigger()
    assert window.inspector.span.fate is Fate.REJECTED  # the trace draws the draft itself
    window.legend.trace_action.trigger()
    assert window.inspector.span is shown
    at_start = spans_shown_at_each_turn_start(studio)
    send(qtbot, studio, "w9 w2")
    assert at_start == [None] and window.inspector.span is not shown


def test_the_token_the_inspector_opens_on_after_a_reply_says_why_it_is_shown(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, greedy=False, max_new_tokens=24, cost_aware=False, stop_below=0.0)
    window = studio.window
    send(qtbot, studio)
    lines = text_of(window.inspector.label.text()).split("\n")
    assert lines[0] == "In place of the last reply's first rejected draft:"  # the clean view's correction
    window.legend.trace_action.trigger()
    assert text_of(window.inspector.label.text()).startswith("The last reply's first rejected draft:")
    hovered = next(i for i, s in enumerate(window.chat.spans) if s.fate is Fate.ACCEPTED)
    with qtbot.waitSignal(window.chat.token_hovered, timeout=2000):
        window.chat.token_hovered.emit(hovered)
    assert "first rejected draft" not in window.inspector.label.text()  # a token pointed at needs no reason


def pin_the_first_clean_token_of_a_reply(make_studio, decoder, qtbot, max_new_tokens: int):
    """A sampled reply with γ drafts every round, its first clean token clicked; returns the studio and its index."""
    studio = make_studio(decoder, greedy=False, max_new_tokens=max_new_tokens, cost_aware=False, stop_below=0.0)
    send(qtbot, studio)
    first_clean = next(i for i, s in enumerate(studio.window.chat.spans) if s.clean)
    studio.window.analysis.on_token_clicked(first_clean)
    return studio, first_clean


def test_a_pinned_token_stays_pinned_through_the_next_reply(make_studio, mixed_decoder, qtbot):
    studio, _ = pin_the_first_clean_token_of_a_reply(make_studio, mixed_decoder, qtbot, 24)
    window = studio.window
    pinned = window.inspector.span
    at_start = spans_shown_at_each_turn_start(studio)
    send(qtbot, studio, "w9 w2")
    assert at_start == [pinned] and window.inspector.pinned and window.inspector.span is pinned


def test_another_token_is_shown_from_its_header_not_from_the_last_scroll_position(qtbot):
    inspector = TokenInspector()
    qtbot.addWidget(inspector)
    inspector.resize(220, 120)
    inspector.show()
    spans = sampled_copy_rejection()
    inspector.show_span(spans[Fate.REJECTED])
    QApplication.processEvents()
    bar = inspector.verticalScrollBar()
    assert bar.maximum() > 0
    bar.setValue(bar.maximum())
    inspector.show_span(spans[Fate.RESAMPLED])
    assert bar.value() == 0
    bar.setValue(bar.maximum())
    inspector.pin(spans[Fate.REJECTED])
    assert bar.value() == 0


def test_a_bonus_after_two_drafts_says_both_were_accepted():
    bonus = spans_of(accepted_round(0, ["a", "b"], "c"))[Fate.BONUS]
    assert "both of the round's drafts were accepted" in text_of(span_html(bonus))


def test_the_legend_names_the_targets_token_after_a_rejection_by_mode(qtbot):
    from ui.chat.legend import Legend

    legend = Legend()
    qtbot.addWidget(legend)
    legend.set_greedy(True)
    assert legend.chips[Fate.RESAMPLED].text() == "corrected"
    sampling = Legend()
    qtbot.addWidget(sampling)
    sampling.set_greedy(False)
    assert sampling.chips[Fate.RESAMPLED].text() == "resampled"


def test_a_rejected_byte_draft_says_which_bytes_of_which_character_it_is():
    spans = spans_of(rejected_round(0, ["a"], "‹e4 bd›", "你"))
    assert ("Part of a character: ‹e4 bd› are 2 of the 3 bytes of 你, the character the target wrote here."
            in text_of(span_html(spans[Fate.REJECTED])))
    assert "Where the draft proposed ‹e4 bd› (2 of the 3 bytes of 你):" in text_of(span_html(spans[Fate.CORRECTED]))


def test_a_rejected_byte_draft_of_an_unknown_character_says_it_is_part_of_one():
    spans = spans_of(rejected_round(0, ["a"], "‹e4 bd›", "b"))
    assert "‹e4 bd› (part of a UTF-8 character): " in text_of(span_html(spans[Fate.REJECTED]))
    assert "Where the draft proposed ‹e4 bd› (part of a UTF-8 character):" in text_of(
        span_html(spans[Fate.CORRECTED]))


def test_byte_pieces_in_the_top_lists_are_explained_under_them():
    with_piece = text_of(span_html(spans_of(rejected_round(0, [], "‹e4 bd›", "b"))[Fate.REJECTED]))
    without = text_of(span_html(spans_of(rejected_round(0, [], "c", "b"))[Fate.REJECTED]))
    assert "‹…› spells a token's bytes in hex" in with_piece and "‹…›" not in without


def test_the_legend_and_the_guide_name_the_uncoloured_tokens_the_target_wrote_alone(qtbot):
    from ui.chat.legend import Legend
    from ui.chat.view import ChatView

    legend = Legend()
    qtbot.addWidget(legend)
    assert legend.chips[Fate.TARGET].text() == "target alone"
    chat = ChatView()
    qtbot.addWidget(chat)
    assert "Uncoloured tokens are the target's alone" in chat.toPlainText()


def test_a_continued_replys_rounds_are_numbered_on_from_its_first_part(qtbot):
    from ui.chat.view import ChatView

    chat = ChatView()
    qtbot.addWidget(chat)
    chat.begin_reply("Assistant")
    for event in (accepted_round(0, ["a"], "b"), accepted_round(1, ["c"], "d")):
        chat.add_round(event)
    chat.set_reply_actions(0, ("copy", "continue"))
    chat.continue_reply("Assistant")  # the second part's rounds count from 0 again
    chat.add_round(rejected_round(0, ["e"], "x", "f"))
    chat.flush()
    assert [span.round_index for span in chat.spans] == [0, 0, 1, 1, 2, 2, 2]
    assert "round 3" in text_of(span_html(chat.spans[-1]))


def outlined_text(chat) -> list[str]:
    """The text the chat pane outlines as the pinned token."""
    return [selection.cursor.selectedText() for selection in chat.extraSelections()]


def test_a_pinned_token_stays_outlined_after_a_continue(make_studio, mixed_decoder, qtbot):
    studio, first_clean = pin_the_first_clean_token_of_a_reply(make_studio, mixed_decoder, qtbot, 6)
    window = studio.window
    with qtbot.waitSignal(window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        window.continue_action.trigger()  # the reply goes on in place: the pane redraws it whole
    assert window.inspector.pinned and window.inspector.span is window.chat.spans[first_clean]
    assert outlined_text(window.chat) == [window.chat.spans[first_clean].text]


def test_a_token_of_spaces_alone_shows_them_and_one_with_a_word_keeps_its_space():
    from ui.chat.inspector import show
    assert show("  ") == "␣␣" and show(" \n") == "␣\\n"
    assert show(" the") == " the" and show("a<b") == "a&lt;b"  # the controls: a word's leading space, escaping


def test_after_a_continue_the_inspector_opens_on_the_continued_parts_first_rejection(make_studio, mixed_decoder,
                                                                                      qtbot):
    """The control: after the first part it opened on that part's, with the last reply's note."""
    studio = make_studio(mixed_decoder, greedy=False, max_new_tokens=24, cost_aware=False, stop_below=0.0)
    window = studio.window
    window.legend.trace_action.trigger()
    send(qtbot, studio)
    first_part_rounds = len(studio.chat.turns[-1].reply.events)
    assert window.inspector.span.round_index < first_part_rounds
    assert text_of(window.inspector.label.text()).startswith("The last reply's first rejected draft:")
    with qtbot.waitSignal(window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        window.continue_action.trigger()
    part = studio.chat.turns[-1].reply
    rejected = [s for s in window.chat.spans if s.fate is Fate.REJECTED and s.round_index >= first_part_rounds]
    assert part.request.continues and rejected  # the continued part drafted, and had a draft rejected
    assert window.inspector.span is rejected[0]
    assert text_of(window.inspector.label.text()).startswith("The continued part's first rejected draft:")


def test_a_copied_token_says_the_line_of_the_users_message_it_came_from(qtbot):
    """Hovered, pinned and unpinned, a copy of the pasted function names its line; a model draft names none."""
    window = MainWindow({})
    qtbot.addWidget(window)
    chat = window.chat
    chat.add_user_message("Rename f to g:\ndef f(x):\n    y = x * 2\n    return y + 1\n")
    chat.begin_reply("Assistant", lookup=True)
    chat.add_round(accepted_round(0, ["def", " g", "(x", "):\n"], "    y"))  # the model's own drafts
    chat.add_round(accepted_round(1, [" =", " x", " *", " 2", "\n", "    return"], " y", q=1.0))  # copies
    copy = next(i for i, s in enumerate(chat.spans) if s.text == "    return")
    window.analysis.inspect(copy)
    said = "copied from your message, line 4"
    assert said in text_of(window.inspector.label.text())
    window.analysis.on_token_clicked(copy)
    window.analysis.on_background_clicked()
    assert said in text_of(window.inspector.label.text())
    window.analysis.inspect(next(i for i, s in enumerate(chat.spans) if s.text == " g"))
    assert "copied from" not in text_of(window.inspector.label.text())
