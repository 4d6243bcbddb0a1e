"""The built-in simulated continuous-batching server (engine, OpenAI routes, front end)."""
