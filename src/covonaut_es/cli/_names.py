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
    named.update(ast.literal_eval(quoted) for quoted in _QUOTED_THREAD.findall(message))
    for thread_id in named:
        if isinstance(thread_id, str) and thread_id:
            try:
                stream = f"stream {thread_aggregate_id(thread_id)}"
            except InvalidThreadIdError:  # no text: no stream is its
                continue
            message = message.replace(stream, f"thread {thread_id!r}")
    return message
