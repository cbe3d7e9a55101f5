"""Branching threads: ``fork`` a thread at a version, and show the ``tree`` of forks
under one."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import msgspec

from covonaut_es._text import json_printable, printable
from covonaut_es.cli._command import EXIT_OK, Subcommands
from covonaut_es.cli._json import emit_record
from covonaut_es.cli._options import add_store_command, open_from, read_thread
from covonaut_es.domain import ThreadTree
from covonaut_es.store import Store


def add_fork_commands(subcommands: Subcommands) -> None:
    """Declare ``fork`` and ``tree``."""
    parser = add_store_command(subcommands, "fork", fork, help_="fork a thread at a version")
    parser.add_argument("thread")
    parser.add_argument("--at", type=int, metavar="VERSION", help="default: the head")
    parser.add_argument("--as", dest="new_thread_id", metavar="THREAD", help="the fork's id")
    add_store_command(
        subcommands, "tree", tree, help_="show the session tree under a thread"
    ).add_argument("thread")


def fork(args: argparse.Namespace) -> int:
    """``fork THREAD --at VERSION``: prints the new thread's id."""
    with open_from(args, records=True) as store:
        new_id = store.fork(args.thread, at_version=args.at, new_thread_id=args.new_thread_id)
        parent = store.parent(new_id)
    assert parent is not None
    record = {"thread_id": new_id, "parent_thread_id": parent.thread_id}
    emit_record(args, {**record, "parent_version": parent.version})
    return EXIT_OK


def tree(args: argparse.Namespace) -> int:
    """``tree THREAD``: the forks under a thread, indented, with labels."""
    root = read_thread(args, Store.tree)
    if args.json:
        print(json_printable(_tree_json(root)))
        return EXIT_OK
    for line in _tree_lines(root):
        print(printable(line))
    return EXIT_OK


def _tree_json(root: ThreadTree) -> str:
    """The tree as msgspec writes a :class:`ThreadTree`, its forks nested in each one's
    ``children``; written in a loop, since msgspec's own recursion ends short of the
    forks a chain may hold."""
    parts: list[str] = []
    stack: list[ThreadTree | str] = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            parts.append(item)
            continue
        alone = msgspec.json.encode(msgspec.structs.replace(item, children=())).decode()
        parts.append(alone.removesuffix("[]}") + "[")
        stack.append("]}")
        for index in reversed(range(len(item.children))):
            stack.append(item.children[index])
            if index:
                stack.append(",")
    return "".join(parts)


def _tree_lines(root: ThreadTree) -> Iterator[str]:
    """A line per thread, each fork under its parent, indented one step further (in a
    loop: a chain of forks may be of any depth)."""
    stack = [(root, "")]
    while stack:
        node, indent = stack.pop()
        at = "" if node.parent_version is None else f" @{node.parent_version}"
        labels = "".join(f" [{label.name}]" for label in node.labels)
        yield f"{indent}{node.thread_id}{at}{labels}"
        stack.extend((child, indent + "  ") for child in reversed(node.children))
