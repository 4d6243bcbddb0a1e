"""``loadgen run``'s session hooks: progress, the retry rule, and with ``--records`` one raw record per request."""

from __future__ import annotations

from pathlib import Path

from loadgen.run.observe import LevelObserver
from loadgen.run.session import Session, SessionHooks
from loadgen.wire.records import RecordsWriter
from planner.evidence.verdicts import retry_reason


class RecordsHooks:
    """The session's hooks for ``run``: progress and the retry rule, and with ``--records`` one raw record per
    request written as it finishes (closed when the run ends, however it ends)."""

    def __init__(self, records: Path | None, progress: LevelObserver) -> None:
        self._records = records
        self._progress = progress
        self._writers: list[RecordsWriter] = []

    def for_session(self, session: Session) -> SessionHooks:
        if self._records is None:
            return SessionHooks(observer=self._progress, retry_policy=retry_reason)
        writer = RecordsWriter(self._records, session.secrets)
        self._writers.append(writer)
        return SessionHooks(
            observer=self._progress,
            on_record=writer.write,
            on_level_plan=lambda p: writer.set_level(p.load),
            retry_policy=retry_reason,
        )

    @property
    def failed(self) -> str | None:
        """Why writing the records stopped, if it did."""
        return next((w.failed for w in self._writers if w.failed), None)

    def __enter__(self) -> RecordsHooks:
        return self

    def __exit__(self, *exc: object) -> None:
        for writer in self._writers:
            writer.close()
