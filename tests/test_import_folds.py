"""An import against whoever edits an export of a store without a chain key and reseals
it, as anyone can: events repeated, moved or taken from the other thread, the chain and
the trailer computed again. Each line still decodes; what imports must also fold into
threads, or one thread that no read can load would break every listing of the store
(``threads``, ``reviews``) from then on. So the import refuses, writing nothing, or
every thread it brings in loads and the store lists as before."""

from __future__ import annotations

import contextlib
import functools
import io
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import open_store
from covonaut_es.audit import export_thread, import_threads
from covonaut_es.audit._trailer import Tally
from covonaut_es.cli import main
from covonaut_es.errors import TransferError
from covonaut_es.service import ThreadService
from covonaut_es.store._chain import CHAIN_FIELD, UNCHAINED, chain_hash
from test_transfer import NOW, converse

BRANCH = 5
"""The version of ``t`` that fork ``t-b`` branches from."""


@functools.cache
def _exported() -> tuple[dict[str, Any], ...]:
    """The events of thread ``t``, paused on a review, then those of its fork ``t-b``."""
    with open_store("memory://") as store:
        converse(store, "t", review=True)
        store.fork("t", at_version=BRANCH, new_thread_id="t-b", now=NOW)
        ThreadService(store, clock=lambda: NOW).label("t-b", "the other way")
        lines = [*list(export_thread(store, "t"))[:-1], *list(export_thread(store, "t-b"))[:-1]]
    return tuple(json.loads(line) for line in lines)


def _resealed(events: list[dict[str, Any]]) -> list[str]:
    """The lines of ``events``, each thread's numbered from its first and its chain
    sealed again (a fork's from its parent's link at the branch), and a trailer."""
    links: dict[str, dict[int, str]] = {}
    tally = Tally()
    lines = []
    for event in events:
        thread = links.setdefault(event["thread_id"], {})
        first = BRANCH + 1 if event["thread_id"] == "t-b" else 1
        event["version"] = first + len(thread)
        if thread:
            previous = thread[event["version"] - 1]
        else:
            previous = links["t"][BRANCH] if first > 1 else UNCHAINED
        payload = {k: v for k, v in event["payload"].items() if k != CHAIN_FIELD}
        payload[CHAIN_FIELD] = chain_hash(previous, event["topic"], event["version"], payload)
        event["payload"] = payload
        thread[event["version"]] = payload[CHAIN_FIELD]
        tally.add(event["thread_id"], payload)
        lines.append(json.dumps(event) + "\n")
    return [*lines, tally.trailer_line() + "\n"]


@st.composite
def _edited_exports(draw: st.DrawFn) -> list[str]:
    """The export with one event of either thread repeated at, or moved to, a place of
    a thread after its first event, resealed (``t`` keeps more than the fork's branch)."""
    events = [dict(e, payload=dict(e["payload"])) for e in _exported()]
    own = {t: [i for i, e in enumerate(events) if e["thread_id"] == t] for t in ("t", "t-b")}
    into = draw(st.sampled_from(["t", "t-b"]))
    places = [*own[into][1:], own[into][-1] + 1]
    at = draw(st.sampled_from(places))
    source = draw(st.integers(0, len(events) - 1))
    moved = dict(events[source], thread_id=into, payload=dict(events[source]["payload"]))
    if draw(st.booleans()) and source not in (own["t"][0], own["t-b"][0]):
        events.pop(source)
        at -= source < at
    events.insert(at, moved)
    return _resealed(events)


def _command(*args: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(list(args))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=_edited_exports())
def test_a_resealed_export_imports_threads_that_load_or_nothing(
    tmp_path_factory: pytest.TempPathFactory, lines: list[str]
) -> None:
    url = f"sqlite:///{tmp_path_factory.mktemp('import') / 'threads.db'}"
    with open_store(url) as store:
        converse(store, "there", review=True)
        try:
            imported = import_threads(store, lines)
        except TransferError:
            assert list(store.thread_ids()) == ["there"]
            return
        for thread_id in imported:
            store.load(thread_id)
    assert _command("threads", "--store", url) == 0
    assert _command("reviews", "--json", "--store", url) == 0
