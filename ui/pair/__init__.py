"""The Model pair pane: the pickers, decoding controls, model boxes and the Find best draft ranking."""
