"""Errors in the operator's words: a stream's UUID, which an error from the store may
name, becomes the id of the thread it belongs to when the command line knows it."""

from __future__ import annotations

import argparse

from covonaut_es.domain import thread_aggregate_id


def name_threads(message: str, args: argparse.Namespace) -> str:
    """``message`` with ``stream UUID`` of each thread the arguments name replaced by
    ``thread 'ID'``."""
    for thread_id in (getattr(args, "thread", None), getattr(args, "new_thread_id", None)):
        if thread_id:
            stream = f"stream {thread_aggregate_id(thread_id)}"
            message = message.replace(stream, f"thread {thread_id!r}")
    return message
