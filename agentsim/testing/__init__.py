"""Public test helpers: a real OpenAI-compatible server for loopback tests
(``agentsim.testing.openai_server.OpenAITestServer``) and skill-output parsing
(``agentsim.testing.skills.suggestions``)."""
