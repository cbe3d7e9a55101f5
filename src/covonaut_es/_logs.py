"""The package's loggers, whose every record shows only escaped text.

Log messages carry text from outside the process (thread ids, a tool's reason for
pausing, a provider's or a database's error): a newline in it would forge a log line,
an escape sequence would reach the operator's terminal. Each logger here renders the
whole message through :func:`~covonaut_es._text.printable` before any handler sees it,
so no call site has to remember to; the traceback and stack a record carries are
escaped too, each one line after the message, and the exception stays on the record
for handlers that read it (an error tracker). The command line puts the same filter on
the handlers it sets up, which see other libraries' records too (an MCP SDK's quoting
what a server sent).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, TypeVar

from covonaut_es._text import printable
from covonaut_es.errors import CovonautError, NewerSchemaError

_TRACEBACKS = logging.Formatter()


class _OneLine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception as exc:  # past a filter, logging would let it reach the caller
            template = record.msg if isinstance(record.msg, str) else type(record.msg).__name__
            message = f"{template} (its arguments do not format: {type(exc).__name__})"
        record.msg, record.args = printable(message), None
        record.__dict__.pop("color_message", None)  # uvicorn's, filled from the arguments
        if record.exc_info and not record.exc_text:
            record.exc_text = _traceback_of(record)
        if record.exc_text:
            record.exc_text = printable(record.exc_text)
        if record.stack_info:
            record.stack_info = printable(record.stack_info)
        return True


def _traceback_of(record: logging.LogRecord) -> str:
    """The traceback ``record`` carries, as ``logging`` writes it, or a line naming the
    exception's class where it does not format (an exception whose attributes raise):
    past a filter, the error would reach the code that logged."""
    assert record.exc_info  # a record with an exception
    try:
        return _TRACEBACKS.formatException(record.exc_info)
    except Exception as exc:
        raised = type(record.exc_info[1]).__name__
        return f"{raised} (its traceback does not format: {type(exc).__name__})"


class _EscapedArguments(logging.Filter):
    """Each of the record's arguments escaped, their tuple kept: for a formatter that
    reads them one by one (uvicorn's access log)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(printable(a) if isinstance(a, str) else a for a in record.args)
        return True


_ONE_LINE = _OneLine()
_ESCAPED_ARGUMENTS = _EscapedArguments()


def _add(holder: logging.Filterer, escaping: logging.Filter) -> None:
    if escaping not in holder.filters:
        holder.addFilter(escaping)


def logger(name: str) -> logging.Logger:
    """The logger ``name`` (``covonaut_es`` or one below it), its records made safe.
    A logger's filter sees only the records logged to it, so each module's logger is
    made here."""
    log = logging.getLogger(name)
    _add(log, _ONE_LINE)
    return log


def escape_handlers(*handlers: logging.Handler | None) -> None:
    """Make safe every record ``handlers`` write, whichever library logged it: for the
    handlers the command line sets up (None, as ``logging.lastResort`` may be, is
    passed over)."""
    for handler in handlers:
        if handler is not None:
            _add(handler, _ONE_LINE)


def escape_arguments(*handlers: logging.Handler) -> None:
    """Make safe the arguments of every record ``handlers`` write, each escaped and
    their tuple kept: for a handler whose formatter reads them one by one."""
    for handler in handlers:
        _add(handler, _ESCAPED_ARGUMENTS)


class _Positioned(Protocol):
    @property
    def id(self) -> int: ...


R = TypeVar("R", bound=_Positioned)
T = TypeVar("T")


def passing_over(
    log: logging.Logger,
    records: Iterable[R],
    read: Callable[[R], T],
    *,
    reader: str,
    then: str,
) -> Iterator[tuple[R, T | None]]:
    """Each of the log's ``records`` with what ``read`` makes of it; for one it cannot
    read (a :class:`~covonaut_es.errors.CovonautError`), None, after warning that
    ``reader`` passes it over and what ``then`` follows (:func:`pass_over`): one
    damaged record never stops a reader of every thread, nor goes unsaid."""
    for record in records:
        try:
            found = read(record)
        except CovonautError as exc:
            pass_over(log, reader, record.id, exc, then)
            yield record, None
        else:
            yield record, found


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
