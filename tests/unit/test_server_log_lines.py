"""The server's log is one line per record: text a user chose cannot forge a line
(bootstrap.OneLineFormatter), in the message or in an exception's text."""

from __future__ import annotations

import io
import logging

from gpuyard.bootstrap import OneLineFormatter

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _formatted(message: str, *args: object, exc: BaseException | None = None) -> str:
    record = logging.LogRecord("gpuyard.test", logging.WARNING, __file__, 1, message, args,
                               (type(exc), exc, exc.__traceback__) if exc else None)  # fmt: skip
    return OneLineFormatter(_FORMAT).format(record)


def test_a_newline_in_an_argument_is_escaped_on_one_line() -> None:
    text = _formatted("GPU %s drained (%s): %s", 0, "admin", "x\nFORGED INFO all is well\r\x1b[2J")
    assert "\n" not in text and "\r" not in text and "\x1b" not in text
    assert text.endswith("x\\nFORGED INFO all is well\\r\\x1b[2J")


def test_a_traceback_keeps_its_lines_each_marked_as_a_continuation() -> None:
    try:
        raise ValueError("bad name 'a\nFORGED ERROR gpuyard: x'")
    except ValueError as exc:
        text = _formatted("failed", exc=exc)
    first, *rest = text.split("\n")
    assert first.endswith("WARNING gpuyard.test: failed") and len(rest) > 2
    assert all(line.startswith("  | ") for line in rest)
    assert not any(line.startswith("FORGED") for line in text.split("\n"))


def test_plain_records_are_unchanged() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(OneLineFormatter("%(message)s"))
    log = logging.getLogger("gpuyard.test.plain")
    log.addHandler(handler)
    log.propagate = False
    log.warning("job %s ended: %s", 7, "COMPLETED")
    assert stream.getvalue() == "job 7 ended: COMPLETED\n"
