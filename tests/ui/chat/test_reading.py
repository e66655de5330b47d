"""Reading a reply: the clean view (Markdown, no rejected drafts or special tokens) by default, the speculative
trace one toggle away on the same reply (a token's tooltip going with the view it was in), copy giving the clean
text, and the pane following the conversation or scrolled to its ends with Ctrl+Home / Ctrl+End."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QEvent, QPoint, Qt, QUrl
from PySide6.QtGui import QGuiApplication, QHelpEvent, QTextCursor
from PySide6.QtWidgets import QAbstractSlider, QApplication, QToolTip

from engine.events import Fate
from tests.ui.helpers import REPLY_TIMEOUT_MS, send, shown_window, token_fragments_with_blocks
from tests.ui.synthetic import accepted_round, markdown_reply, rejected_round
from ui.chat.view import CLEAN, EXAMPLE_SCHEME, EXAMPLES, TRACE, ChatView, ComparisonView, monospace_family
from ui.window.palette import CODE_BACKGROUND, DIFFERENCE_BACKGROUND, STYLES
from words.transcript import UserItem


def shown_reply(qtbot) -> ChatView:
    chat = ChatView()
    qtbot.addWidget(chat)
    chat.resize(600, 400)
    chat.add_user_message("Show me code")
    chat.begin_reply("Assistant")
    for event in markdown_reply():
        chat.add_round(event)
    chat.add_note("stats")
    return chat


def fragments(chat: ChatView):
    """(text, char format, block format) of every fragment that belongs to a token."""
    return [(f.text(), f.charFormat(), b.blockFormat()) for f, b in token_fragments_with_blocks(chat)]


def test_clean_view_renders_markdown_without_rejected_drafts_or_special_tokens(qtbot):
    chat = shown_reply(qtbot)
    assert chat.view == CLEAN
    text = chat.toPlainText()
    assert "Here is fast code:\ndef f():\n    return 1\nCopy code\nDone.\nstats" in text  # the code's Copy link
    for absent in ("**", "```", "<|im_end|>", " pass"):
        assert absent not in text
    code = [fmt for piece, fmt, _ in fragments(chat) if piece in ("def", "    return")]
    assert code and all(fmt.fontFamilies() == [monospace_family()] for fmt in code)
    bold = next(fmt for piece, fmt, _ in fragments(chat) if piece == "fast")
    assert bold.fontWeight() > 500
    # each token keeps its fate as a text colour
    colours = {fmt.foreground().color().name() for _, fmt, _ in fragments(chat)}
    assert {STYLES[Fate.ACCEPTED].reading, STYLES[Fate.BONUS].reading, STYLES[Fate.CORRECTED].reading} <= colours
    # a newline is a line, not a paragraph gap
    assert max(block.topMargin() for _, _, block in fragments(chat)) <= 8


def test_trace_shows_every_draft_on_the_same_reply_and_copy_stays_clean(qtbot):
    chat = shown_reply(qtbot)
    chat.set_view(TRACE)
    struck = [piece for piece, fmt, _ in fragments(chat) if fmt.fontStrikeOut()]
    assert struck == [" pass"]
    assert "<|im_end|>" in chat.toPlainText() and "```python" in chat.toPlainText()
    chat.selectAll()
    copied = chat.selected_clean_text()
    assert " pass" not in copied and "<|im_end|>" not in copied
    assert "Here is **fast** code:\n\n```python\ndef f():\n    return 1\n```\nDone.\nstats" in copied
    chat.set_view(CLEAN)
    assert " pass" not in chat.toPlainText()


def test_the_ar_comparison_columns_read_like_the_clean_view(qtbot):
    chat = shown_reply(qtbot)
    reply = ("```", "python", "\n", "def", " f", "():", "\n", "```", "\n", "Use", " `", "f", "`", " **", "now", "**",
             "")  # the engine writes no text for the end-of-turn token
    ar = reply[:9] + ("Call", " `", "f", "`", "")
    chat.add_comparison(ComparisonView("summary", "why", reply, ar, first_difference=9))
    table = chat.toPlainText().split("why", 1)[1]
    for markup in ("```", "`", "**"):
        assert markup not in table, markup
    assert "def f():" in table and "Use f now" in table and "Call f" in table
    cursor = chat.document().find("def f():")
    assert cursor.charFormat().fontFamilies() == [monospace_family()]
    cursor = chat.document().find("Call")
    assert cursor.charFormat().background().color().name() == DIFFERENCE_BACKGROUND  # where the texts part


def test_a_sampled_comparisons_plain_ar_column_says_it_is_another_sample(qtbot):
    """Sampled, plain AR's timed run is another sample of the settings beside the reply's own text. The control:
    a greedy comparison's column is plain AR's text, titled so."""
    for sampled, title in ((True, "plain AR (its timed run: another sample)"), (False, "plain AR\n")):
        chat = shown_reply(qtbot)
        chat.add_comparison(ComparisonView("summary", "why", ("A", " b"), ("A", " c"), first_difference=1,
                                           sampled=sampled))
        assert ("another sample" in chat.toPlainText()) is sampled and title in chat.toPlainText()


def test_where_the_texts_agree_plain_ars_text_is_shown_side_by_side_on_asking(qtbot):
    """A comparison whose texts agree: its lines and a link, which draws the two texts side by side as where they
    part, none of it marked as a parting, and then hides them. The control: a parted comparison draws its table at
    once, with no link."""
    chat = shown_reply(qtbot)
    tokens = ("Same", " text", "<|im_end|>")
    chat.add_comparison(ComparisonView("summary", "why", tokens, tokens, first_difference=None))
    assert "why\nShow plain AR's text" in chat.toPlainText() and "Same text" not in chat.toPlainText()
    chat.on_anchor_clicked(QUrl(chat.document().find("Show plain AR's text").charFormat().anchorHref()))
    table = chat.toPlainText().split("Hide plain AR's text", 1)[1]
    assert "this reply (speculative)" in table and "plain AR\n" in table and table.count("Same text") == 2
    assert chat.document().find("text").charFormat().background().color().name() != DIFFERENCE_BACKGROUND
    chat.on_anchor_clicked(QUrl(chat.document().find("Hide plain AR's text").charFormat().anchorHref()))
    assert "Show plain AR's text" in chat.toPlainText() and "Same text" not in chat.toPlainText()
    chat.add_comparison(ComparisonView("parted", "why", ("A", " b"), ("A", " c"), first_difference=1))
    assert "A b" in chat.toPlainText() and chat.toPlainText().count("plain AR's text") == 1


def test_the_trace_draws_code_in_the_monospace_font_like_the_clean_view(qtbot):
    chat = shown_reply(qtbot)
    chat.set_view(TRACE)
    families = {piece: fmt.fontFamilies() for piece, fmt, _ in fragments(chat)}
    for code in ("def", "    return", " pass", " 1"):  # " pass" is the rejected draft inside the code block
        assert families[code] == [monospace_family()], code
    for prose in ("Here", " code", "Done"):
        assert families[prose] != [monospace_family()], prose


def test_ctrl_a_ctrl_c_copies_the_clean_reply(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, greedy=False, max_new_tokens=24, cost_aware=False, stop_below=0.0)
    reply = send(qtbot, studio)
    window = studio.window
    rejected = [s.text for s in window.chat.spans if s.fate is Fate.REJECTED]
    assert rejected
    for trace in (False, True):
        window.legend.trace_action.setChecked(trace)
        QGuiApplication.clipboard().clear()
        window.chat.setFocus()
        qtbot.keyClick(window.chat, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
        qtbot.keyClick(window.chat, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
        copied = QGuiApplication.clipboard().text()
        assert "".join(t.text for t in reply.tokens).strip() in copied
        assert "w3 w7 w11 w5" in copied  # the user's message too


def test_the_view_toggle_has_a_shortcut_and_redraws_without_rerunning(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, greedy=False, max_new_tokens=16, cost_aware=False, stop_below=0.0)
    send(qtbot, studio)
    window = studio.window
    rounds = studio.worker.rounds_emitted
    qtbot.keyClick(window.message_box, Qt.Key.Key_T, Qt.KeyboardModifier.ControlModifier)
    assert window.chat.view == TRACE and window.legend.trace_action.isChecked()
    qtbot.keyClick(window.message_box, Qt.Key.Key_T, Qt.KeyboardModifier.ControlModifier)
    assert window.chat.view == CLEAN
    assert studio.worker.rounds_emitted == rounds


def test_the_chat_follows_a_new_message_unless_the_user_scrolls_up(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, greedy=False, max_new_tokens=60)
    window = studio.window
    window.resize(1000, 700)
    bar = window.chat.verticalScrollBar()
    for _ in range(3):
        send(qtbot, studio)
    assert bar.maximum() > 0, "the chat should be taller than the pane by now"
    bar.triggerAction(QAbstractSlider.SliderAction.SliderToMinimum)  # read an older reply
    assert not window.chat.following
    send(qtbot, studio)  # sending jumps to the bottom and follows the streaming reply
    assert bar.value() == bar.maximum() and window.chat.following

    def scroll_up_once(event):
        if event.index == 2:
            bar.triggerAction(QAbstractSlider.SliderAction.SliderToMinimum)

    window.round_shown.connect(scroll_up_once)
    with qtbot.waitSignal(window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        window.message_box.setPlainText("w3 w9")
        window.message_box.submit()
    assert bar.value() == 0 and not window.chat.following  # the reader's position was left alone


def test_an_example_in_the_empty_chat_guide_is_sent_with_one_click(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, max_new_tokens=4)
    chat = studio.window.chat
    assert "Try one" in chat.toPlainText()
    with qtbot.waitSignal(studio.window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        chat.anchorClicked.emit(QUrl(f"{EXAMPLE_SCHEME}:1"))
    assert studio.chat.messages[0] == {"role": "user", "content": EXAMPLES[1][1]}
    assert "Try one" not in chat.toPlainText()


def test_the_guide_goes_with_the_first_item_and_comes_back_for_a_new_chat(qtbot):
    chat = ChatView()
    qtbot.addWidget(chat)
    chat.begin_reply("Assistant · continued")  # a chat may open on a reply (a continuation)
    assert "Try one" not in chat.toPlainText() and chat.toPlainText().startswith("Assistant")
    chat.clear_chat()
    assert "Try one" in chat.toPlainText()


def test_an_unfenced_indented_line_is_drawn_indented(qtbot):
    chat = ChatView()
    qtbot.addWidget(chat)
    chat.begin_reply("Assistant")
    chat.add_round(accepted_round(0, ["def f():\n", "    return 1"], "\n"))
    chat.flush()
    margins = {}
    block = chat.document().begin()
    while block.isValid():
        margins[block.text()] = block.blockFormat().leftMargin()
        block = block.next()
    assert margins["return 1"] == 4 * chat.fontMetrics().horizontalAdvance(" ") > margins["def f():"]


def test_a_long_prompt_is_shown_folded_and_unfolds_on_click(qtbot):
    chat = ChatView()
    qtbot.addWidget(chat)
    document = " ".join(f"w{i % 40}" for i in range(4000))
    chat.add_user_message(document)
    shown = chat.toPlainText()
    assert document not in shown and "Show all (4000 words)" in shown and len(shown) < 400
    chat.on_anchor_clicked(QUrl("fold:0"))
    assert document in chat.toPlainText() and "Fold" in chat.toPlainText()


def message_top(chat: ChatView, index: int) -> float:
    """Where user message `index` (an item index) begins in the pane's viewport, in pixels: its "You" label's top."""
    labels = [i for i, item in enumerate(chat.items) if isinstance(item, UserItem)].index(index)
    block = chat.document().begin()
    while block.text() != "You" or labels:
        labels -= block.text() == "You"
        block = block.next()
    return chat.document().documentLayout().blockBoundingRect(block).top() - chat.verticalScrollBar().value()


def test_show_all_keeps_the_message_where_the_reader_was_looking(qtbot):
    chat = ChatView()
    qtbot.addWidget(chat)
    chat.resize(600, 400)
    chat.show()
    qtbot.waitExposed(chat)
    document = "\n".join(" ".join(f"w{i}" for i in range(line, line + 10)) for line in range(200))
    for n in range(3):
        chat.add_user_message(f"question {n}")
        chat.begin_reply("Assistant")
        for event in markdown_reply():
            chat.add_round(event)
        chat.add_note("stats")
    chat.add_user_message(document)
    chat.begin_reply("Assistant")
    for event in markdown_reply():
        chat.add_round(event)
    chat.add_note("stats")
    QApplication.processEvents()
    folded = len(chat.items) - 2
    bar = chat.verticalScrollBar()
    assert chat.following and 0 < bar.value() == bar.maximum()  # at the bottom, the folded message in view
    before = message_top(chat, folded)
    link = chat.document().find("Show all")
    link.setPosition(link.selectionStart() + 1)
    qtbot.mouseClick(chat.viewport(), Qt.MouseButton.LeftButton, pos=chat.cursorRect(link).center())
    QApplication.processEvents()
    assert document in chat.toPlainText()
    assert bar.value() > 0 and abs(message_top(chat, folded) - before) <= 1


def test_a_short_message_is_never_folded(qtbot):
    chat = ChatView()
    qtbot.addWidget(chat)
    chat.add_user_message("w3 w7\nw11")
    assert "w3 w7\nw11" in chat.toPlainText() and "Show all" not in chat.toPlainText()


def test_a_code_block_has_a_copy_link_that_copies_its_code(qtbot):
    chat = ChatView()
    qtbot.addWidget(chat)
    chat.begin_reply("Assistant")
    for event in markdown_reply():
        chat.add_round(event)
    chat.flush()
    chat.set_reply_actions(0, ("copy",), text="")
    assert chat.toPlainText().count("Copy code") == 1
    with qtbot.waitSignal(chat.code_copied, timeout=1000) as copied:
        chat.on_anchor_clicked(QUrl(chat.document().find("Copy code").charFormat().anchorHref()))
    assert copied.args == ["def f():\n    return 1"]  # the code alone: no fences, no rejected draft
    chat.selectAll()
    assert "Copy code" not in chat.selected_clean_text()


def finished_reply(qtbot, events) -> ChatView:
    chat = ChatView()
    qtbot.addWidget(chat)
    chat.begin_reply("Assistant")
    for event in events:
        chat.add_round(event)
    chat.set_reply_actions(0, ("copy",), text="")  # the reply is drawn for good
    return chat


def test_a_reply_cut_inside_bold_text_shows_it_bold_without_its_markers(qtbot):
    chat = finished_reply(qtbot, [accepted_round(0, ["It", " is", " **"], "very", finish="length")])
    assert "It is very" in chat.toPlainText() and "**" not in chat.toPlainText()
    assert next(fmt for piece, fmt, _ in fragments(chat) if piece == "very").fontWeight() > 500
    assert chat.transcript.clean_text(chat.transcript.last_reply()) == "It is **very"  # the text itself is unchanged


def test_a_reply_the_model_ended_keeps_a_stray_marker_literal(qtbot):
    chat = finished_reply(qtbot, [accepted_round(0, ["It", " is", " **"], "very"),
                                  accepted_round(1, [], "<|im_end|>", finish="eos")])
    assert "It is **very" in chat.toPlainText()


def test_a_code_blocks_copy_link_stands_apart_at_the_right(qtbot):
    chat = finished_reply(qtbot, markdown_reply())
    block = chat.document().begin()
    while block.text() != "Copy code":
        block = block.next()
    link, code = block.blockFormat(), block.previous().blockFormat()
    assert link.alignment() & Qt.AlignmentFlag.AlignRight
    assert link.topMargin() >= 3 and link.bottomMargin() >= 3
    assert code.background().color().name() == CODE_BACKGROUND and link.background().style() == Qt.BrushStyle.NoBrush


def test_a_byte_draft_in_the_trace_says_what_its_bytes_are(qtbot):
    chat = ChatView()
    qtbot.addWidget(chat)
    chat.set_view(TRACE)
    chat.begin_reply("Assistant")
    chat.add_round(rejected_round(0, ["a"], "‹e4 bd›", "你"))
    chat.flush()
    tips = {fragment.text(): fragment.charFormat().toolTip() for fragment, _ in token_fragments_with_blocks(chat)}
    # drawn with a no-break space: a line's end never splits the label ("‹e4" / "bd›")
    assert tips["‹e4\u00a0bd›"].startswith("‹e4 bd›: 2 of the 3 bytes of 你.") and tips["你"] == ""


def byte_draft_in_the_trace(qtbot):
    """A bare window showing, in the trace, a reply whose rejected draft is a piece of a character (it has a
    tooltip), and where that draft is drawn in the chat's viewport; the chat has the focus."""
    window = shown_window(qtbot, 1400, 900)
    window.legend.trace_action.setChecked(True)
    window.chat.begin_reply("Assistant")
    window.chat.add_round(rejected_round(0, ["a"], "‹e4 bd›", "你"))
    window.chat.flush()
    [fragment] = [f for f, _ in token_fragments_with_blocks(window.chat) if f.text() == "‹e4\u00a0bd›"]
    cursor = QTextCursor(window.chat.document())
    cursor.setPosition(fragment.position() + 1)
    window.chat.setFocus()  # before any tooltip shows: a change of focus hides it
    return window, window.chat.cursorRect(cursor).center()


