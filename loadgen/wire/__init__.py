"""The wire: streaming requests to an OpenAI-compatible endpoint and timestamping what comes back.

Clients (the native llhttp wire, aiohttp, httpx), SSE parsing, event loops, target checks and each
request's record of timestamps. It computes no metric: ``loadgen.run.metrics`` does.
"""
