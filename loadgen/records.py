"""Optional raw per-request records (``--records out.jsonl``), one JSON object per line.

Never inside the results file. Records hold timestamps, counts and a short
error reason only: no prompts, headers or keys.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import IO

from loadgen.client import RequestRecord
from loadgen.results import Load


class RecordsWriter:
    def __init__(self, path: Path) -> None:
        self._file: IO[str] = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._load: Load | None = None

    def set_level(self, load: Load) -> None:
        self._load = load

    def write(self, record: RequestRecord) -> None:
        row = dataclasses.asdict(record)
        row["load"] = self._load.label if self._load else None
        self._file.write(json.dumps(row) + "\n")

    def close(self) -> None:
        self._file.close()
