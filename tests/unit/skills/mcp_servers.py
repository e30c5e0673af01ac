"""Real MCP skills servers for the tests, on 127.0.0.1: FastMCP's ``SkillsDirectoryProvider``
serving a folder of skills over streamable HTTP (in a thread, stoppable and restartable on
the same port), or over stdio (``stdio_command``)."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import uvicorn
from fastmcp import FastMCP
from fastmcp.skills.provider import SkillFileResource, SkillsDirectoryProvider

from tests.unit.helpers import FIXTURES, free_port

STDIO_SERVER = FIXTURES / "mcp" / "skills_stdio_server.py"


class CountingSkills(SkillsDirectoryProvider):
    """Serves a folder (re-read on each request) and counts the files read; a file named
    in ``tamper`` (``name/relative path``) is served with bytes its digest does not match,
    one in ``refuse`` is an error."""

    def __init__(
        self,
        root: Path,
        *,
        tamper: frozenset[str] = frozenset(),
        refuse: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(root, reload=True)
        self.reads: Counter[str] = Counter()
        self.tamper = tamper
        self.refuse = refuse

    async def read_file(self, resource: SkillFileResource) -> bytes:
        data: bytes = await super().read_file(resource)
        key = f"{resource.skill_path}/{resource.file_path}"
        self.reads[key] += 1
        if key in self.refuse:
            raise ValueError(f"{key} is not for you")
        if key in self.tamper:
            return data + b"\n# changed on the way\n"
        return data


class SkillsHttpServer:
    """``with SkillsHttpServer(folder) as server:`` serves ``folder`` at ``server.url``;
    ``stop()`` and ``start()`` take it down and bring it back on the same port."""

    def __init__(
        self,
        root: Path,
        *,
        tamper: frozenset[str] = frozenset(),
        refuse: frozenset[str] = frozenset(),
        skills: bool = True,
    ) -> None:
        self.provider = CountingSkills(root, tamper=tamper, refuse=refuse)
        self.skills = skills  # False: a plain MCP server, without the skills extension
        self.port = free_port()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def reads(self) -> Counter[str]:
        return self.provider.reads

    def start(self) -> None:
        mcp: FastMCP[Any] = FastMCP("test skills")
        if self.skills:
            mcp.add_provider(self.provider)
        else:
            mcp.tool(lambda: "pong", name="ping")
        config = uvicorn.Config(
            mcp.http_app(path="/mcp"), host="127.0.0.1", port=self.port, log_level="error"
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the skills server did not start on port {self.port}")
            time.sleep(0.02)
        self._server, self._thread = server, thread

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=20)
        self._server = self._thread = None

    def __enter__(self) -> SkillsHttpServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stdio_command(root: Path) -> list[str]:
    """The command line of a stdio skills server serving ``root``."""
    return [sys.executable, str(STDIO_SERVER), str(root)]