def show_tooltip_at(chat: ChatView, point) -> None:
    """What Qt does when the mouse rests over `point` of the chat's viewport."""
    QApplication.sendEvent(chat.viewport(), QHelpEvent(QEvent.Type.ToolTip, point, chat.viewport().mapToGlobal(point)))


def test_a_notes_details_are_shown_on_hovering_its_line_and_not_in_the_text(qtbot):
    """A note with details: one line in the pane, the details its tooltip. The control: the stats line, which has
    none, shows no tooltip."""
    chat = shown_reply(qtbot)
    chat.resize(600, 400)
    chat.show()
    qtbot.waitExposed(chat)
    details = "Decoded on one thread from round 3: its steps on 2 threads ran over twice as slow."
    chat.add_note("Slowed by the machine's load: went on with one thread from round 3.", warning=True,
                  details=details)
    assert "went on with one thread from round 3." in chat.toPlainText() and details not in chat.toPlainText()
    for line, tip in (("stats", ""), ("went on with one thread", details)):  # the control first: no tip shown yet
        cursor = chat.document().find(line)
        assert cursor.charFormat().toolTip() == tip
        cursor.setPosition(cursor.selectionStart() + 1)
        show_tooltip_at(chat, chat.cursorRect(cursor).center())
        assert QToolTip.isVisible() is bool(tip) and QToolTip.text() == tip


