"""The experiment file: one pydantic tree, YAML loading within limits, environment
overrides, agent groups and profiles. A leaf: it imports only ``env``'s pure helpers."""
