"""JupyterLab opens a chapter as a notebook, runs its parameters cell and saves edits to the .md.

The server is started as `make lab` starts it (same ``--config``), headless on a free loopback port
with a random token, with its root at a temporary copy of ``notebooks/`` and ``jupytext.toml``: the
real chapters are never written. The whole test is bounded by ``BUDGET`` seconds.
"""

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import jupytext
import pytest
import websocket  # websocket-client, pinned in requirements.txt beside JupyterLab

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / ".jupyter" / "jupyter_server_config.py"
CHAPTER = "notebooks/01_synthetic_confounds.md"
BUDGET = 55.0  # seconds, for everything from server start to shutdown
pytestmark = [pytest.mark.slow, pytest.mark.integration]  # a JupyterLab server and a kernel: 10 s and more
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _free_loopback_port():
    """Return a free TCP port on 127.0.0.1, or skip the test when loopback cannot be bound."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]
    except OSError as err:
        pytest.skip(f"cannot bind a port on 127.0.0.1 for the JupyterLab server: {err}")


class Lab:
    """A minimal REST and websocket client for a running Jupyter server.

    Parameters
    ----------
    port : int
        Port the server listens on at 127.0.0.1.
    token : str
        The server's authentication token.
    deadline : float
        `time.monotonic()` value after which every wait gives up.
    root : pathlib.Path
        The server's root directory.
    """

    def __init__(self, port, token, deadline, root):
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.token = token
        self.deadline = deadline
        self.root = root

    def remaining(self):
        """Seconds left before the deadline (at least a small positive timeout)."""
        return max(self.deadline - time.monotonic(), 0.1)

    def request(self, method, path, body=None, raw=False):
        """Send one request; return the decoded JSON reply (None when empty), or the text when `raw`."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"token {self.token}")
        req.add_header("Content-Type", "application/json")
        with NO_PROXY.open(req, timeout=self.remaining()) as resp:
            text = resp.read().decode()
        if raw:
            return text
        return json.loads(text) if text else None

    def execute(self, kernel_id, code):
        """Run `code` in a kernel over its websocket channel.

        Returns
        -------
        reply : dict
            Content of the kernel's ``execute_reply``.
        stdout : str
            Everything the cell printed.
        """
        url = f"ws://127.0.0.1:{self.port}/api/kernels/{kernel_id}/channels"
        ws = websocket.create_connection(url, header=[f"Authorization: token {self.token}"], timeout=self.remaining())
        try:
            msg_id = uuid.uuid4().hex
            ws.send(
                json.dumps(
                    {
                        "header": {
                            "msg_id": msg_id,
                            "msg_type": "execute_request",
                            "username": "test",
                            "session": uuid.uuid4().hex,
                            "version": "5.3",
                        },
                        "parent_header": {},
                        "metadata": {},
                        "content": {
                            "code": code,
                            "silent": False,
                            "store_history": False,
                            "user_expressions": {},
                            "allow_stdin": False,
                            "stop_on_error": True,
                        },
                        "channel": "shell",
                        "buffers": [],
                    }
                )
            )
            stdout, reply, idle = [], None, False
            while reply is None or not idle:  # shell and iopub messages may arrive in either order
                ws.settimeout(self.remaining())
                msg = json.loads(ws.recv())
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                    stdout.append(msg["content"]["text"])
                elif msg["msg_type"] == "execute_reply":
                    reply = msg["content"]
                elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                    idle = True
            return reply, "".join(stdout)
        finally:
            ws.close()