def test_the_blank_below_the_last_line_shows_no_links_tooltip(qtbot):
    """Under a reply whose last line is its links, the pane's blank below shows no tooltip; the control: on the link
    itself its tooltip shows."""
    chat = shown_reply(qtbot)
    chat.resize(600, 400)
    chat.show()
    qtbot.waitExposed(chat)
    chat.set_reply_actions(0, ("copy", "continue"), text="ab")
    link = chat.document().find("Continue")
    link.setPosition(link.selectionStart() + 1)
    on_link = chat.cursorRect(link).center()
    show_tooltip_at(chat, on_link)
    assert QToolTip.isVisible() and QToolTip.text()
    QToolTip.hideText()
    qtbot.waitUntil(lambda: not QToolTip.isVisible(), timeout=2000)
    below = on_link + QPoint(0, 80)
    assert below.y() < chat.viewport().height()
    show_tooltip_at(chat, below)
    assert not QToolTip.isVisible()


def test_a_tokens_tooltip_goes_when_ctrl_t_changes_the_view(qtbot):
    window, at = byte_draft_in_the_trace(qtbot)
    show_tooltip_at(window.chat, at)
    assert QToolTip.isVisible() and QToolTip.text().startswith("‹e4 bd›: 2 of the 3 bytes of 你.")
    qtbot.keyClick(window.chat, Qt.Key.Key_T, Qt.KeyboardModifier.ControlModifier)
    assert window.chat.view == CLEAN
    qtbot.waitUntil(lambda: not QToolTip.isVisible(), timeout=2000)  # Qt hides a tooltip in 300 ms


