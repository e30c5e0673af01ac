"""agentsim: a runtime for large multi-agent simulations whose LLM agents load skills lazily."""

__version__ = "0.1.0"
