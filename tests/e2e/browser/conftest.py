"""Fixtures for the browser tests: a JupyterLab server on a copy of the release, and Chromium.

The server is started the way `make lab` starts it (`jupyter lab notebooks`, from the bundle's
venv, in a folder laid out like the bundle) but in a temporary directory, so the repository's
notebooks are never modified. Its user settings, workspaces and runtime files are private to
the run. Chromium is Debian's (/usr/bin/chromium), driven by Playwright; no browser is ever
downloaded.

Every step of a test saves a screenshot under runs/browser/ (kept after a failure, replaced
at the start of the next run), together with the server's log and the browser console.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from labdriver import BUNDLE, RELEASE, ROOT, SHOTS, UI_TIMEOUT_MS, VENV

from tests.lesson_cache import lesson_run_env

CHROMIUM = os.environ.get("BROWSER_TEST_CHROMIUM", "/usr/bin/chromium")
# As root, without a sandbox; the background-networking flags keep Chromium from dialling out
# (its connections are refused on a closed network and slow everything down).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--metrics-recording-only",
]

SERVER_START_S = 120  # JupyterLab's first start on 2 busy cores takes 5-20 s


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "browser: end-to-end test in JupyterLab with headless Chromium (make test-browser; "
        "exclude with -m 'not browser')",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def require_chromium() -> str:
    if Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    reason = (
        f"Chromium not found at {CHROMIUM}: run tests/e2e/browser/install-chromium.sh "
        "(Debian's chromium package) to run the browser tests"
    )
    if in_ci():
        pytest.fail(reason + " (CI=true: a missing browser is a failure, not a skip)", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LabServer:
    """A running JupyterLab: where it listens, where its files are, how to call its API."""

    url: str
    token: str
    bundle: Path  # the temporary bundle folder the server runs in (like the repo root)
    root_dir: Path  # what the file browser shows (the copy of notebooks/)
    process: subprocess.Popen
    log_path: Path
    env: dict = field(default_factory=dict)  # the server's environment (its kernels inherit it)

    def fresh_copy(self, name: str) -> Path:
        """Put the release's `name` back into the lab's tree, as shipped (earlier tests edit it)."""
        target = self.root_dir / name
        shutil.copy2(RELEASE / name, target)
        return target

    def lab_url(self, path: str) -> str:
        """The notebook's URL in a workspace of its own: no tabs restored from earlier pages."""
        workspace = f"w{uuid.uuid4().hex[:12]}"
        return f"{self.url}/lab/workspaces/{workspace}/tree/{path}?token={self.token}"

    def api(self, method: str, path: str, body: dict | None = None, timeout: float = 30):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}/api/{path}",
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode()
        return json.loads(text) if text else None

    def shutdown_kernels(self) -> None:
        for session in self.api("GET", "sessions"):
            try:
                self.api("DELETE", f"sessions/{session['id']}")
            except urllib.error.URLError:
                pass

    def server_log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.is_file() else ""


def _lab_settings(settings_dir: Path) -> None:
    """User settings of the private run: no news/update toasts over the screenshots."""
    notification = settings_dir / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True, exist_ok=True)
    notification.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))


def _stop(process: subprocess.Popen) -> None:
    """Stop the server and everything it started (its kernels): its own process group."""
    if process.poll() is not None:
        return
    pgid = os.getpgid(process.pid)
    try:
        os.killpg(pgid, signal.SIGTERM)
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pass
    finally:
        try:
            os.killpg(pgid, signal.SIGKILL)  # whatever is left of the group (kernels)
        except ProcessLookupError:
            pass
        process.wait(timeout=10)


