"""What every test shares: what a load keeps per model file (a GGUF's tokenizer and prepared weights, a pair's
measured costs) goes to the test's own folder, for the programs a test starts too, not the user's cache."""
import pytest


@pytest.fixture(autouse=True)
def _per_test_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "cache"))
