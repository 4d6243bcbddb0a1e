"""loadgen: load testing and SLO capacity planning for OpenAI-compatible LLM endpoints.

Import-light on purpose: ``planner`` imports ``loadgen.results``, which runs
this file, so nothing here may pull in httpx, asyncio servers or rich.
"""

__version__ = "0.1.0"
