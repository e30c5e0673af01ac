"""The viewer's web app: JSON endpoints under ``/api`` and the static pages.

Read-only: every endpoint reads through ``agentsim.inspect``; the interview works on a
scratch copy (``agentsim.inspect.interview``), so nothing is written into a run folder.
Errors come back as ``{"error": message}`` with 404 (no such run, agent or tick) or 400.
Requests are checked first (``_guard``): the ``Host`` of every one, and for the interview
(a model call) its origin, the session's token, its content type and size.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from agentsim.errors import AgentsimError, ConfigError, RunError
from agentsim.inspect import Run
from agentsim.inspect._query import agent_steps, env_layouts, find_agents
from agentsim.view import _api, _study
from agentsim.view._guard import (
    MAX_QUESTION,
    Allowed,
    HostGuard,
    Refused,
    check_post,
    new_token,
    read_json_body,
)
from agentsim.view._workspace import Workspace

__all__ = ["STATIC_DIR", "create_app"]

STATIC_DIR = Path(__file__).parent / "static"
_PAGE = 50
_STEPS_SPAN = 20  # ticks of an agent's timeline loaded at once
_TOKEN_SLOT = "{{AGENTSIM_TOKEN}}"  # in index.html: the session's token goes there


def _int(request: Request, name: str, default: int, *, lo: int = 0, hi: int = 10**9) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = lo - 1
    if not lo <= value <= hi:
        raise ConfigError(name, f"{raw!r} is not a whole number in {lo}..{hi}", f"pass {name}=N")
    return value


def create_app(
    path: Path,
    *,
    address: tuple[str, int] | None = None,
    allow_hosts: Iterable[str] = (),
    token: str | None = None,
) -> Starlette:
    """The app serving the workspace (or single run) at ``path``.

    ``address``: the ``(host, port)`` it listens on; requests are served only with that
    host or ``localhost`` (and ``allow_hosts``) at that port in their ``Host`` header.
    Without it, the loopback names at any port. ``token``: the session's token that an
    interview must carry (a new random one by default; ``app.state.token``), handed to the
    viewer's page in its HTML."""
    ws = Workspace(path)
    allowed = (
        Allowed.bound(*address, allow_hosts)
        if address is not None
        else Allowed(Allowed.loopback().names | {h.lower() for h in allow_hosts})
    )
    session = token or new_token()
    page = (STATIC_DIR / "index.html").read_text("utf-8")
    if _TOKEN_SLOT not in page:  # pragma: no cover - the shipped page has it
        raise RuntimeError(f"{STATIC_DIR / 'index.html'} has no {_TOKEN_SLOT} slot")
    page = page.replace(_TOKEN_SLOT, session)
    # Loaded now rather than by the first page that reads events, which would wait for it.
    import pyarrow.compute
    import pyarrow.dataset
    import pyarrow.parquet  # noqa: F401

    interview_lock = asyncio.Lock()

    def guarded(
        fn: Callable[[Request], Awaitable[Any]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            try:
                return JSONResponse(await fn(request))
            except Refused as exc:
                return exc.response()
            except ConfigError as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
            except RunError as exc:
                return JSONResponse({"error": str(exc)}, status_code=404)
            except AgentsimError as exc:
                return JSONResponse({"error": str(exc)}, status_code=500)

        return handle

    def endpoint(fn: Callable[[Request], Any]) -> Callable[[Request], Awaitable[Response]]:
        """``fn`` reads files: it runs in a worker thread, so that a slow page does not
        hold the others."""

        async def in_thread(request: Request) -> Any:
            return await run_in_threadpool(fn, request)

        return guarded(in_thread)

    def run_of(request: Request) -> Run:
        return ws.run(request.path_params["run"])

    def progress(run: Run) -> dict[str, Any]:
        """``_api.progress`` under the name the viewer serves the run by (a study's run is
        ``STUDY~RUN``)."""
        return {**_api.progress(run), "id": ws.name_of(run)}

    def keyed(p: dict[str, Any], what: str) -> tuple[str, str, int, str]:
        """A cache key that changes as the run moves on (``p`` is its ``progress``)."""
        return (what, p["id"], p["ticks_done"], p["status"])

    def row(run: Run, p: dict[str, Any]) -> dict[str, Any]:
        # Validating the config takes a while: once per run, not once per tick.
        total = ws.cached(("total", p["id"], p["started"]), lambda: _api.total_ticks(run))
        return {**ws.cached(keyed(p, "row"), lambda: _api.run_row(run, total)), "id": p["id"]}

    def runs(request: Request) -> Any:
        rows = {r["id"]: r for r in (row(run, progress(run)) for run in ws.runs())}
        studies = [_study.study_entry(name, f, rows) for name, f in ws.studies().items()]
        return {"workspace": str(ws.root), "runs": list(rows.values()), "studies": studies}

    def study(request: Request) -> Any:
        name = request.path_params["study"]
        folder = ws.study(name)
        rows = {r["id"]: r for r in (row(run, progress(run)) for run in ws.runs())}
        entry = _study.study_entry(name, folder, rows)
        # The comparison is read again only when one of the study's runs moved on.
        moved = tuple(
            (r["id"], r["ticks_done"], r["status"]) for r in rows.values()
            if r["id"].startswith(name + "~")
        )  # fmt: skip
        stamp = (folder / "manifest.json").stat().st_mtime_ns
        page = ws.cached(("study", name, stamp, moved),
                         lambda: _study.study_page(name, folder, entry))  # fmt: skip
        return {**page, "runs": [rows[k] for k in rows if k.startswith(name + "~")]}

    def status(request: Request) -> Any:
        return progress(run_of(request))

    def run_page(request: Request) -> Any:
        run = run_of(request)
        p = progress(run)
        summary = ws.cached(keyed(p, "summary"), lambda: _api.run_summary(run))
        metrics = run.metrics()
        return {**row(run, p), "metrics": metrics, "behaviour": _api.behaviour(metrics), **summary}

    def surveys(request: Request) -> Any:
        run = run_of(request)
        name = request.path_params["name"]
        off, lim = _int(request, "offset", 0), _int(request, "limit", _PAGE, lo=1, hi=500)
        return _api.survey_answers(run, name, offset=off, limit=lim)

    def agents(request: Request) -> Any:
        run = run_of(request)
        page = find_agents(
            run,
            search=request.query_params.get("search", ""),
            offset=_int(request, "offset", 0),
            limit=_int(request, "limit", _PAGE, lo=1, hi=500),
        )
        return {"total": page.total, "agents": list(page.agent_ids)}

    def agent(request: Request) -> Any:
        run = run_of(request)
        record = ws.agent(run, request.path_params["agent"])
        return {
            "agent_id": record.agent_id,
            "run": progress(run),
            "profile": record.profile(),
            "skills": record.skills(),
        }

    def steps(request: Request) -> Any:
        run = run_of(request)
        record = ws.agent(run, request.path_params["agent"])
        start = _int(request, "start", 0)
        end = _int(request, "end", start + _STEPS_SPAN - 1, lo=start)
        return agent_steps(record, start=start, end=end)

    def prompt(request: Request) -> Any:
        run = run_of(request)
        record = ws.agent(run, request.path_params["agent"])
        return record.prompt_at(_int(request, "tick", 0)).to_dict()

    async def ask(request: Request) -> Any:
        from agentsim.inspect.interview import interview

        check_post(request, session)  # before anything is read or looked up
        body = await read_json_body(request)
        run = run_of(request)
        record = ws.agent(run, request.path_params["agent"])
        question = body.get("question") if isinstance(body, dict) else None
        if not isinstance(question, str):
            raise ConfigError(
                "question", "the request has no question", 'send {"question": "..."} as JSON'
            )
        if len(question) > MAX_QUESTION:
            raise ConfigError(
                "question",
                f"the question has {len(question):,} characters, over {MAX_QUESTION:,}",
                "ask a shorter question",
            )
        async with interview_lock:  # one at a time: each rebuilds an agent and its model
            result = await interview(run, record.agent_id, question)
        return result.to_dict()

    def world(request: Request) -> Any:
        run = run_of(request)
        limit = _int(request, "limit", _api.WORLD_AGENTS, lo=1, hi=_api.WORLD_AGENTS)
        p = progress(run)
        # The layouts hold every agent's profile: built once per run, not once per tick.
        layouts = ws.cached(("layouts", p["id"], p["started"]), lambda: env_layouts(run))
        data = ws.cached((*keyed(p, "world"), limit), lambda: _api.world(run, layouts, limit=limit))
        return {**data, "run": p}

    async def index(request: Request) -> Response:
        # The page carries the session's token: never kept by a cache.
        return HTMLResponse(page, headers={"Cache-Control": "no-store"})

    def not_found(request: Request) -> Any:
        raise RunError(
            f"{request.url.path} is not served; the viewer serves its pages and /api/runs/..."
        )

    routes = [
        Route("/", index),
        Route("/api/runs", endpoint(runs)),
        Route("/api/runs/{run}", endpoint(run_page)),
        Route("/api/runs/{run}/status", endpoint(status)),
        Route("/api/runs/{run}/surveys/{name}", endpoint(surveys)),
        Route("/api/runs/{run}/world", endpoint(world)),
        Route("/api/runs/{run}/agents", endpoint(agents)),
        Route("/api/runs/{run}/agents/{agent}", endpoint(agent)),
        Route("/api/runs/{run}/agents/{agent}/steps", endpoint(steps)),
        Route("/api/runs/{run}/agents/{agent}/prompt", endpoint(prompt)),
        Route("/api/runs/{run}/agents/{agent}/interview", guarded(ask), methods=["POST"]),
        Route("/api/studies/{study}", endpoint(study)),
        Route("/api/{rest:path}", endpoint(not_found)),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    app = Starlette(routes=routes, middleware=[Middleware(HostGuard, allowed=allowed)])
    app.state.token = session
    return app
