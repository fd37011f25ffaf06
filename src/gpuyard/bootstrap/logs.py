"""The server's log lines: one line a record, control characters escaped."""

from __future__ import annotations

import logging
from typing import TextIO


class OneLineFormatter(logging.Formatter):
    """Every log record on one line: a newline or a control character in the message (a drain
    reason, a job's name: text a user chose) is written as an escape (`\\n`, `\\x1b`), so it
    cannot forge a line of the server's log nor move an admin's terminal. A traceback keeps its
    lines, each marked `  | ` (an exception's text may hold a user's newline too): no line
    after a record's first can pass for a record of its own."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        text = record.message
        if not text.isprintable():
            record.message = _escaped(text)
        return super().formatMessage(record)

    def format(self, record: logging.LogRecord) -> str:
        first, newline, rest = super().format(record).partition("\n")
        if not newline:
            return first
        lines = (_escaped(line) for line in rest.split("\n"))
        return first + "".join(f"\n  | {line}" for line in lines)


def _escaped(text: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class BrokenPooledConnection(logging.Filter):
    """SQLAlchemy's pool logs an ERROR with a traceback when it cannot roll back a connection
    handed back to it, which is every pooled connection whose session a PostgreSQL restart
    ended: the pool drops it and the next checkout makes a new one, so nothing is wrong but
    the log. Told as one warning line, its driver's reason kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            record.exc_info
            and record.name.startswith("sqlalchemy.pool")
            and record.getMessage().startswith("Exception during reset")
        ):
            error = record.exc_info[1]
            reason = " ".join(str(error).split()) or type(error).__name__
            record.msg = "a pooled database connection was broken (%s); dropped, a new one is made"
            record.args = (reason,)
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def configure_logging(stream: TextIO) -> None:
    """The server's log: INFO and up, one line per record (`OneLineFormatter`), to `stream`."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(OneLineFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(BrokenPooledConnection())  # on the handler: its records are a child's
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    logging.getLogger("alembic").setLevel(logging.WARNING)
