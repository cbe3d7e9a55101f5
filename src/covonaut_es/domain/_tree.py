"""The session tree: threads linked by forks, and the queries over it.

The tree is derived from the store's ``Forked`` events alone: each names its parent
thread and version, so no parent stream is ever written to when it is forked.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime

import msgspec

from covonaut_es.domain._values import Label, ThreadParent


class ForkRecord(msgspec.Struct, frozen=True):
    """One fork: the new thread, where it branched off, and when."""

    thread_id: str
    parent: ThreadParent
    forked_at: datetime


class BranchPoint(msgspec.Struct, frozen=True):
    """A version of a thread from which one or more forks branched."""

    thread_id: str
    version: int
    children: tuple[str, ...]


class ThreadTree(msgspec.Struct, frozen=True):
    """A thread and its forks, recursively.

    Attributes:
        thread_id: The thread.
        parent_version: The parent's version this thread branched at (None for a root).
        labels: The thread's labels.
        children: Forks of this thread, oldest first.
    """

    thread_id: str
    parent_version: int | None
    labels: tuple[Label, ...]
    children: tuple[ThreadTree, ...]


class TreeStats(msgspec.Struct, frozen=True):
    """Counts over a session tree."""

    threads: int
    forks: int
    depth: int
    leaves: int
    branch_points: int


class SessionTree:
    """Queries over the forks of a store."""

    def __init__(self, forks: Iterable[ForkRecord]) -> None:
        self._parents: dict[str, ThreadParent] = {}
        self._children: defaultdict[str, list[str]] = defaultdict(list)
        for fork in sorted(forks, key=lambda f: f.forked_at):
            self._parents[fork.thread_id] = fork.parent
            self._children[fork.parent.thread_id].append(fork.thread_id)

    def parent(self, thread_id: str) -> ThreadParent | None:
        """The thread and version a fork branched from; None for a root."""
        return self._parents.get(thread_id)

    def children(self, thread_id: str) -> tuple[str, ...]:
        """The direct forks of a thread, oldest first."""
        return tuple(self._children.get(thread_id, ()))

    def path_to_root(self, thread_id: str) -> tuple[str, ...]:
        """The thread, its parent, and so on up to the root (or, where forks were
        altered into a loop, up to the last thread before it comes round again)."""
        path, seen = [thread_id], {thread_id}
        while (parent := self._parents.get(path[-1])) is not None:
            if parent.thread_id in seen:
                break
            path.append(parent.thread_id)
            seen.add(parent.thread_id)
        return tuple(path)

    def descendants(self, root_thread_id: str) -> tuple[str, ...]:
        """The root and every thread forked from it, directly or not, depth first."""
        return tuple(self._walk(root_thread_id))

    def _walk(self, root_thread_id: str) -> dict[str, list[str]]:
        """The root and every thread under it, depth first, each with its forks met
        first under it: every thread once, where forks altered into a loop would
        otherwise be met again and again."""
        walked: dict[str, list[str]] = {}
        seen, stack = {root_thread_id}, [root_thread_id]
        while stack:
            thread_id = stack.pop()
            forks = dict.fromkeys(self.children(thread_id))  # a fork listed twice, once
            walked[thread_id] = [fork for fork in forks if fork not in seen]
            seen.update(walked[thread_id])
            stack.extend(reversed(walked[thread_id]))
        return walked

    def leaves(self, root_thread_id: str) -> tuple[str, ...]:
        """Threads under the root (the root included) that have no forks."""
        return tuple(t for t in self.descendants(root_thread_id) if not self.children(t))

    def branch_points(self, root_thread_id: str) -> tuple[BranchPoint, ...]:
        """Every (thread, version) under the root that forks branched from."""
        points: list[BranchPoint] = []
        for thread_id in self.descendants(root_thread_id):
            by_version: defaultdict[int, list[str]] = defaultdict(list)
            for child in self.children(thread_id):
                by_version[self._parents[child].version].append(child)
            points.extend(
                BranchPoint(thread_id, version, tuple(kids))
                for version, kids in sorted(by_version.items())
            )
        return tuple(points)

    def tree(
        self, root_thread_id: str, labels_of: Callable[[str], tuple[Label, ...]]
    ) -> ThreadTree:
        """The nested tree under the root, with each thread's labels; built from the
        leaves up in one loop, so that a chain of forks may be of any depth."""
        built: dict[str, ThreadTree] = {}
        walked = self._walk(root_thread_id)
        for thread_id in reversed(walked):  # forks first
            parent = self._parents.get(thread_id)
            built[thread_id] = ThreadTree(
                thread_id=thread_id,
                parent_version=parent.version if parent and thread_id != root_thread_id else None,
                labels=labels_of(thread_id),
                children=tuple(built[child] for child in walked[thread_id]),
            )
        return built[root_thread_id]

    def stats(self, root_thread_id: str) -> TreeStats:
        """How many threads, forks, leaves and branch points, and how deep."""
        walked = self._walk(root_thread_id)
        threads = tuple(walked)
        depths = {root_thread_id: 0}
        for thread_id, forks in walked.items():  # each parent before its forks
            depths.update((fork, depths[thread_id] + 1) for fork in forks)
        depth = max(depths.values())
        return TreeStats(
            threads=len(threads),
            forks=len(threads) - 1,
            depth=depth,
            leaves=len(self.leaves(root_thread_id)),
            branch_points=len(self.branch_points(root_thread_id)),
        )
