"""Where agents live and step: ``AgentHost``, the local executor and the Ray executor."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentsim.config.experiment import ExperimentConfig
    from agentsim.hosts.protocol import Executor

__all__ = ["executor_for"]


def executor_for(config: ExperimentConfig) -> Executor:
    """The executor ``config.executor`` names: Ray actors (``kind: ray``) or this process."""
    if config.executor.kind == "ray":
        from agentsim.hosts.ray_executor import RayExecutor

        return RayExecutor(
            address=config.executor.address,
            heartbeat_timeout=config.executor.heartbeat_timeout,
            connect_timeout=config.executor.connect_timeout,
        )
    from agentsim.hosts.local import LocalExecutor

    return LocalExecutor()
