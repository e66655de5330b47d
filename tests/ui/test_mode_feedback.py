"""What the controls show as the decoding mode changes: γ rests with the other speculative controls in plain AR."""
from __future__ import annotations

from ui.controls import DecodingControls


def gamma_row(controls: DecodingControls) -> list[bool]:
    """Whether the slider, its value and the recommendation under it are enabled."""
    return [w.isEnabled() for w in (controls.gamma, controls.gamma_label, controls.recommended)]


def test_in_plain_ar_gammas_value_and_recommendation_rest_with_its_slider(qtbot):
    controls = DecodingControls()
    qtbot.addWidget(controls)
    assert gamma_row(controls) == [True, True, True]
    controls.mode.setCurrentIndex(controls.mode.findData("ar"))
    assert gamma_row(controls) == [False, False, False]
    assert not controls.draft_length.isEnabled() and not controls.lookup.isEnabled()  # as they rest
    controls.mode.setCurrentIndex(controls.mode.findData("spec"))
    assert gamma_row(controls) == [True, True, True]