@pytest.fixture
def lab(tmp_path):
    """Start JupyterLab with the project config on a temporary copy of the chapters; yield a client."""
    root = tmp_path / "root"
    shutil.copytree(ROOT / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns("*.ipynb", ".ipynb_*"))
    shutil.copy(ROOT / "jupytext.toml", root / "jupytext.toml")
    port, token = _free_loopback_port(), secrets.token_hex(24)
    deadline = time.monotonic() + BUDGET
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    log = (tmp_path / "lab.log").open("w")
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        f"--config={CONFIG}",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
    ]
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    client = Lab(port, token, deadline, root)
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterLab exited with {proc.returncode}:\n{(tmp_path / 'lab.log').read_text()}")
            try:
                client.request("GET", "/api/status")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab not ready in {BUDGET} s:\n{(tmp_path / 'lab.log').read_text()}")
                time.sleep(0.3)
        yield client
        assert time.monotonic() < deadline, f"the JupyterLab test took longer than {BUDGET} s"
    finally:
        proc.terminate()  # the server shuts its kernels down on SIGTERM
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_chapter_opens_runs_and_saves_as_markdown(lab):
    md = lab.root / CHAPTER
    assert not list(md.parent.glob("*.ipynb")), "the copy must hold no paired .ipynb"
    expected = jupytext.read(md)
    n_code = sum(cell.cell_type == "code" for cell in expected.cells)

    # 1. The contents API serves the .md as a notebook with the chapter's cells.
    model = lab.request("GET", f"/api/contents/{CHAPTER}?type=notebook&content=1")
    assert model["type"] == "notebook"
    assert model["format"] == "json"
    cells = model["content"]["cells"]
    assert sum(cell["cell_type"] == "code" for cell in cells) == n_code
    params = [cell for cell in cells if "parameters" in cell["metadata"].get("tags", [])]
    assert len(params) == 1, "the chapter has exactly one cell tagged 'parameters'"
    params_source = "".join(params[0]["source"])
    assert "keep_fraction" in params_source

    # ... and JupyterLab's front end opens a .md with jupytext's notebook viewer on a double click.
    page = lab.request("GET", "/lab", raw=True)
    config_script = re.search(r'<script id="jupyter-config-data"[^>]*>(.*?)</script>', page, re.DOTALL)
    page_config = json.loads(config_script.group(1))
    assert "jupyterlab-jupytext" in [ext["name"] for ext in page_config["federated_extensions"]]
    docmanager = lab.request("GET", "/lab/api/settings/@jupyterlab/docmanager-extension:plugin")
    viewers = docmanager["schema"]["properties"]["defaultViewers"]["default"]
    assert viewers.get("markdown") == "Jupytext Notebook", "see .jupyter/lab/settings/overrides.json"

    # 2. A kernel session on the chapter runs the parameters cell, in the project's venv.
    session = lab.request(
        "POST", "/api/sessions", {"path": CHAPTER, "type": "notebook", "name": "", "kernel": {"name": "python3"}}
    )
    kernel_id = session["kernel"]["id"]
    reply, _ = lab.execute(kernel_id, params_source)
    assert reply["status"] == "ok", reply
    reply, stdout = lab.execute(kernel_id, "import sys\nprint(sys.prefix, keep_fraction)")
    assert reply["status"] == "ok", reply
    assert stdout.split() == [sys.prefix, "0.4"]
    lab.request("DELETE", f"/api/sessions/{session['id']}")

    # 3. Saving an edited cell writes the edit to the .md, the source of truth.
    before = md.read_text()
    marker = f"# edited in JupyterLab {uuid.uuid4().hex}"
    params[0]["source"] = params_source.rstrip("\n") + "\n" + marker
    body = {"type": "notebook", "format": "json", "content": model["content"]}
    saved = lab.request("PUT", f"/api/contents/{CHAPTER}", body)
    assert saved["type"] == "notebook"
    after = md.read_text()
    assert after != before and marker in after
    assert after.startswith("---\njupytext:"), "the .md keeps its MyST front matter"
    reread = jupytext.read(md)
    assert sum(cell.cell_type == "code" for cell in reread.cells) == n_code
    assert [marker in cell.source for cell in reread.cells if "parameters" in cell.metadata.get("tags", [])] == [True]

    # The paired .ipynb (written through jupytext.toml, git-ignored) is not needed to read the edit back.
    for paired in md.parent.glob("*.ipynb"):
        paired.unlink()
    again = lab.request("GET", f"/api/contents/{CHAPTER}?type=notebook&content=1")
    assert any(marker in "".join(cell["source"]) for cell in again["content"]["cells"])
    assert "notebooks/*.ipynb" in (ROOT / ".gitignore").read_text().splitlines()
