"""PySide6 widgets and pyqtgraph charts, one folder per feature (chat, compare, pair, why, window); they receive
dataclasses from app/ and words/ and never import torch."""
