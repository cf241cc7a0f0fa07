"""Project config for JupyterLab: `make lab` and tests/test_lab.py pass it with ``--config``.

Kept in the repository (not in ~/.jupyter) so a fresh clone needs no per-user set-up, and nobody's
own JupyterLab is changed.
"""

from pathlib import Path

c = get_config()  # noqa: F821 (traitlets defines get_config when it loads this file)
HERE = Path(__file__).resolve().parent

# The project's machines and CI run as root; the server still listens on localhost only, with a token.
c.ServerApp.allow_root = True

# Open and save notebooks/*.md as notebooks. jupytext's server extension (enabled in the venv by the
# jupytext wheel) would swap this class in at start-up; naming it here makes that explicit and keeps it
# working if the extension is disabled elsewhere. Saving writes the .md (the source of truth) and,
# through the repository's jupytext.toml, the git-ignored paired .ipynb.
c.ServerApp.contents_manager_class = "jupytext.AsyncTextFileContentsManager"

# A double click on a .md opens it with the "Jupytext Notebook" viewer instead of the text editor:
# JupyterLab reads settings defaults from overrides.json in its application settings directory (by
# default an empty .venv/share/jupyter/lab/settings). Every .md opens so, README.md too: use right click >
# Open With > Editor for prose files.
c.LabApp.app_settings_dir = str(HERE / "lab" / "settings")
