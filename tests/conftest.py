"""What every test shares: the caches a load writes per model file (a GGUF's prepared weights, a pair's measured
costs) go to the test's own folder, not the user's cache."""
import pytest

from engine.decoding.decoder import Decoder
from engine.models import gguf_native


@pytest.fixture(autouse=True)
def _per_test_caches(monkeypatch, tmp_path):
    prepared = gguf_native.prepared_path
    monkeypatch.setattr(gguf_native, "prepared_path",
                        lambda path, compacted: tmp_path / "prepared" / prepared(path, compacted).name)
    costs = Decoder.costs_file
    monkeypatch.setattr(Decoder, "costs_file",
                        lambda self: None if costs(self) is None else tmp_path / "costs" / costs(self).name)
