"""What every test shares: what a load keeps per model file (a GGUF's tokenizer and prepared weights, a pair's
measured costs) goes to a folder of the test's own, for the programs a test starts too, not the user's cache. It
sits beside tmp_path, not in it, so a test may check that tmp_path holds only what the test wrote."""
import pytest


@pytest.fixture(autouse=True)
def _per_test_cache(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
