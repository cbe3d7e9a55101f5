"""The package's loggers, whose every record is one line of what is stored.

Log messages carry text from outside the process (thread ids, a tool's reason for
pausing, a provider's or a database's error): a newline in it would forge a log line,
an escape sequence would reach the operator's terminal. Each logger here renders the
whole message through :func:`~covonaut_es._text.printable` before any handler sees it,
so no call site has to remember to.
"""

from __future__ import annotations

import logging

from covonaut_es._text import printable
from covonaut_es.errors import NewerSchemaError

_TRACEBACKS = logging.Formatter()


class _OneLine(logging.Filter):
    """The record's message, with the traceback and stack it carries, as one line: an
    exception's text (a provider's error body, a tool's) is outside text too."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + _TRACEBACKS.formatException(record.exc_info)
        elif record.exc_text:
            message += "\n" + record.exc_text
        if record.stack_info:
            message += "\n" + _TRACEBACKS.formatStack(record.stack_info)
        record.msg, record.args = printable(message), None
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


class _EscapedArguments(logging.Filter):
    """Each of the record's arguments escaped, their tuple kept: for a formatter that
    reads them one by one (uvicorn's access log)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(printable(a) if isinstance(a, str) else a for a in record.args)
        return True


_ONE_LINE = _OneLine()
_ESCAPED_ARGUMENTS = _EscapedArguments()


def logger(name: str) -> logging.Logger:
    """The logger ``name`` (``covonaut_es`` or one below it), its records made safe.
    A filter sees only the records logged to its own logger, so each module's logger
    is made here."""
    log = logging.getLogger(name)
    if _ONE_LINE not in log.filters:
        log.addFilter(_ONE_LINE)
    return log


def escape_uvicorn_records() -> None:
    """uvicorn's log lines made safe as the package's, once uvicorn has set its logging
    up: its error log's records one line each (a traceback quotes what a request held),
    its access log's arguments each escaped."""
    logger("uvicorn.error")
    access = logging.getLogger("uvicorn.access")
    if _ESCAPED_ARGUMENTS not in access.filters:
        access.addFilter(_ESCAPED_ARGUMENTS)


def pass_over(log: logging.Logger, reader: str, position: int, error: Exception, then: str) -> None:
    """Warn that ``reader`` passes over the record at log ``position``, which does not
    decode (``error``), and what ``then`` follows from it. The record is named by its
    position and the error by its class alone: the error's text names the record's
    stream, whose unkeyed id an encrypted store keeps out of clear text. A record that
    says a newer version of the library wrote it is passed over too (one row rewritten
    so, by damage or by hand, must not stop a reader of every thread, ADR 0070), and
    the warning says to upgrade: what ``then`` says to repair is repaired by that."""
    why = (
        "a newer version of covonaut-es wrote it, or it was retitled: upgrade covonaut-es "
        "to read it"
        if isinstance(error, NewerSchemaError)
        else "it does not decode"
    )
    log.warning(
        "%s: passing over the record at log position %d (%s: %s); %s",
        reader,
        position,
        type(error).__name__,
        why,
        then,
    )
