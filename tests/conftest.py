import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# onnxruntime writes a telemetry database under ~/.cache/Microsoft when it is imported; the tests that
# import it directly (pytest.importorskip) must not write outside the cache either (memlib sets the same)
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")


@pytest.fixture
def fake_model(monkeypatch):
    """memlib's sentence model replaced by :class:`fixtures.FakeModel` for the test."""
    from fixtures import FakeModel
    from memlib import embeddings

    model = FakeModel()
    monkeypatch.setattr(embeddings, "load_model", lambda *a, **k: model)
    return model
