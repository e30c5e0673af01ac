"""``agentsim view``: a local, read-only web viewer of a workspace's runs (docs/inspection.md)."""

from agentsim.view.app import create_app

__all__ = ["create_app"]
