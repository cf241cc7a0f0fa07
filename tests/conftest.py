import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# onnxruntime writes a telemetry database under ~/.cache/Microsoft when it is imported; the tests that
# import it directly (pytest.importorskip) must not write outside the cache either (memlib sets the same)
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")


def pytest_collection_modifyitems(config, items):
    """Mark every notebook cell nbval collects (``make test``: ``build/nb/*.ipynb``) ``slow`` and ``integration``.

    A notebook's cells run in one kernel, in order, so ``-m "not slow"`` leaves out whole notebooks.
    """
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def fake_model(monkeypatch):
    """memlib's sentence model replaced by :class:`fixtures.FakeModel` for the test."""
    from fixtures import FakeModel
    from memlib import embeddings

    model = FakeModel()
    monkeypatch.setattr(embeddings, "load_model", lambda *a, **k: model)
    return model
