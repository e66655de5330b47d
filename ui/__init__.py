"""PySide6 widgets and pyqtgraph charts; they receive engine.events dataclasses and never import torch."""
