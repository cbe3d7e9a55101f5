"""Errors in the operator's words: a stream's UUID, which an error from the store may
name, becomes the id of the thread it belongs to when the command line knows it."""

from __future__ import annotations

import argparse
import ast
import re

from covonaut_es.domain import thread_aggregate_id
from covonaut_es.errors import InvalidThreadIdError

_QUOTED_THREAD = re.compile(r"""thread ('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")
"""``thread 'ID'`` as messages name a thread (the id as Python's ``repr`` writes it)."""


def name_threads(message: str, args: argparse.Namespace) -> str:
    """``message`` with ``stream UUID`` of each thread the arguments or the message
    itself name replaced by ``thread 'ID'``."""
    named = {getattr(args, "thread", None), getattr(args, "new_thread_id", None)}
    named.update(map(_quoted_id, _QUOTED_THREAD.findall(message)))
    for thread_id in named:
        if isinstance(thread_id, str) and thread_id:
            try:
                stream = f"stream {thread_aggregate_id(thread_id)}"
            except InvalidThreadIdError:  # no text: no stream is its
                continue
            message = message.replace(stream, f"thread {thread_id!r}")
    return message


def _quoted_id(quoted: str) -> str | None:
    """The id ``thread 'ID'`` names, or None where the quote is no ``repr`` of one: a
    message may quote text from outside (a file's or a store's name) that only reads
    like one, with an escape Python does not know or a byte that is no UTF-8."""
    try:
        found = ast.literal_eval(quoted)
    except (SyntaxError, ValueError):  # UnicodeError is a ValueError
        return None
    return found if isinstance(found, str) else None
