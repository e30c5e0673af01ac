"""Entry point of ``process`` isolation: ``python -m agentsim.skills._isolated``.

Reads a pickled request ``{script, argv, ctx, output_cap}`` from stdin, runs the script
inline with a fresh ``ScriptRunner`` (the parent enforces the timeout by killing our process
group) and writes the ``ScriptResult`` as one JSON object to the original stdout. Anything
written to file descriptor 1 by the script (or by C code it calls) goes to stderr instead,
so it cannot corrupt that reply. The host never imports the script: this process does.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import pickle
import sys
from typing import Any


def serve(request: bytes) -> str:
    """Run the pickled request and return the JSON reply (the child's whole job, minus fds)."""
    from agentsim.skills.scripts import ScriptRunner

    data: dict[str, Any] = pickle.loads(request)
    runner = ScriptRunner(output_cap=data["output_cap"], default_timeout=math.inf)
    result = asyncio.run(runner.run(data["script"], data["argv"], data["ctx"]))
    return json.dumps(result.to_dict(), ensure_ascii=False)


def main() -> int:
    reply = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    reply.write(serve(sys.stdin.buffer.read()))
    reply.close()
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a child process, see _proc.run_in_child
    sys.exit(main())
