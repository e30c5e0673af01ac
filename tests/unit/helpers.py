"""Helpers shared by the unit tests: the repository's paths, the skill script context, skill
folders and the ScriptRunner fixtures scripts."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentsim.skills.context import SkillScriptContext, safe_env

if TYPE_CHECKING:
    import pytest

    from agentsim.inspect.agentview import AgentRecord
    from agentsim.testing import ChatRequest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
SCRIPTS = FIXTURES / "scripts"
ENVMODS = FIXTURES / "envmods"
"""Environment modules of a user's own: ``market/`` (an experiment with a module file beside
it) and ``site/`` (a package with an ``agentsim.env_modules`` entry point: put it on sys.path)."""

SECRET_ENVIRON = {
    "PATH": os.environ.get("PATH", "/usr/bin"),
    "LANG": "C.UTF-8",
    "AGENTSIM_MODE": "test",
    "AGENTSIM_API_KEY": "sk-agentsim",
    "OPENAI_API_KEY": "sk-openai",
    "HF_TOKEN": "hf-token",
    "DB_PASSWORD": "pw",
}

# Tests call ``fx`` from several threads at once; without this, two threads could both see
# the fixture missing and copy it, and one would truncate a script the other is running.
_COPY_LOCK = threading.Lock()


T0 = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)


def script_context(
    skill_dir: Path,
    *,
    workspace: Path,
    agent_id: str = "a-1",
    skill_id: str | None = None,
    skill_name: str | None = None,
    tick: int = 1,
    when: datetime = T0,
    env: Mapping[str, str] | None = None,
    profile: dict[str, Any] | None = None,
    create: bool = True,
) -> SkillScriptContext:
    """The context a script of ``skill_dir`` gets (``custom@<folder name>`` unless told).

    ``create`` makes the agent's ``workspace``; ``profile`` is written there as profile.json;
    ``env=None`` keeps the context's own default environment.
    """
    if create:
        workspace.mkdir(parents=True, exist_ok=True)
    if profile is not None:
        (workspace / "profile.json").write_text(json.dumps(profile))
    name = skill_dir.name if skill_name is None else skill_name
    return SkillScriptContext(
        workspace_root=workspace,
        skill_id=f"custom@{name}" if skill_id is None else skill_id,
        skill_name=name,
        skill_dir=skill_dir,
        agent_id=agent_id,
        tick=tick,
        time=when,
        **({} if env is None else {"env": env}),
    )


def make_ctx(root: Path, agent_id: str = "a-1", *, create: bool = True) -> SkillScriptContext:
    """A context whose skill folder is ``root``: the test's scripts live there (see ``fx``)."""
    return script_context(
        root,
        workspace=root / "agents" / agent_id,
        agent_id=agent_id,
        skill_name="demo",
        tick=7,
        env=safe_env(SECRET_ENVIRON),
        create=create,
    )


def write_skill(
    root: Path,
    name: str,
    *,
    description: str | None = None,
    front: str = "",
    body: str = "Body.\n",
    files: Mapping[str, str] | None = None,
    exist_ok: bool = True,
) -> Path:
    """Write the skill folder ``root/name``: its ``files`` (relative path -> text), then a
    SKILL.md with ``name``, ``description`` (``Use for <name>.`` unless told), the ``front``
    lines and ``body``. SKILL.md comes last, so a scan never finds a skill whose script is
    still missing."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=exist_ok)
    for relative, text in (files or {}).items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    about = f"Use for {name}." if description is None else description
    (folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: {about}\n{front}---\n{body}", encoding="utf-8"
    )
    return folder


def make_skill(
    root: Path,
    name: str,
    *,
    extra: str = "",
    body: str = "Body.\n",
    description: str | None = None,
    script: bool = True,
) -> Path:
    """A skill as the registry tests scan it: a script (unless ``script=False``), a reference
    and the ``extra`` frontmatter lines."""
    module = name.replace("-", "_")
    files = {"references/notes.md": "Notes.\n"}
    if script:
        files[f"scripts/{module}.py"] = "def entrypoint(argv, ctx):\n    return 'ok'\n"
        extra = f"script: scripts/{module}.py\n{extra}"
    folder = write_skill(
        root, name, description=description or None, front=extra, body=body, files=files
    )
    (folder / "scripts").mkdir(exist_ok=True)  # there, empty, even without a script
    return folder


def touch(md: Path, text: str) -> None:
    """Rewrite with a new mtime even on coarse clocks."""
    md.write_text(text)
    st = md.stat()
    os.utime(md, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def refused_ports(n: int = 1) -> Iterator[list[int]]:
    """``n`` loopback ports where a connection is refused for as long as the block lasts:
    each is bound here but never listened on, so no other process (another test's server,
    on a busy machine) can take it meanwhile, as it could a port found free and let go."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        yield [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def fx(root: Path, name: str) -> Path:
    """The fixture script ``name``, copied with its siblings into the test's skill folder."""
    with _COPY_LOCK:
        if not (root / name).exists():
            shutil.copytree(SCRIPTS, root, dirs_exist_ok=True)
    return root / name


def wait_for_file(path: Path) -> None:
    """Until ``path`` exists; a guard gives up after 60 s (a process may take seconds to
    start on a loaded machine), and the test's next step says what is missing."""
    deadline = time.monotonic() + 60
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.005)