def test_a_tooltip_stays_while_the_view_stays(qtbot):
    """The control of the test above: a tooltip does not go of itself within its wait, nor with a shortcut (Qt
    hides it on a key press, but a shortcut's key never arrives as one)."""
    window, at = byte_draft_in_the_trace(qtbot)
    show_tooltip_at(window.chat, at)
    assert QToolTip.isVisible()
    qtbot.keyClick(window.chat, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    assert window.chat.view == TRACE  # Copy last reply (there is none to copy) left the view as it was
    with pytest.raises(qtbot.TimeoutError):
        qtbot.waitUntil(lambda: not QToolTip.isVisible(), timeout=2000)
    QToolTip.hideText()


def many_messages(qtbot):
    """A bare window, active, whose chat is many screens tall, scrolled to its bottom."""
    window = shown_window(qtbot, 1000, 700)
    window.activateWindow()
    qtbot.waitActive(window)
    for n in range(60):
        window.chat.add_user_message(f"message {n}")
    bar = window.chat.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == bar.maximum()
    return window, bar


def test_ctrl_home_and_ctrl_end_scroll_the_chat_from_an_empty_message_box(qtbot):
    window, bar = many_messages(qtbot)
    window.message_box.setFocus()
    qtbot.keyClick(window.message_box, Qt.Key.Key_Home, Qt.KeyboardModifier.ControlModifier)
    assert bar.value() == 0 and not window.chat.following  # a reply streaming in would not pull it down
    qtbot.keyClick(window.message_box, Qt.Key.Key_End, Qt.KeyboardModifier.ControlModifier)
    assert bar.value() == bar.maximum() and window.chat.following


def test_ctrl_home_scrolls_the_chat_when_the_chat_has_the_focus(qtbot):
    window, bar = many_messages(qtbot)
    window.chat.setFocus()
    qtbot.keyClick(window.chat, Qt.Key.Key_Home, Qt.KeyboardModifier.ControlModifier)
    assert bar.value() == 0


def test_ctrl_home_in_a_message_being_written_moves_its_cursor_not_the_chat(qtbot):
    window, bar = many_messages(qtbot)
    box = window.message_box
    box.setFocus()
    qtbot.keyClicks(box, "a first line")
    qtbot.keyClick(box, Qt.Key.Key_Home, Qt.KeyboardModifier.ControlModifier)
    assert box.textCursor().position() == 0 and bar.value() == bar.maximum()
