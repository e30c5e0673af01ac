"""Chat models: the ``ChatModel`` seam, the offline scripted model, the OpenAI-compatible
client with its limiter, and record/replay."""
