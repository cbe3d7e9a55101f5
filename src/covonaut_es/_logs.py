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


class _OneLine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = printable(record.getMessage()), None
        return True


_ONE_LINE = _OneLine()


def logger(name: str) -> logging.Logger:
    """The logger ``name`` (``covonaut_es`` or one below it), its records made safe."""
    log = logging.getLogger(name)
    if _ONE_LINE not in log.filters:
        log.addFilter(_ONE_LINE)
    return log


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
