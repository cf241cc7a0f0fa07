"""Print the uv options that say where pip, as configured here, finds packages (``make install`` runs uv).

uv installs a fresh venv in seconds where pip takes minutes, but reads none of pip's settings: a machine
whose pip looks in a local folder of wheels (``find-links``), an extra index or a constraints file would
get other packages from uv. This reads pip's own view of its settings (``pip config list``: its config
files and its ``PIP_*`` variables) and prints the same places as uv options, one per line: ``index-url``
(or its alias ``pypi-url``), ``extra-index-url``, ``find-links``, ``constraint`` and ``no-index``. Where an
option is set in several places, the one pip obeys wins: an environment variable over an ``[install]``
section over ``[global]``; an empty value is ignored, as pip ignores it. A local folder or file is given
with ``~`` expanded, and a ``find-links`` folder that does not exist is left out with a warning (pip warns
and goes on; uv would stop). Not carried over: ``cert`` (uv reads ``SSL_CERT_FILE``), ``trusted-host``,
``only-binary``, ``pre``. The standard library only: it runs before memlib is installed. Nothing is printed
when pip has none of these settings; if pip cannot list them, its error is shown and the exit status is 1.

    python3 .ci/pip_to_uv.py [PYTHON]    # PYTHON: the interpreter whose pip to ask (default: this one)
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

#: pip's options that say where packages come from, and the uv option of each.
OPTIONS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
    "no-index": "--no-index",
}
#: pip's other names for them.
ALIASES = {"pypi-url": "index-url"}
#: Where pip reads a setting, weakest first.
SECTIONS = ("global", "install", ":env:")
#: What pip reads as true in a yes/no setting.
TRUE = {"1", "y", "yes", "t", "true", "on"}


def _value(text: str) -> str:
    """Return the value ``pip config list`` printed (Python's repr of a string, or a bare word)."""
    text = text.strip()
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return value if isinstance(value, str) else text


def _local(place: str) -> str:
    """``place`` with ``~`` expanded unless it is a URL."""
    return place if "://" in place else os.path.expanduser(place)


def uv_options(listing: str, warn=None) -> list[str]:
    r"""Return uv's options for the output of ``pip config list``.

    ``warn`` is called with a message for each setting left out (default: printed to stderr).

    >>> uv_options("global.find-links='/'\n:env:.index-url='https://m/simple'\nglobal.cert='/c'")
    ['--index-url', 'https://m/simple', '--find-links', '/']
    >>> uv_options("global.extra-index-url='a b'\ninstall.extra-index-url='\\nc\\nd'")
    ['--extra-index-url', 'c', '--extra-index-url', 'd']
    >>> uv_options("global.no-index='t'\n:env:.constraint=''")
    ['--no-index']
    """
    warn = warn or (lambda message: print(f"pip_to_uv: {message}", file=sys.stderr))
    found: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        key, sep, raw = line.partition("=")
        section, _, name = key.strip().rpartition(".")
        name = ALIASES.get(name, name)
        if not sep or name not in OPTIONS or section not in SECTIONS:
            continue
        value, rank = _value(raw), SECTIONS.index(section)
        if value.strip() and (name not in found or rank >= found[name][0]):
            found[name] = (rank, value)
    out = []
    for name, flag in OPTIONS.items():
        if name not in found:
            continue
        value = found[name][1]
        if name == "no-index":
            out += [flag] if value.strip().lower() in TRUE else []
            continue
        for place in map(_local, value.split()):  # pip splits its list settings on white space
            if name == "find-links" and "://" not in place and not os.path.exists(place):
                warn(f"pip's find-links {place!r} does not exist: left out")
                continue
            out += [flag, place]
    return out


def main(argv: list[str]) -> int:
    """Print the options for the pip of ``argv[1]`` (else this interpreter's), one per line; nothing if none."""
    python = argv[1] if len(argv) > 1 else sys.executable
    try:
        done = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True)
    except OSError as exc:
        print(f"pip_to_uv: cannot run {python}: {exc}", file=sys.stderr)
        return 1
    if done.returncode:
        sys.stderr.write(done.stderr)
        print(f"pip_to_uv: `{python} -m pip config list` failed (exit {done.returncode})", file=sys.stderr)
        return 1
    sys.stdout.write("".join(option + "\n" for option in uv_options(done.stdout)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
