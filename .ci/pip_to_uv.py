"""Print the uv options that say where pip, as configured here, finds packages (``make install`` runs uv).

uv installs a fresh venv in seconds where pip takes minutes, but reads none of pip's settings: a machine
whose pip looks in a local folder of wheels (``find-links``), an extra index or a constraints file would
get other packages from uv. This reads pip's own view of its settings (``pip config list``: its config
files and its ``PIP_*`` variables) and prints the same places as uv options, one per line, for ``xargs``:
``index-url``, ``extra-index-url``, ``find-links``, ``constraint`` and ``no-index``. Where an option is set
in several places, the one pip obeys wins: an environment variable over an ``[install]`` section over
``[global]``. Not ``cert``: uv reads ``SSL_CERT_FILE``. The standard library only: it runs before memlib
is installed.

    python3 .ci/pip_to_uv.py [PYTHON]    # PYTHON: the interpreter whose pip to ask (default: this one)
"""

from __future__ import annotations

import shlex
import subprocess
import sys

#: pip's options that say where packages come from, and the uv option of each (pip's lists are space-separated).
OPTIONS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
    "no-index": "--no-index",
}
#: Where pip reads a setting, weakest first.
SECTIONS = ("global", "install", ":env:")


def uv_options(listing: str) -> list[str]:
    r"""Return uv's options for the output of ``pip config list``.

    >>> uv_options("global.find-links='/opt/wheels'\n:env:.index-url='https://m/simple'\nglobal.cert='/c'")
    ['--index-url', 'https://m/simple', '--find-links', '/opt/wheels']
    >>> uv_options("global.extra-index-url='a b'\ninstall.extra-index-url='c'")
    ['--extra-index-url', 'c']
    >>> uv_options("global.no-index='true'")
    ['--no-index']
    """
    found: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        key, sep, value = line.partition("=")
        section, _, name = key.strip().rpartition(".")
        if not sep or name not in OPTIONS or section not in SECTIONS:
            continue
        rank = SECTIONS.index(section)
        if name not in found or rank >= found[name][0]:
            found[name] = (rank, " ".join(shlex.split(value)))
    out = []
    for name, flag in OPTIONS.items():
        if name not in found:
            continue
        value = found[name][1]
        if name == "no-index":
            out += [flag] if value.lower() in ("1", "true", "yes", "on") else []
        else:
            out += [x for v in value.split() for x in (flag, v)]
    return out


def main(argv: list[str]) -> int:
    """Print the options for the pip of ``argv[1]`` (else this interpreter's), one per line."""
    python = argv[1] if len(argv) > 1 else sys.executable
    listing = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True).stdout
    print("\n".join(uv_options(listing)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
