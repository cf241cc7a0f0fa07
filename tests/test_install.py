"""The installer's reading of pip's settings (.ci/pip_to_uv.py, run by ``make install``)."""

import doctest
import importlib.util
import subprocess
import sys
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


def test_the_setting_pip_obeys_wins_and_lists_split(pip_to_uv, tmp_path):
    (tmp_path / "wheels").mkdir()
    (tmp_path / "more").mkdir()
    listing = "\n".join(
        [
            f":env:.find-links='{tmp_path / 'wheels'} {tmp_path / 'more'}'",
            "global.find-links='/elsewhere'",
            "install.constraint='/etc/c.txt'",
            "global.constraint='/etc/old.txt'",
            "global.cert='/etc/ssl/certs/ca.crt'",
            "global.timeout='60'",
            ":env:.extra-index-url=''",  # empty: pip ignores it, so the file's value stands
            "global.extra-index-url='\\nfile:///a/simple\\nhttps://b/simple'",  # a multi-line value, as pip prints it
            "install.pypi-url='https://mirror/simple'",  # pip's alias of index-url
            "broken line without an equals sign",
        ]
    )
    assert pip_to_uv.uv_options(listing) == [
        *("--index-url", "https://mirror/simple"),
        *("--extra-index-url", "file:///a/simple", "--extra-index-url", "https://b/simple"),
        *("--find-links", str(tmp_path / "wheels"), "--find-links", str(tmp_path / "more")),
        *("--constraint", "/etc/c.txt"),
    ]


def test_a_missing_find_links_folder_is_left_out_with_a_warning_and_home_is_expanded(pip_to_uv, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "wh").mkdir()
    said = []
    listing = f"global.find-links='~/wh {tmp_path / 'gone'} https://host/links'"
    assert pip_to_uv.uv_options(listing, warn=said.append) == [
        *("--find-links", str(tmp_path / "wh"), "--find-links", "https://host/links")
    ]
    assert said == [f"pip's find-links {str(tmp_path / 'gone')!r} does not exist: left out"]


def test_nothing_configured_prints_nothing_and_a_broken_pip_fails(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": "/dev/null", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and done.stdout == ""  # no empty line: the Makefile would pass uv an empty argument
    done = subprocess.run([sys.executable, SCRIPT, str(tmp_path / "no-python")], capture_output=True, text=True)
    assert done.returncode == 1 and done.stdout == ""
    assert f"pip_to_uv: cannot run {tmp_path / 'no-python'}" in done.stderr


def test_yes_no_settings_read_as_pip_reads_them(pip_to_uv):
    for yes in ("1", "y", "yes", "t", "true", "on", "True"):
        assert pip_to_uv.uv_options(f"global.no-index='{yes}'") == ["--no-index"], yes
    for no in ("0", "n", "false", "off"):
        assert pip_to_uv.uv_options(f"global.no-index='{no}'") == [], no
