"""The analysis pane: the live charts, the why-γ tab and a remote engine's report."""
