"""Whatever a chat client sends, the AG-UI endpoint neither drops its new message
without a word nor tells it of a thread the store does not hold (helper-249).

Each request is one of every combination of: a thread paused on its reviews or one
the store holds nothing of; a resume deciding the reviews or none; and a last message
that is absent, the thread's own sent again, the same id with other text, or new. The
invariants: a new user message is stored (it ran) or the request was refused with
nothing recorded; every STATE_SNAPSHOT's version is one the store holds the thread at
then (0 while it holds nothing)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import ag_ui.core as agui
import pytest

from covonaut_es.messages import Role
from test_agui import Shop, approvals, events_of, paused, user_says

LAST = {
    "none": None,
    "sent again": ("u-1", "Refund my two orders."),
    "its id with other text": ("u-1", "Refund my orders."),
    "new": ("u-2", "Also refund order C-3, please."),
}


@pytest.mark.parametrize(
    ("thread", "resume", "last"),
    list(itertools.product(["paused", "unknown"], [True, False], LAST)),
)
def test_a_new_message_is_run_or_refused_and_snapshots_tell_the_stored_version(
    tmp_path: Path, thread: str, resume: bool, last: str
) -> None:
    shop = Shop(tmp_path)
    thread_id = "chat-1" if thread == "paused" else "never-started"
    interrupts = paused(shop)
    body: dict[str, Any] = {"threadId": thread_id, "runId": "r-2", "messages": []}
    if LAST[last] is not None:
        message_id, text = LAST[last]
        body = user_says(thread_id, text, message_id=message_id)
    if resume:
        body["resume"] = approvals(interrupts)
    before = shop.version(thread_id)
    response = shop.post(body, shop.token())
    if response.status_code != 200:
        assert 400 <= response.status_code < 500, response.text
        assert shop.version(thread_id) == before
        return
    events = events_of(response.text)
    snapshots = [e for e in events if isinstance(e, agui.StateSnapshotEvent)]
    assert snapshots[0].snapshot["version"] == before
    if isinstance(events[-1], agui.RunErrorEvent):
        assert shop.version(thread_id) == before  # refused in the stream: nothing recorded
        return
    assert snapshots[-1].snapshot["version"] == shop.version(thread_id)
    if last == "new":
        held = shop.store.load(thread_id).messages if shop.store.exists(thread_id) else ()
        assert [m.id for m in held if m.role is Role.USER].count("u-2") == 1, events[-1]
