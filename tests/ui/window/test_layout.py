"""A layout that holds from its smallest size up (MIN_WIDTH × MIN_HEIGHT, which a 1000×700 screen holds with a
title bar): panes at readable sizes, handles that move, panes that come back, and controls that stay where they
are; a first start fits the window, frame and all, on the screen."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QMargins, QPoint, QRect, QSize
from PySide6.QtGui import QImage, QPainter, QTextDocument, QTextDocumentFragment
from PySide6.QtWidgets import QApplication, QStyle, QStyleOptionComboBox, QWidget

from engine.events import ModelInfo, PairInfo
from engine.models.pairing import PRESETS
from tests.ui.helpers import shown_window
from tests.ui.synthetic import rejected_round
from ui.chat.inspector import MIN_LINES, span_html
from ui.pair.pane import SIDE_MAX_WIDTH
from ui.why.charts import MIN_CHART_HEIGHT
from ui.window.fit import MIN_HEIGHT, MIN_WIDTH, fitted_frame
from ui.window.main_window import MainWindow
from ui.window.pane_splitter import PANE_MIN_WIDTH, PANE_WIDTH
from ui.window.status import STATUS_RIGHT_MARGIN
from words.tokens import round_spans

OPENBOX_FRAME = QMargins(1, 20, 1, 5)  # the title bar and borders openbox draws around a window
SMALL_SCREEN = QRect(0, 0, 1000, 700)
# What a maximized window's client area is on a 1000×700 screen under openbox
SMALL_SCREEN_CLIENT = SMALL_SCREEN.size().shrunkBy(OPENBOX_FRAME)


def whole_in_view(widget: QWidget) -> bool:
    """Nothing of the widget lies outside any widget that holds it (which would cut that part off)."""
    holder = widget.parentWidget()
    while holder is not None:
        if not holder.rect().contains(QRect(widget.mapTo(holder, QPoint(0, 0)), widget.size())):
            return False
        holder = holder.parentWidget()
    return True


def pane_widths(window: MainWindow) -> dict[str, int]:
    return dict(zip(window.panes, window.splitter.sizes()))


def test_the_window_fits_a_1000_by_700_screen_with_its_title_bar(qtbot):
    window = shown_window(qtbot, SMALL_SCREEN_CLIENT.width(), SMALL_SCREEN_CLIENT.height())  # as when maximized
    assert window.size() == SMALL_SCREEN_CLIENT
    status = window.statusBar()
    assert window.rect().contains(QRect(status.mapTo(window, QPoint(0, 0)), status.size()))


def test_at_the_smallest_size_every_pane_is_usable(qtbot):
    window = shown_window(qtbot, MIN_WIDTH, MIN_HEIGHT)
    assert (window.width(), window.height()) == (MIN_WIDTH, MIN_HEIGHT)
    widths = pane_widths(window)
    assert all(widths[name] >= PANE_MIN_WIDTH[name] for name in widths), widths
    # the chat is what the window is for: the widest column, near half of the splitter
    assert widths["chat"] > max(widths["side"], widths["right"], window.history_dock.width()), widths
    assert widths["chat"] >= 0.45 * sum(widths.values()), widths
    for plot in (window.charts.alpha_plot, window.charts.tokens_plot, window.charts.speedup_plot):
        assert plot.height() >= MIN_CHART_HEIGHT and plot.width() >= PANE_MIN_WIDTH["right"] - 10
    assert window.inspector.height() >= 90
    side = window.panes["side"]
    assert not side.horizontalScrollBar().isVisible(), "the controls should fit the side pane's width"


def test_at_the_smallest_size_the_legend_and_buttons_above_and_below_the_chat_are_whole(qtbot):
    window = shown_window(qtbot, MIN_WIDTH, MIN_HEIGHT)
    window.continue_button.show()  # the row at its widest
    QApplication.processEvents()
    legend = [child for child in window.legend.findChildren(QWidget) if child.isVisible()]
    buttons = [window.new_chat_button, window.continue_button, window.stop_button, window.send_button]
    for widget in legend + buttons:
        assert widget.width() >= widget.minimumSizeHint().width(), getattr(widget, "text", lambda: widget)()


@pytest.fixture
def larger_font(qapp):
    """The application's font a point larger, as GTK's theme gives it."""
    before = QApplication.font()
    font = QApplication.font()
    font.setPointSizeF(font.pointSizeF() + 1)
    QApplication.setFont(font)
    yield
    QApplication.setFont(before)


def legend_entries_are_whole(qtbot, window: MainWindow) -> None:
    legend = window.legend
    # once the layouts have taken in the chips' texts: every chip at its size, every row inside the legend

    def laid_out() -> bool:
        return (legend.height() >= legend.heightForWidth(legend.width())
                and all(chip.size() == chip.sizeHint() for chip in legend.chips.values()))

    qtbot.waitUntil(laid_out, timeout=2000)
    placed = []
    for chip in legend.chips.values():
        assert chip.isVisible()
        text = chip.text()
        assert chip.fontMetrics().horizontalAdvance(text) <= chip.contentsRect().width(), text
        assert chip.width() >= chip.sizeHint().width(), text  # its padding too
        where = QRect(chip.mapTo(legend, QPoint(0, 0)), chip.size())
        assert legend.rect().contains(where) and not any(where.intersects(other) for other in placed), text
        placed.append(where)
    button = legend.trace_button
    assert button.width() >= button.sizeHint().width()
    assert not any(QRect(button.mapTo(legend, QPoint(0, 0)), button.size()).intersects(chip) for chip in placed)


@pytest.mark.parametrize("larger", [False, True])
def test_at_the_smallest_size_every_legend_entry_shows_its_text_whole(qtbot, request, larger):
    if larger:
        request.getfixturevalue("larger_font")
    window = shown_window(qtbot, MIN_WIDTH, MIN_HEIGHT)
    window.legend.set_greedy(True)
    window.legend.set_greedy(False)  # greedy and sampled replies on screen: the blue chip names both corrections
    legend_entries_are_whole(qtbot, window)


def test_on_a_1000_by_700_screen_the_model_pair_and_decoding_controls_are_whole_without_scrolling(qtbot):
    window = shown_window(qtbot, SMALL_SCREEN_CLIENT.width(), SMALL_SCREEN_CLIENT.height())
    side = window.panes["side"]
    assert side.verticalScrollBar().maximum() == 0
    for group in (window.picker, window.controls):  # compare with AR, the last row, included
        assert side.viewport().rect().contains(QRect(group.mapTo(side.viewport(), QPoint(0, 0)), group.size()))


def test_with_a_larger_font_the_controls_still_fit_the_side_panes_width(qtbot, larger_font):
    window = shown_window(qtbot, MIN_WIDTH, MIN_HEIGHT)
    side = window.panes["side"]
    assert side.verticalScrollBar().isVisible()  # the controls scroll in the smallest window
    assert not side.horizontalScrollBar().isVisible()


def test_the_window_cannot_shrink_below_its_smallest_size(qtbot):
    window = shown_window(qtbot, 800, 500)
    assert window.width() >= MIN_WIDTH and window.height() >= MIN_HEIGHT


def test_handles_move_at_the_smallest_size(qtbot):
    window = shown_window(qtbot, MIN_WIDTH, MIN_HEIGHT)
    before = pane_widths(window)
    handle = window.splitter.handle(2)  # between the chat and the right pane: widen the charts
    window.splitter.moveSplitter(handle.pos().x() - 15, 2)
    after = pane_widths(window)
    assert after["right"] > before["right"] and after["chat"] >= PANE_MIN_WIDTH["chat"]


def test_a_hidden_pane_comes_back_at_a_sensible_width_and_a_bigger_window_is_shared(qtbot):
    window = shown_window(qtbot, 1600, 1000)
    widths = pane_widths(window)
    assert widths["right"] > PANE_WIDTH["right"] * 0.8  # not everything went to the chat
    window.pane_actions["right"].trigger()
    assert window.panes["right"].isHidden()
    window.pane_actions["right"].trigger()
    QApplication.processEvents()
    assert abs(pane_widths(window)["right"] - widths["right"]) <= 2  # back as a fresh window has it
    window.resize(MIN_WIDTH, MIN_HEIGHT)
    QApplication.processEvents()
    small = pane_widths(window)
    assert all(small[name] >= PANE_MIN_WIDTH[name] for name in small), small


def test_at_the_smallest_size_a_hidden_pane_comes_back_without_squeezing_the_chat(qtbot):
    window = shown_window(qtbot, MIN_WIDTH, MIN_HEIGHT)
    before = pane_widths(window)
    window.pane_actions["side"].trigger()  # Ctrl+1
    QApplication.processEvents()
    assert window.panes["side"].isHidden() and pane_widths(window)["chat"] > before["chat"] + PANE_MIN_WIDTH["side"]
    window.pane_actions["side"].trigger()
    QApplication.processEvents()
    after = pane_widths(window)
    assert after["side"] == PANE_MIN_WIDTH["side"] and abs(after["chat"] - before["chat"]) <= 2, (before, after)


def test_the_gamma_slider_stays_put_when_sampling_is_chosen(qtbot):
    window = shown_window(qtbot, MIN_WIDTH, MIN_HEIGHT)
    controls = window.controls
    where = controls.gamma.mapTo(window, QPoint(0, 0))
    controls.sampling.setChecked(True)
    QApplication.processEvents()
    assert controls.gamma.mapTo(window, QPoint(0, 0)) == where
    assert controls.temperature.isEnabled()
    controls.greedy.setChecked(True)
    assert not controls.temperature.isEnabled()


def test_device_and_dtype_boxes_offer_only_what_the_machine_has(qtbot):
    window = shown_window(qtbot, MIN_WIDTH, MIN_HEIGHT, devices=("auto", "cpu"), dtypes=("auto", "float32"),
                          offline={"embedded": True, "qwen3-4b": False})
    picker = window.picker
    assert [picker.device.itemText(i) for i in range(picker.device.count())] == ["auto", "cpu"]
    assert [picker.dtype.itemText(i) for i in range(picker.dtype.count())] == ["auto", "float32"]
    names = [picker.preset.itemText(i) for i in range(picker.preset.count())]
    assert "embedded — on this machine" in names and "qwen3-4b — needs a download" in names
    # choosing a preset still fills in its models
    picker.preset.setCurrentIndex(picker.preset.findData("qwen3-4b"))
    assert picker.target.text() == PRESETS["qwen3-4b"].target


def test_the_model_panel_asks_for_a_gguf_targets_weights(qtbot):
    window = shown_window(qtbot, MIN_WIDTH, MIN_HEIGHT)
    picker = window.picker
    assert picker.weights.currentText() == "auto"
    picker.weights.setCurrentText("native")
    with qtbot.waitSignal(window.load_requested, timeout=1000) as asked:
        picker.load_button.click()
    assert asked.args == [picker.target.text(), picker.draft.text(), "auto", "auto", "native"]
    target = ModelInfo("embedded", "/m/t.gguf", 135, 49152, weights="native")
    window.on_pair_loaded(PairInfo(target, None, "cpu", "bfloat16"))
    assert window.pair_label.text().endswith("bfloat16 · 4-bit GGUF target")
    assert "set weights to dtype" in window.statusBar().currentMessage()  # how to change it, where it is seen


def drawn_labels(plot, side: str = "bottom") -> dict[str, QRect]:
    """An axis' tick labels pyqtgraph draws, each with its place in the chart widget."""
    axis = plot.getAxis(side)
    image = QImage(1, 1, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    _, _, texts = axis.generateDrawSpecs(painter)
    painter.end()
    return {text: plot.mapFromScene(axis.mapRectToScene(rect)).boundingRect() for rect, _, text in texts}


@pytest.mark.parametrize("size", [(MIN_WIDTH, MIN_HEIGHT), (1600, 1000)])
def test_the_charts_axes_end_inside_the_chart_with_their_last_labels(qtbot, size):
    window = shown_window(qtbot, *size)
    for plot in (window.charts.alpha_plot, window.charts.tokens_plot, window.charts.speedup_plot):
        last = f"{plot.viewRange()[0][1]:g}"
        labels = drawn_labels(plot)
        assert last in labels, f"{window.charts.headers[plot].title}: the label at the axis end is hidden ({labels})"
        assert plot.viewport().rect().contains(labels[last])
        # the y axis' top label (1.0 on the α chart's fixed range) is whole too, not cut by the header above
        for text, rect in drawn_labels(plot, "left").items():
            assert plot.viewport().rect().contains(rect), f"{window.charts.headers[plot].title}: {text} cut off"


@pytest.mark.parametrize("size", [(MIN_WIDTH, MIN_HEIGHT), (1600, 1000)])
def test_chart_legends_name_every_line_whole_and_cover_no_data(qtbot, size):
    window = shown_window(qtbot, *size)
    charts = window.charts
    charts.show_measured_speedup(1.95)
    QApplication.processEvents()
    for plot, header in charts.headers.items():
        legend = QTextDocumentFragment.fromHtml(header.text()).toPlainText()
        for item in plot.plotItem.listDataItems():
            if item is not charts.measured:  # its entry, with its value, is asserted below
                assert item.name() in legend, (header.title, item.name(), legend)
        assert plot.plotItem.legend is None  # nothing drawn over the curves
        assert header.isVisible() and not header.geometry().intersects(plot.geometry())
        assert header.height() >= header.heightForWidth(header.width()), f"{header.title}: legend cut at {size}"
        assert plot.height() >= MIN_CHART_HEIGHT
        assert whole_in_view(plot), f"{header.title}: cut off at {size}"
    speedup_legend = QTextDocumentFragment.fromHtml(charts.headers[charts.speedup_plot].text()).toPlainText()
    assert "measured 1.95×" in speedup_legend  # the red line's entry, with its value
    charts.start_reply()  # a new reply has no measurement yet: neither its line nor its entry
    charts.refresh()
    assert charts.measured_spans() == [] and "measured" not in charts.headers[charts.speedup_plot].text()


def test_at_the_smallest_size_the_ar_comparison_progress_shows_its_text_whole(qtbot):
    window = shown_window(qtbot, MIN_WIDTH, MIN_HEIGHT)
    window.pair_label.setText("HuggingFaceTB/SmolLM2-1.7B-Instruct + HuggingFaceTB/SmolLM2-135M-Instruct · cpu · "
                              "bfloat16")
    window.reply_label.setText("last reply: 120 tokens in 37 rounds · 258.1 tok/s · α 0.71 · 3.24 tok/round · "
                               "1.22× vs AR, drawn (machine busy — not a fair number)")
    window.status_bar.on_comparison_progressed(1234, 1)
    QApplication.processEvents()
    bar = window.comparison_progress
    status = window.statusBar()
    assert bar.isVisible() and "1234" in bar.text()
    assert bar.width() >= bar.fontMetrics().horizontalAdvance(bar.text()) + 8
    placed = QRect(bar.mapTo(status, QPoint(0, 0)), bar.size())
    assert status.rect().contains(placed)
    assert status.rect().right() - placed.right() >= STATUS_RIGHT_MARGIN  # clear of the window's edge
    for label in (window.pair_label, window.reply_label):  # the labels give up width, not the bar
        assert label.geometry().right() < placed.left()
    assert window.reply_label.toolTip() == window.reply_label.text()  # and still say it all


def test_at_the_smallest_size_the_preset_box_shows_its_preset_whole(qtbot):
    window = shown_window(qtbot, MIN_WIDTH, MIN_HEIGHT, offline={name: False for name in PRESETS})
    box = window.picker.preset
    for index in range(box.count()):
        box.setCurrentIndex(index)
        option = QStyleOptionComboBox()
        box.initStyleOption(option)  # what the box paints
        field = box.style().subControlRect(QStyle.ComplexControl.CC_ComboBox, option,
                                           QStyle.SubControl.SC_ComboBoxEditField, box)
        assert box.fontMetrics().horizontalAdvance(option.currentText) <= field.width(), option.currentText
        assert option.currentText == box.currentData()  # the name, without "— needs a download"


def test_a_window_widened_with_the_charts_hidden_widens_only_the_chat(qtbot):
    window = shown_window(qtbot, MIN_WIDTH, MIN_HEIGHT)
    window.pane_actions["right"].trigger()  # Ctrl+2
    window.resize(1600, 1000)
    QApplication.processEvents()
    assert pane_widths(window)["side"] <= SIDE_MAX_WIDTH
    window.pane_actions["right"].trigger()
    QApplication.processEvents()
    widths = pane_widths(window)
    assert widths["side"] <= SIDE_MAX_WIDTH and widths["chat"] > widths["right"] >= PANE_MIN_WIDTH["right"]


def inspecting_a_long_rejection(qtbot, size):
    """The window at `size`, its inspector on a rejected draft with the longest page, and where the page's second
    paragraph (why the token has its fate) ends."""
    window = shown_window(qtbot, *size)
    inspector, label = window.inspector, window.inspector.label
    rejected = round_spans(rejected_round(0, ["Hello"], "‹e4 bd›", "你", greedy=False))[1]
    inspector.show_span(rejected)
    QApplication.processEvents()
    document = QTextDocument()
    document.setDefaultFont(label.font())
    document.setHtml(span_html(rejected))
    document.setTextWidth(label.contentsRect().width())
    layout = document.documentLayout()
    return window, [layout.blockBoundingRect(document.findBlockByNumber(n)).bottom() + label.margin() for n in (0, 1)]


@pytest.mark.parametrize("size", [(MIN_WIDTH, MIN_HEIGHT), (SMALL_SCREEN_CLIENT.width(), SMALL_SCREEN_CLIENT.height())])
def test_the_inspector_wraps_a_token_inside_its_pane_and_scrolls_the_rest(qtbot, size):
    window, _ = inspecting_a_long_rejection(qtbot, size)
    inspector, label = window.inspector, window.inspector.label
    viewport = inspector.viewport()
    assert viewport.height() >= MIN_LINES * inspector.fontMetrics().lineSpacing()
    # lines wrap inside the pane, nothing is cut at its side or bottom: what does not fit scrolls
    assert label.width() <= viewport.width() and inspector.horizontalScrollBar().maximum() == 0
    assert label.height() >= label.heightForWidth(label.width())
    assert inspector.verticalScrollBar().maximum() == label.height() - viewport.height()


def test_in_the_smallest_window_the_inspector_shows_a_tokens_header_unscrolled(qtbot):
    window, (header, _) = inspecting_a_long_rejection(qtbot, (MIN_WIDTH, MIN_HEIGHT))
    assert header <= window.inspector.viewport().height()


def test_on_a_1000_by_700_screen_the_inspector_shows_why_a_token_has_its_fate_unscrolled(qtbot):
    window, (_, why) = inspecting_a_long_rejection(qtbot, (SMALL_SCREEN_CLIENT.width(), SMALL_SCREEN_CLIENT.height()))
    assert why <= window.inspector.viewport().height()


def test_a_first_start_fits_the_window_to_the_screens_free_area(qtbot):
    window = MainWindow(PRESETS)  # no saved geometry: the default size, where the screen holds it
    qtbot.addWidget(window)
    free = window.screen().availableGeometry()
    assert free.height() < 900  # the offscreen screen is smaller than the default size
    assert window.height() == max(free.height(), MIN_HEIGHT) and window.width() <= 1400


def test_a_window_larger_than_the_screen_shrinks_to_fit_it_with_its_frame():
    framed = QRect(QPoint(0, 0), QSize(1400, 900).grownBy(OPENBOX_FRAME))
    fitted = fitted_frame(framed, OPENBOX_FRAME, SMALL_SCREEN, QSize(MIN_WIDTH, MIN_HEIGHT))
    assert fitted == SMALL_SCREEN  # title bar, borders and the client area below them, the status bar included


def test_a_window_that_fits_stays_where_and_as_large_as_it_is():
    framed = QRect(QPoint(10, 10), QSize(MIN_WIDTH, MIN_HEIGHT).grownBy(OPENBOX_FRAME))
    assert fitted_frame(framed, OPENBOX_FRAME, SMALL_SCREEN, QSize(MIN_WIDTH, MIN_HEIGHT)) == framed


def test_a_window_saved_off_the_screen_comes_back_onto_it():
    framed = QRect(QPoint(1500, 300), QSize(800, 500).grownBy(OPENBOX_FRAME))
    fitted = fitted_frame(framed, OPENBOX_FRAME, SMALL_SCREEN, QSize(MIN_WIDTH, MIN_HEIGHT))
    assert fitted.topLeft() == SMALL_SCREEN.topLeft()
    assert fitted.size().shrunkBy(OPENBOX_FRAME) == QSize(MIN_WIDTH, MIN_HEIGHT)  # never below the smallest size


def test_fitting_a_window_that_fits_does_not_move_it(qtbot, monkeypatch):
    """Before the window manager frames a restored window, its frame is its client area: moving the frame there
    shifted it down by its title bar at every start."""
    window = MainWindow(PRESETS)
    qtbot.addWidget(window)
    window.resize(MIN_WIDTH, MIN_HEIGHT)
    window.move(QPoint(1, 25))
    moves = []
    monkeypatch.setattr(window, "move", lambda *where: moves.append(where))
    window.screen_fit.fit()
    assert moves == []
