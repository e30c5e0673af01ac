"""Where agents live and step: ``AgentHost``, the local executor and the Ray executor."""
