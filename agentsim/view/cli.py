"""``agentsim view [WORKSPACE_OR_RUN] [--host H] [--port N]``: serve the viewer until Ctrl-C."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path
from typing import Any

from agentsim.errors import ConfigError

__all__ = ["add_view_command"]


def _cmd_view(args: argparse.Namespace) -> int:
    import uvicorn

    from agentsim.view.app import create_app

    # Bound here, so that the URL printed names the port really taken (--port 0: any free).
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            "--port", f"cannot listen on {args.host}:{args.port} ({exc.strerror})", "pass --port 0"
        ) from None
    # Listening before the URL is printed: a browser (or a test) that connects at once waits
    # in the backlog until the server accepts, instead of being refused.
    sock.listen(128)
    host, port = sock.getsockname()[:2]
    try:
        # Served only to the bound address (as given and as bound), localhost and the
        # --allow-host names.
        app = create_app(
            Path(args.path), address=(host, port), allow_hosts=[args.host, *args.allow_host]
        )
    except BaseException:
        sock.close()
        raise
    shown = f"[{host}]" if ":" in host else host
    print(f"agentsim view: http://{shown}:{port}/  ({args.path}; Ctrl-C to stop)", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it handled: the normal way out
        pass
    print("agentsim view: stopped", flush=True)
    return 0


def add_view_command(sub: Any) -> None:
    view = sub.add_parser(
        "view",
        help="browse runs in a local web viewer (read-only)",
        description="Serve a read-only web viewer of a workspace's runs (or one run, or a "
        "study folder): runs, metrics, the world at each tick, each agent's steps, prompts and "
        "skills, and a study's runs by arm with the comparison of its arms. It "
        "follows runs still going. Binds 127.0.0.1 unless --host says otherwise.",
    )
    view.add_argument(
        "path",
        nargs="?",
        default="workspace",
        metavar="WORKSPACE_OR_RUN",
        help="the workspace folder, a study folder or one run folder (default: workspace)",
    )
    view.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    view.add_argument(
        "--port", type=int, default=8765, metavar="N", help="port (default: 8765; 0: any free)"
    )
    view.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer to this host name in the Host header (repeatable); by default only "
        "the bound address and localhost are served",
    )
    view.set_defaults(func=_cmd_view)
