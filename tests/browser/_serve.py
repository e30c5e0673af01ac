"""Helpers shared by the browser tests and bench/view.py: the viewer in a thread, and the
system's headless Chromium driven through its own chromedriver (never a downloaded one)."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn

from agentsim.view import create_app

CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    if not os.path.exists(CHROMEDRIVER):
        return f"{CHROMEDRIVER} is missing (apt-get install -y chromium chromium-driver)"
    if chromium_binary() is None:
        return "chromium is missing (apt-get install -y chromium chromium-driver)"
    return None


def chromium_binary() -> str | None:
    for path in CHROMIUM_CANDIDATES:
        if os.path.exists(path):
            return path
    return shutil.which("chromium")


def start_chrome(width: int = 1400, height: int = 1000) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never download a driver
    options = webdriver.ChromeOptions()
    options.binary_location = chromium_binary() or ""
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


@contextmanager
def serve(path: Path) -> Iterator[str]:
    """The viewer of ``path`` on a free loopback port in a thread; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(path), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the viewer did not start within 20 s")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
