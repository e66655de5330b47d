"""What the controls and the legend show as the decoding mode changes: γ rests with the other speculative controls in
plain AR, and the legend's blue chip names the correction of every mode its replies used."""
from __future__ import annotations

from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication

from engine.events import DecodeSettings, Fate, Mode
from tests.ui.helpers import shown_window
from ui.pair.controls import DecodingControls
from words.records import ReplyRequest, TurnStarted


def gamma_row(controls: DecodingControls) -> list[bool]:
    """Whether the slider, its value and the recommendation under it are enabled."""
    return [w.isEnabled() for w in (controls.gamma, controls.gamma_label, controls.recommended)]


def darkest(widget) -> int:
    """The lightness (0-255) of the darkest pixel the widget draws: its text's."""
    image = widget.grab().toImage()
    return min(QColor(image.pixel(x, y)).lightness() for x in range(image.width()) for y in range(image.height()))


def test_in_plain_ar_gammas_value_and_recommendation_rest_with_its_slider(qtbot):
    controls = DecodingControls()
    qtbot.addWidget(controls)
    assert gamma_row(controls) == [True, True, True]
    controls.mode.setCurrentIndex(controls.mode.findData("ar"))
    assert gamma_row(controls) == [False, False, False]
    assert not controls.draft_length.isEnabled() and not controls.lookup.isEnabled()  # as they rest
    controls.mode.setCurrentIndex(controls.mode.findData("spec"))
    assert gamma_row(controls) == [True, True, True]


def test_in_plain_ar_gammas_value_and_recommendation_are_drawn_grey_as_the_resting_controls(qtbot):
    controls = DecodingControls()
    qtbot.addWidget(controls)
    controls.show_recommendation("recommended γ ≤ 3 (predicted 1.40×, draft model)")
    labels = (controls.gamma_label, controls.recommended)
    assert all(darkest(label) < 100 for label in labels)
    controls.mode.setCurrentIndex(controls.mode.findData("ar"))
    resting = darkest(controls.draft_length)
    assert all(darkest(label) >= resting - 10 for label in labels), (resting, [darkest(label) for label in labels])


def start_reply(window, settings: DecodeSettings) -> None:
    window.on_turn_started(TurnStarted(0, ReplyRequest(({"role": "user", "content": "hi"},), settings), live=True))


def test_the_legend_names_the_corrections_of_the_replies_on_screen(qtbot):
    window = shown_window(qtbot, 1000, 700)
    window.controls.greedy.setChecked(True)
    start_reply(window, DecodeSettings(greedy=True))
    chip = window.legend.chips[Fate.RESAMPLED]
    assert chip.text() == "corrected"
    window.controls.sampling.setChecked(True)
    assert chip.text() == "corrected"  # the switch alone put no sampled reply on screen
    start_reply(window, DecodeSettings(greedy=False, temperature=0.7))
    assert chip.text() == "corrected / resampled"
    assert "greedy" in chip.toolTip() and "norm(max(0, p − q))" in chip.toolTip()
    legend = window.legend  # whole at the smallest window, in the row's height
    assert legend.minimumSizeHint().width() <= legend.width() and chip.sizeHint().height() <= legend.height()
    window.on_conversation_cleared()  # a new chat: what the next reply will do
    assert chip.text() == "resampled"
    start_reply(window, DecodeSettings(greedy=True))  # a reopened greedy chat replayed, the controls still sampling
    assert chip.text() == "corrected"


def test_a_plain_ar_reply_leaves_the_blue_chip_naming_the_speculative_replies(qtbot):
    sampling = DecodeSettings(greedy=False, temperature=0.7)
    window = shown_window(qtbot, 1000, 700, defaults=sampling)
    start_reply(window, sampling)
    start_reply(window, DecodeSettings(mode=Mode.AR, greedy=True))  # plain AR: no rejections, nothing corrected
    assert window.legend.chips[Fate.RESAMPLED].text() == "resampled"


def test_a_window_of_sampled_replies_names_its_corrections_resampled_alone(qtbot):
    sampling = DecodeSettings(greedy=False, temperature=0.7)
    window = shown_window(qtbot, 1000, 700, defaults=sampling)
    start_reply(window, sampling)
    assert window.legend.chips[Fate.RESAMPLED].text() == "resampled"


def test_a_recommendation_that_wraps_moves_no_control_below_it(qtbot):
    """At 1600x1000 the first recommendation takes one line and a later one two: "compare with AR" stays in place."""
    window = shown_window(qtbot, 1600, 1000)
    controls = window.controls
    controls.show_recommendation("recommended γ: after a speculative reply")
    before = controls.compare_ar.mapTo(window, controls.compare_ar.rect().topLeft())
    controls.show_recommendation("recommended γ ≤ 12 (predicted 1.40×, draft model + copying)")
    QApplication.processEvents()
    recommended = controls.recommended
    assert recommended.heightForWidth(recommended.width()) > recommended.fontMetrics().lineSpacing()  # it wraps
    assert recommended.height() >= recommended.heightForWidth(recommended.width())  # and is not cut
    assert controls.compare_ar.mapTo(window, controls.compare_ar.rect().topLeft()) == before
