"""Types of the compiled per-read path (``fastread.pyx``), used by ``loadgen.wire.native``."""

from collections.abc import Callable
from typing import Any

class Port:
    parser: Any
    def __init__(self, conn: Any) -> None: ...
    def arm(
        self,
        clock: Callable[[], float],
        times: list[float],
        cumulative: list[int | None],
        texts: list[str] | None,
        decoder: Any,
        state: Any,
        plain: Callable[[bytes, Any], tuple[str, int] | None],
        name: Callable[[bytes, Any], tuple[str, int, str | None] | None],
        api: Any,
    ) -> None: ...
    def disarm(self) -> None: ...
    def data_received(self, data: bytes) -> None: ...
    def on_chunk_header(self) -> None: ...
    def on_chunk_complete(self) -> None: ...
    def on_body(self, body: bytes) -> None: ...