def write_script(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def run_fingerprint(run_dir: Path) -> dict[str, str]:
    """What a seed fixes in a run folder, one digest per part (``bench/same_outputs.py``'s
    comparison: events byte for byte, metrics' counts, agents' files, store rows)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "same_outputs", REPO / "bench" / "same_outputs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    parts: dict[str, str] = module.fingerprint(run_dir)
    return parts


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, dead but not yet reaped, is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - someone else's process now has that pid
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:  # pragma: no cover - not Linux, or gone meanwhile
        return True


def gone_within(pid: int, seconds: float = 30.0) -> bool:
    """Whether ``pid`` ends within ``seconds`` (a SIGKILL takes effect asynchronously; the
    default is a guard for a loaded machine: a pid that goes returns at once)."""
    deadline = time.monotonic() + seconds
    while process_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def pids_with_arg(arg: str) -> list[int]:
    """The live processes (seen from here, whatever namespace they run in) that have ``arg``
    on their command line: how a test finds what a sandboxed script started, whose own pid
    is that of its PID namespace."""
    found = []
    needle = arg.encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if needle in argv and process_alive(int(name)):
            found.append(int(name))
    return found


def none_left_within(arg: str, seconds: float = 30.0) -> bool:
    """Whether every process with ``arg`` on its command line ends within ``seconds`` (the
    default is a guard for a loaded machine: it returns as soon as none is left)."""
    deadline = time.monotonic() + seconds
    while pids_with_arg(arg):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def kill_all_with_arg(arg: str) -> None:
    """Clean up after a test: SIGKILL every process with ``arg`` on its command line."""
    for pid in pids_with_arg(arg):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def kill_pid_in(pidfile: Path) -> None:
    """Clean up after a test: SIGKILL the process whose pid ``pidfile`` holds, if any."""
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(pidfile.read_text()), signal.SIGKILL)


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    """The run's ``events.jsonl``, one dict a line."""
    lines = (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def user_modules_experiment(*, ticks: int, executor: str = "local", hosts: int = 1) -> str:
    """An experiment with both user modules of ``ENVMODS`` (the market by its file, relative
    to ``ENVMODS / "market"``, the epidemic by its entry point), each group using one's skill."""
    return f"""
name: user-modules
seed: 11
clock: {{start: "2026-03-02T08:00:00", tick: 1h}}
ticks: {ticks}
agents:
  - group: shoppers
    count: 3
    skills: {{default: [market-shopping]}}
  - group: careful
    count: 3
    skills: {{default: [check-health]}}
environment:
  - {{module: ./envs/market.py:Market}}
  - {{module: epidemic, initially_ill: 2, spread: 0.9}}
executor: {{kind: {executor}, hosts: {hosts}}}
output: {{formats: [jsonl]}}
"""


def step_prompts(agent: AgentRecord) -> dict[int, str]:
    """The system prompt and first user message (its skills) each step was given, by tick."""
    steps = [t for t in agent.trace() if "system_sha" in t]
    prompts = (agent.prompt_at(t["tick"]) for t in steps)
    return {p.tick: f"{p.system}\n{p.user}" for p in prompts}


LOCAL = "http://localhost"
"""The base URL the viewer's tests use: a ``Host`` the viewer answers to."""


def viewer_token(client: Any) -> str:
    """The session token the viewer's page carries (what its own JavaScript sends)."""
    page = client.get("/")
    assert page.status_code == 200 and page.headers["cache-control"] == "no-store"
    found = re.search(r'<meta name="agentsim-token" content="([^"]+)">', page.text)
    assert found is not None, "the viewer's page carries no token"
    return found.group(1)


def post_interview(client: Any, url: str, question: Any, **headers: str) -> Any:
    """An interview as the viewer's own page asks for it: JSON, same origin, with the token."""
    sent = {
        "Origin": LOCAL,
        "X-Agentsim-Token": viewer_token(client),
        "Content-Type": "application/json",
        **headers,
    }
    return client.post(url, content=json.dumps({"question": question}), headers=sent)


class Together:
    """An answer function for ``OpenAITestServer`` that holds each answer until ``n``
    requests are in the server at once (once that happened, no answer waits for it again).

    So the server's ``max_in_flight`` reaches what the client lets through however a loaded
    machine spaces the requests out. A client that lets fewer through is seen by that
    count, not as a suite that never ends: a guard gives up waiting after ``guard`` seconds.
    ``answer`` gives the text (the server's echo by default)."""

    def __init__(self, n: int, answer: Any = None, *, guard: float = 60) -> None:
        from agentsim.testing.openai_server import echo_answer

        self.n = n
        self.answer = echo_answer if answer is None else answer
        self.guard = guard
        self.inside = 0
        self.all_in = asyncio.Event()

    async def __call__(self, request: ChatRequest) -> Any:
        self.inside += 1
        try:
            if self.inside >= self.n:
                self.all_in.set()
            try:
                async with asyncio.timeout(self.guard):
                    await self.all_in.wait()
            except TimeoutError:
                self.all_in.set()  # fewer were let in at once: the count says so
            reply = self.answer(request)
            return await reply if inspect.isawaitable(reply) else reply
        finally:
            self.inside -= 1


def record_sleeps(
    monkeypatch: pytest.MonkeyPatch,
    *,
    file: str | None = None,
    function: str | None = None,
    skip: bool = False,
) -> list[float]:
    """The delays ``asyncio.sleep`` is asked for, in order, by code in ``file`` (a path's
    end, e.g. ``"llm/served.py"``) or in the function named ``function``: a test then tells
    the wait the code chose apart from how slowly a loaded machine ran the code around it.
    The waits still happen; with ``skip`` the positive ones are recorded and take no time."""
    tail = os.path.join(*file.split("/")) if file else None
    asked: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(delay: float, result: Any = None) -> Any:
        code = sys._getframe(1).f_code
        if (tail and code.co_filename.endswith(tail)) or code.co_name == function:
            if not skip:
                asked.append(delay)
            elif delay > 0:
                asked.append(delay)
                delay = 0
        return await real_sleep(delay, result)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    return asked
