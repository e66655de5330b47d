"""What outlasts a session besides the chats: decoding settings, the model pair, the system prompt, the reading view
(clean or trace), the window layout (geometry, the history dock, splitter positions, hidden panes) and the folder
of the last export, kept with QSettings."""
from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings, QStandardPaths
from PySide6.QtWidgets import QSplitter

from engine.events import DecodeSettings, Mode

DECODING_KEYS = ("mode", "gamma", "greedy", "temperature", "top_p", "top_k", "cost_aware", "stop_below",
                 "max_new_tokens", "seed", "lookup", "stop_repeating")


EXPORT_FOLDER = "export/folder"


def export_folder(preferences: QSettings | None) -> Path:
    """Where an export dialog opens: the last export's folder, else the user's Documents folder (the working
    directory is wherever the app happened to be started from)."""
    last = preferences.value(EXPORT_FOLDER, "", type=str) if preferences is not None else ""
    if last and Path(last).is_dir():
        return Path(last)
    return _standard_folder(QStandardPaths.StandardLocation.DocumentsLocation)


def _standard_folder(location: QStandardPaths.StandardLocation) -> Path:
    """The user's folder for `location` where it exists, else home: Qt names ~/Documents or ~/Downloads even where
    it does not exist, and a dialog then opens in the working directory."""
    folder = QStandardPaths.writableLocation(location)
    return Path(folder) if folder and Path(folder).is_dir() else Path.home()


def models_folder(current: str) -> Path:
    """Where a dialog that picks a model opens: the folder of the model named now (`current`, a path), else the
    user's Downloads folder (where a downloaded GGUF lands), else home; never the working directory."""
    named = Path(current).expanduser() if current else None
    if named is not None and named.is_absolute():
        folder = named if named.is_dir() else named.parent
        if folder.is_dir():
            return folder
    return _standard_folder(QStandardPaths.StandardLocation.DownloadLocation)


def remember_export_folder(preferences: QSettings | None, written: Path) -> None:
    if preferences is not None:
        preferences.setValue(EXPORT_FOLDER, str(written.parent))


def apply_settings(controls, settings: DecodeSettings) -> None:
    """Show `settings` in the decoding controls (the inverse of `controls.settings()`)."""
    controls.mode.setCurrentIndex(max(0, controls.mode.findData(Mode(settings.mode).value)))
    (controls.greedy if settings.greedy else controls.sampling).setChecked(True)
    controls.gamma.setValue(settings.gamma)
    controls.temperature.setValue(settings.temperature)
    controls.top_p.setValue(settings.top_p)
    controls.top_k.setValue(settings.top_k)
    controls.draft_length.setCurrentIndex(controls.draft_length.findData(settings.cost_aware))
    controls.stop_below.setValue(settings.stop_below)
    controls.max_new_tokens.setValue(settings.max_new_tokens)
    controls.seed.setValue(settings.seed)
    controls.lookup.setChecked(settings.lookup)
    controls.stop_repeating.setChecked(settings.stop_repeating)


def apply_pair(picker, target: str, draft: str | None, device: str, dtype: str, weights: str) -> None:
    """Show a model pair in the picker, the preset box included (it is not loaded until asked)."""
    picker.target.setText(target)
    picker.draft.setText(draft or "")
    picker.device.setCurrentText(device)
    picker.dtype.setCurrentText(dtype)
    picker.weights.setCurrentText(weights)
    picker.draft.textEdited.emit(picker.draft.text())  # the preset box follows edits, so it shows the pair


def _splitters(window) -> list[QSplitter]:
    # In creation order, which is stable from one run to the next; names would break when the layout is edited.
    return window.findChildren(QSplitter)


def _stored_type(default) -> type:
    """How QSettings reads a setting back: a str-enum (the mode) as its string value."""
    return str if isinstance(default, str) else type(default)


def save_preferences(preferences: QSettings, window) -> None:
    settings = window.controls.settings()
    for key in DECODING_KEYS:
        value = getattr(settings, key)
        preferences.setValue(f"decoding/{key}", value.value if isinstance(value, Enum) else value)
    preferences.setValue("decoding/compare_ar", window.controls.compare_ar.isChecked())
    picker = window.picker
    for key, value in (("target", picker.target.text()), ("draft", picker.draft.text()),
                       ("device", picker.device.currentText()), ("dtype", picker.dtype.currentText()),
                       ("weights", picker.weights.currentText())):
        preferences.setValue(f"pair/{key}", value)
    preferences.setValue("chat/system_prompt", window.system_prompt)
    preferences.setValue("view/trace", window.legend.trace_action.isChecked())
    preferences.setValue("window/geometry", window.saveGeometry())
    preferences.setValue("window/docks", window.saveState())
    for i, splitter in enumerate(_splitters(window)):
        preferences.setValue(f"window/splitter{i}", splitter.saveState())
    for name, action in window.pane_actions.items():
        preferences.setValue(f"window/show_{name}", action.isChecked())
    preferences.sync()


def _saved_state(preferences: QSettings, key: str) -> QByteArray | None:
    """A window state kept under `key`, or None where there is none or it is not one (the settings are the user's
    file, and other versions write it): that value is dropped, and one line says so."""
    value = preferences.value(key)
    if value is None or isinstance(value, QByteArray):
        return value
    if isinstance(value, bytes):
        return QByteArray(value)
    print(f"specdec-studio: ignored the saved {key} in {preferences.fileName()}: not a window state", file=sys.stderr)
    preferences.remove(key)
    return None


def restore_preferences(preferences: QSettings, window) -> None:
    """Apply what `save_preferences` kept, before the window is first shown."""
    if preferences.contains("decoding/gamma"):
        defaults = window.controls.settings()
        try:
            settings = DecodeSettings(**{
                key: preferences.value(f"decoding/{key}", getattr(defaults, key), type=_stored_type(getattr(defaults, key)))
                for key in DECODING_KEYS})
        except ValueError:  # edited by hand or from another version: keep the defaults
            settings = defaults
        apply_settings(window.controls, settings)
        window.controls.compare_ar.setChecked(preferences.value("decoding/compare_ar", False, type=bool))
    if preferences.contains("pair/target"):
        apply_pair(window.picker, preferences.value("pair/target", type=str),
                   preferences.value("pair/draft", "", type=str), preferences.value("pair/device", "auto", type=str),
                   preferences.value("pair/dtype", "auto", type=str), preferences.value("pair/weights", "auto", type=str))
    window.system_prompt = preferences.value("chat/system_prompt", "", type=str)
    window.legend.trace_action.setChecked(preferences.value("view/trace", False, type=bool))
    if (geometry := _saved_state(preferences, "window/geometry")) is not None:
        window.restoreGeometry(geometry)
    if (docks := _saved_state(preferences, "window/docks")) is not None:
        window.restoreState(docks)
    for i, splitter in enumerate(_splitters(window)):
        if (state := _saved_state(preferences, f"window/splitter{i}")) is not None:
            splitter.restoreState(state)
    for name, action in window.pane_actions.items():
        shown = preferences.value(f"window/show_{name}", True, type=bool)
        # Not through the action's slot: it sizes a pane from the laid-out window, which is not shown yet.
        action.blockSignals(True)
        action.setChecked(shown)
        action.blockSignals(False)
        window.panes[name].setVisible(shown)
