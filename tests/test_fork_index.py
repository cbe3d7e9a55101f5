"""The forks under one thread are read from the store's index of forks by parent, and a
thread's ancestors from their first events: after any forks, asked between them or not,
every query of one thread's tree answers what the tree of every fork in the log does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import Message, Role, Store, open_store
from covonaut_es.domain import AgentThread

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def roots(store: Store, count: int) -> list[str]:
    made = []
    for index in range(count):
        thread = AgentThread.start(f"r{index}", now=T0)
        for turn in range(3):
            thread.append_message(Message(Role.USER, f"turn {turn}"), now=T0)
        store.save(thread)
        made.append(f"r{index}")
    return made


def same_as_the_whole_log(store: Store, threads: list[str]) -> None:
    whole = store.session_tree()
    for thread_id in threads:
        root = whole.path_to_root(thread_id)[-1]
        assert store.children(thread_id) == whole.children(thread_id)
        assert store.path_to_root(thread_id) == whole.path_to_root(thread_id)
        assert store.leaves(root) == whole.leaves(root)
        assert store.branch_points(root) == whole.branch_points(root)
        assert store.tree_stats(root) == whole.stats(root)
        assert store.tree(root) == whole.tree(root, lambda t: tuple(store.load(t).labels))


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 30), st.integers(1, 4), st.booleans()), min_size=1, max_size=12
    )
)
def test_one_threads_tree_from_the_index_is_the_tree_of_the_whole_log(
    tmp_path_factory: Any, steps: list[tuple[int, int, bool]]
) -> None:
    """Property: forks of roots and of forks, at any version, with the tree asked for
    between forks (the index then reads only the log written since), give for every
    thread the children, path, leaves, branch points, counts and tree the whole log does."""
    path = tmp_path_factory.mktemp("forks") / "threads.db"
    with open_store(f"sqlite:///{path}", clock=lambda: T0 + timedelta(seconds=1)) as store:
        threads = roots(store, 3)
        for step, (n, version, ask) in enumerate(steps):
            parent = threads[n % len(threads)]
            at = min(version, store.state_at(parent).version)
            threads.append(store.fork(parent, at_version=at, new_thread_id=f"f{step}"))
            if ask:
                same_as_the_whole_log(store, threads)
        same_as_the_whole_log(store, threads)
        with open_store(f"sqlite:///{path}") as other:  # a fresh index reads them all
            same_as_the_whole_log(other, threads)


def test_forks_written_by_another_store_object_are_found(tmp_path: Any) -> None:
    """A fork written through another connection after the index was read is found by
    the next query: the index reads the log written since it last did."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as reader, open_store(url) as writer:
        roots(writer, 1)
        assert reader.children("r0") == ()
        writer.fork("r0", new_thread_id="r0-a")
        writer.fork("r0-a", new_thread_id="r0-a-b")
        assert reader.children("r0") == ("r0-a",)
        assert reader.leaves("r0") == ("r0-a-b",)
        assert reader.path_to_root("r0-a-b") == ("r0-a-b", "r0-a", "r0")
