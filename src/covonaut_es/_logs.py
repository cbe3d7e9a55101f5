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