@pytest.fixture(scope="session")
def shots_dir() -> Path:
    """runs/browser/, emptied of the previous run's screenshots and logs."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for old in SHOTS.iterdir():
        if old.is_file() and old.suffix in {".png", ".log", ".txt"}:
            old.unlink()
    return SHOTS


@pytest.fixture(scope="session")
def chromium_path() -> str:
    return require_chromium()


@pytest.fixture(scope="session")
def lab_bundle(tmp_path_factory) -> Path:
    """A temporary folder laid out like the bundle: notebooks/ (a copy of the release)."""
    names = sorted(p.name for p in RELEASE.glob("*.ipynb")) if RELEASE.is_dir() else []
    if not names:
        message = f"no release notebooks in {RELEASE}: run `make release` first"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    bundle = tmp_path_factory.mktemp("lab") / "bundle"
    shutil.copytree(
        RELEASE, bundle / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "runs")
    )
    # The Validate button reads nbgrader_config.py from the server's working directory, as it
    # would from the repository root under `make lab` (no venv-wide config).
    shutil.copy2(BUNDLE / "nbgrader_config.py", bundle / "nbgrader_config.py")
    return bundle


def private_jupyter_env(private: Path, extra: dict | None = None) -> dict:
    """The environment a test server runs in: as the Makefile's recipes see it (the venv's bin
    first on PATH), with user config, runtime files, settings and workspaces private to the run."""
    settings = private / "lab-settings"
    _lab_settings(settings)
    env = dict(os.environ)
    env.update(
        {
            "PATH": f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            "PYTHONDONTWRITEBYTECODE": "1",
            # private to this run: no user config, saved workspace or settings leak in
            "JUPYTER_CONFIG_DIR": str(private / "config"),
            "JUPYTER_RUNTIME_DIR": str(private / "runtime"),
            "JUPYTERLAB_SETTINGS_DIR": str(settings),
            "JUPYTERLAB_WORKSPACES_DIR": str(private / "workspaces"),
            "IPYTHONDIR": str(private / "ipython"),
            **(extra or {}),
        }
    )
    env.pop("JUPYTER_PATH", None)
    return env


@contextlib.contextmanager
def run_jupyter(command: list[str], cwd: Path, env: dict, log_path: Path, bundle: Path, root_dir: Path):
    """Start `command` (a `jupyter lab ...` line, without port or token) in cwd on a free port
    with a fresh token; wait until it answers; yield its LabServer; stop it and its kernels."""
    port = free_port()
    token = uuid.uuid4().hex
    command = [
        *command,
        "--no-browser",
        "--allow-root",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
    ]
    log = open(log_path, "w")
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    server = LabServer(
        url=f"http://127.0.0.1:{port}",
        token=token,
        bundle=bundle,
        root_dir=root_dir,
        process=process,
        log_path=log_path,
        env=env,
    )
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if process.poll() is not None:
                pytest.fail(
                    f"JupyterLab exited with {process.returncode}:\n{server.server_log()[-4000:]}", pytrace=False
                )
            try:
                server.api("GET", "status", timeout=5)
                urllib.request.urlopen(f"{server.url}/lab?token={token}", timeout=10).read()
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"JupyterLab did not answer within {SERVER_START_S} s:\n{server.server_log()[-4000:]}",
                        pytrace=False,
                    )
                time.sleep(0.25)
        yield server
    finally:
        try:
            if process.poll() is None:
                server.shutdown_kernels()
        except Exception:
            pass
        _stop(process)
        log.close()


@pytest.fixture(scope="session")
def lab_server(chromium_path, lab_bundle, shots_dir) -> LabServer:
    jupyter = VENV / "bin" / "jupyter"
    assert jupyter.is_file(), f"{jupyter} is missing: run `make venv` first"
    env = private_jupyter_env(
        lab_bundle.parent / "jupyter-private",
        {"REMAT_LESSON_RUNS_DIR": str(lab_bundle / "runs" / "performance-05"), **lesson_run_env()},
    )
    with run_jupyter(
        [str(jupyter), "lab", "notebooks"],
        lab_bundle,
        env,
        shots_dir / "jupyter-server.log",
        bundle=lab_bundle,
        root_dir=lab_bundle / "notebooks",
    ) as server:
        yield server


@pytest.fixture(scope="session")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class Shots:
    """Numbered screenshots of one test: runs/browser/<test>-NN-<step>.png."""

    def __init__(self, page, directory: Path, prefix: str):
        self.page, self.directory, self.prefix, self.count = page, directory, prefix, 0
        self.taken: list[Path] = []

    def __call__(self, step: str) -> Path:
        self.count += 1
        path = self.directory / f"{self.prefix}-{self.count:02d}-{step}.png"
        try:
            self.page.screenshot(path=str(path), timeout=15_000)
            self.taken.append(path)
        except Exception as error:  # a screenshot must never hide the real failure
            print(f"screenshot {path.name} failed: {error}")
        return path


@contextlib.contextmanager
def browser_page(browser, shots_dir: Path, request, prefix: str | None = None):
    """A fresh browser page (own context) with console capture and numbered screenshots
    (page.shots); a FAILED screenshot and the console log are saved when the test fails."""
    context = browser.new_context(viewport={"width": 1440, "height": 960}, service_workers="block")
    context.set_default_timeout(UI_TIMEOUT_MS)
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(f"[{m.type}] {m.text}"))
    page.on("pageerror", lambda e: console.append(f"[pageerror] {e}"))
    page.console_messages = console
    name = prefix or request.node.name.replace("[", "-").replace("]", "").replace("/", "_")
    page.shots = Shots(page, shots_dir, name)
    try:
        yield page
    finally:
        failed = getattr(request.node, "rep_call", None)
        if failed is not None and failed.failed:
            page.shots("FAILED")
        (shots_dir / f"{name}-console.log").write_text("\n".join(console) + "\n")
        context.close()


@pytest.fixture
def page(chromium_path, browser, lab_server, shots_dir, request):
    """A fresh browser page (own context) with console capture; kernels are shut down after."""
    try:
        with browser_page(browser, shots_dir, request) as page:
            yield page
    finally:
        try:
            lab_server.shutdown_kernels()
        except Exception:
            pass


@pytest.fixture(scope="session")
def start_jupyter():
    """run_jupyter, for a test that serves another folder than the release (formgrader on a course):
    `with start_jupyter(command, cwd, env, log_path, bundle=..., root_dir=...) as server:`."""
    return run_jupyter


@pytest.fixture(scope="session")
def jupyter_env():
    """private_jupyter_env(private_dir, extra=None): the environment of a test server."""
    return private_jupyter_env


@pytest.fixture
def make_page(chromium_path, browser, shots_dir, request):
    """For a test on another server than lab_server: `page = make_page()`, a page like `page`'s,
    closed (with its FAILED screenshot when the test failed) at teardown."""
    with contextlib.ExitStack() as pages:
        yield lambda: pages.enter_context(browser_page(browser, shots_dir, request))


def formgrader_command(out: Path) -> list[str]:
    """The command `make formgrader OUT=<out>` runs (make -n), without its `cd`."""
    dry = subprocess.run(["make", "-n", "formgrader", f"OUT={out}"], cwd=ROOT, capture_output=True, text=True)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    line = [line for line in dry.stdout.splitlines() if "jupyter lab" in line][-1]
    cd, command = line.split("&&", 1)
    assert Path(shlex.split(cd)[1]) == out / "course", f"make formgrader does not run in OUT/course: {line}"
    return shlex.split(command)


@pytest.fixture(scope="session")
def serve_formgrader(chromium_path, shots_dir, tmp_path_factory):
    """`with serve_formgrader(out, name) as server:` formgrader on OUT/course, started as
    `make formgrader OUT=<out>` starts it (JupyterLab from the venv, in the course folder), with
    a private environment; its log is runs/browser/<name>-server.log."""

    @contextlib.contextmanager
    def serve(out: Path, name: str = "formgrader"):
        command = formgrader_command(out)
        assert command[0] == str(VENV / "bin" / "jupyter"), command
        env = private_jupyter_env(tmp_path_factory.mktemp(f"{name}-private"))
        course = out / "course"
        with run_jupyter(command, course, env, shots_dir / f"{name}-server.log", bundle=out, root_dir=course) as server:
            yield server

    return serve


@dataclass
class StaticServer:
    """A folder served over http, as a learner's browser would fetch a page: its address, and
    every request it answered ("METHOD path", with the X-Pwned header when one was sent)."""

    url: str
    requests: list[str]


@contextlib.contextmanager
def serve_folder(folder: Path):
    """`folder` over http on 127.0.0.1 (Python's static file server, in a thread) for the block."""
    seen: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def _note(self):
            marker = self.headers.get("X-Pwned")
            seen.append(f"{self.command} {self.path}" + (f" (X-Pwned: {marker})" if marker else ""))

        def do_GET(self):
            self._note()
            super().do_GET()

        def do_HEAD(self):
            self._note()
            super().do_HEAD()

        def do_POST(self):
            self._note()
            self.send_error(405)

        do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_POST

        def log_message(self, format, *args):  # the requests are kept in `seen`, not printed
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(folder)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield StaticServer(url=f"http://127.0.0.1:{httpd.server_address[1]}", requests=seen)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="session")
def static_server():
    """serve_folder: `with static_server(folder) as site:` the folder at site.url."""
    return serve_folder
