"""A real headless Chromium driven over the Chrome DevTools Protocol (a websocket; no WebDriver).

``Chromium`` launches Debian's ``chromium`` with a fresh profile and records, from the moment a page is
opened, every network request the page makes (``Network.requestWillBeSent``), console errors and
uncaught exceptions. Tests that need it skip only when no chromium binary is installed; CI installs it
(.ci/run).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--remote-debugging-port=0", "--hide-scrollbars")
KEY_CODES = {"ArrowLeft": 37, "ArrowRight": 39, "Home": 36, "End": 35}


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    """One headless browser with one page; ``events`` holds every CDP event received."""

    def __init__(self, profile: Path, width: int = 1400, height: int = 1000):
        import websocket  # the test extra's websocket-client

        self.process = subprocess.Popen([chromium_binary(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                                         f"--window-size={width},{height}", "about:blank"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port = self._port(profile / "DevToolsActivePort")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as answer:
            page = next(t for t in json.load(answer) if t["type"] == "page")
        self.socket = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=120, suppress_origin=True)
        self.events: list[dict] = []
        self._next = 0
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def _port(self, path: Path, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if path.exists() and path.read_text().strip():
                return int(path.read_text().split()[0])
            if self.process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.process.returncode}")
            time.sleep(0.1)
        raise TimeoutError("chromium did not open its DevTools port")

    def send(self, method: str, **params) -> dict:
        self._next += 1
        self.socket.send(json.dumps({"id": self._next, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self._next:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, method: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events:
                if event.get("method") == method:
                    return event
            self.events.append(json.loads(self.socket.recv()))
        raise TimeoutError(method)

    def open(self, url: str) -> None:
        self.events.clear()  # a page opened before (a shared browser) must not answer for this one's load
        self.send("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"])
        return result["result"].get("value")

    def press(self, key: str) -> None:
        for kind in ("keyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", type=kind, key=key, code=key, windowsVirtualKeyCode=KEY_CODES[key])

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        params = {"format": "png"}
        if full_page:
            height = self.evaluate("document.documentElement.scrollHeight")
            width = self.evaluate("document.documentElement.scrollWidth")
            params.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1})
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", **params)["data"]))
        return path

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def errors(self) -> list[str]:
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(str(params["exceptionDetails"]))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(str(params.get("args")))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(params["entry"].get("text", ""))
        return found

    def close(self) -> None:
        try:
            self.socket.close()
        finally:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()


@pytest.fixture
def chromium(tmp_path):
    if chromium_binary() is None:
        pytest.skip("chromium is not installed (CI installs it: .ci/run)")
    browser = Chromium(tmp_path / "profile")
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture(scope="module")
def module_chromium(tmp_path_factory):
    """One browser shared by a module's tests (starting chromium is the slow part)."""
    if chromium_binary() is None:
        pytest.skip("chromium is not installed (CI installs it: .ci/run)")
    browser = Chromium(tmp_path_factory.mktemp("profile"))
    try:
        yield browser
    finally:
        browser.close()
