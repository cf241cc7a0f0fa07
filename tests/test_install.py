"""The installer's reading of pip's settings (.ci/pip_to_uv.py, run by ``make install``)."""

import doctest
import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "pip_to_uv.py"


@pytest.fixture(scope="module")
def pip_to_uv():
    spec = importlib.util.spec_from_file_location("pip_to_uv", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_doctests(pip_to_uv):
    assert doctest.testmod(pip_to_uv).failed == 0


def test_the_setting_pip_obeys_wins_and_lists_split(pip_to_uv):
    listing = "\n".join(
        [
            ":env:.find-links='/opt/wheels /srv/more'",
            "global.find-links='/elsewhere'",
            "install.constraint='/etc/c.txt'",
            "global.constraint='/etc/old.txt'",
            "global.cert='/etc/ssl/certs/ca.crt'",
            "global.timeout='60'",
            "broken line without an equals sign",
        ]
    )
    assert pip_to_uv.uv_options(listing) == [
        "--find-links",
        "/opt/wheels",
        "--find-links",
        "/srv/more",
        "--constraint",
        "/etc/c.txt",
    ]


def test_nothing_configured_means_no_options(pip_to_uv):
    assert pip_to_uv.uv_options("") == []
    assert pip_to_uv.uv_options("global.no-index='false'") == []
