"""Errors the user can cause (one clear line, no traceback) and per-request error kinds.

``LoadgenError`` and its subclasses are *expected* failures: bad input, an
unreachable endpoint, a corrupt results file. The CLI prints their message on
one line and exits with ``exit_code``. Anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

import enum
import json
import sys
from typing import Any


class LoadgenError(Exception):
    """An expected failure with a one-line message meant for the user."""

    exit_code: int = 3


class UsageError(LoadgenError):
    """A flag or argument value that cannot work (exit code 2, like typer's own)."""

    exit_code = 2


class ProfileError(LoadgenError):
    """A workload profile that does not validate."""

    exit_code = 2


class ResultsError(LoadgenError):
    """A results file that is missing, corrupt or unreadable."""


class MissingResultsFile(ResultsError):
    """A results file argument that names no file: a usage error (exit 2), not untrustworthy data."""

    exit_code = 2


class SchemaVersionError(ResultsError):
    """A results file written by a newer loadgen than this one."""


class EndpointError(LoadgenError):
    """The target endpoint cannot be used at all (unreachable, 401, not OpenAI-shaped)."""


def parse_json(text: str | bytes, where: str, kind: str = "JSON", error: type[LoadgenError] = UsageError) -> Any:
    """``json.loads``, or ``error`` in one line naming ``where`` and the ``kind`` of JSON it should be: the
    parser's reason and line, or that it nests too deeply (the parser's recursion, not a traceback)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{where}: not valid {kind} ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise error(f"{where}: {kind} nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise error(f"{where}: not valid {kind} (not UTF-8 text: {exc.reason} at byte {exc.start})") from None
    except ValueError:  # json's only other refusal: an integer past Python's digit limit (4,300)
        raise error(
            f"{where}: not valid {kind} (an integer of more than {sys.get_int_max_str_digits():,} digits)"
        ) from None


class ErrorKind(enum.StrEnum):
    """Why one request failed. The values are the JSON keys in results files."""

    HTTP_4XX = "http_4xx"
    HTTP_429 = "http_429"  # kept apart: it means "back off", not "broken"
    HTTP_5XX = "http_5xx"
    TIMEOUT = "timeout"
    CONNECT = "connect"
    STREAM_BROKEN = "stream_broken"  # connection lost, or the stream ended without [DONE]
    MALFORMED_CHUNK = "malformed_chunk"  # an SSE data line that is not the JSON we expect, or an oversized event
    PROTOCOL = "protocol"  # not valid HTTP: a bad status line, an oversized header, broken framing


def error_kind_for_status(status: int) -> ErrorKind:
    """Map an HTTP status >= 400 to its error kind."""
    if status == 429:
        return ErrorKind.HTTP_429
    if status >= 500:
        return ErrorKind.HTTP_5XX
    return ErrorKind.HTTP_4XX
