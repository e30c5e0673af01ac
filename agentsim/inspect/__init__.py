"""Looking at runs: ``open_run`` (Python), ``agentsim inspect``, ``interview`` and ``report``.

See docs/inspection.md. Everything here reads a run folder and never writes into it, except
``report``, which writes its own ``report/`` folder.
"""

from agentsim.inspect.run import Run, RunState, open_run

__all__ = ["Run", "RunState", "open_run"]
