"""A hostile reviewer outside a review's scopes (a valid token, no ``payments`` scope)
asks every inbox surface about that review, in every state it can be in, and compares
the answers with those of a made-up id (or, for surfaces keyed by a thread and call,
with the answers the same surfaces give while the review is pending).

The invariant (ADR 0152, the threat model's "What a reviewer is shown"): such a reviewer
learns nothing of the review (existence, threads, arguments, status, decision) beyond
what a made-up id gives; deciding is the authorization and answers 403 "not permitted",
the same in every state. Giving the thread up is allowed once nothing waits that the
reviewer may not act on, so its answer tells whether the review still waits
(documented there).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import msgspec
import pytest

from covonaut_es import ReviewPolicy, Store, Tool, open_store
from covonaut_es.domain import AgentThread
from covonaut_es.service import ThreadService, review_submission
from covonaut_es.store._topic_codes import full_topic
from inbox_support import current, inbox_client, sign_in
from support import call
from test_approvals import PAY_SCHEMA, VERIFIER, make_agent
from test_inbox_review_policy import GUARDED, OWN, bearer, paused_on
from test_read_fold import _leaves, _reseal
from test_review_policy import LARGE, NO_SCOPE, PAY_5000, PAYMENTS

FOUR_EYES = ReviewPolicy(scopes=("payments",), four_eyes=True)


# Worlds: thread "t" holds a review outside NO_SCOPE's scopes, in some state; thread "u"
# holds a review without a policy (anyone's). Each returns the guarded review's id.


def _service(store: Store) -> ThreadService:
    return ThreadService(store, verifier=VERIFIER)


def _decide(store: Store, review_id: str, action: str, token: str, **where: Any) -> None:
    service = _service(store)
    text = "" if action == "approve" else "no"
    service.decide(
        review_id,
        review_submission(action, text=text),
        reviewer=service.reviewer(token),
        **where,
    )


def _pending(store: Store) -> str:
    return paused_on(store, "t", GUARDED)


def _rejected(store: Store) -> str:
    rid = _pending(store)
    _decide(store, rid, "reject", PAYMENTS)
    return rid


def _approved(store: Store) -> str:
    rid = _pending(store)
    _decide(store, rid, "approve", LARGE)  # 5000 is above the 1000 limit: erin may
    return rid


def _in_part(store: Store) -> str:
    rid = paused_on(store, "t", FOUR_EYES)
    _decide(store, rid, "approve", PAYMENTS)
    return rid


def _given_up(store: Store) -> str:
    rid = _pending(store)
    service = _service(store)
    service.abandon("t", "duplicate", reviewer=service.reviewer(PAYMENTS))
    return rid


def _due(store: Store) -> str:
    """Asked at 2026-01-01 with a 30-minute deadline: due by the inbox's clock (today),
    never swept."""
    tool = Tool(
        "pay", "Send a payment", PAY_SCHEMA, lambda ctx, args: {"paid": 1},
        requires_approval=True, review=GUARDED, review_deadline=timedelta(minutes=30),
    )  # fmt: skip
    agent = make_agent(store, [call(("c1", "pay", PAY_5000))], [], thread_id="t", tool=tool)
    agent.run("Pay the invoice.")
    (review,) = store.state_at("t").reviews
    return review.request.review_id


def _expired(store: Store) -> str:
    rid = _due(store)
    assert _service(store).expire_reviews("t")
    return rid


def _forked(store: Store) -> str:
    rid = _pending(store)
    store.fork("t", new_thread_id="t-fork")
    return rid


def _forked_parent_rejected(store: Store) -> str:
    rid = _forked(store)
    _decide(store, rid, "reject", PAYMENTS, thread_id="t")
    return rid


WORLDS: dict[str, Callable[[Store], str]] = {
    "pending": _pending,
    "rejected": _rejected,
    "approved": _approved,
    "approved-in-part": _in_part,
    "given-up": _given_up,
    "due": _due,
    "expired": _expired,
    "forked": _forked,
    "forked-parent-rejected": _forked_parent_rejected,
}


@pytest.fixture
def memory() -> Iterator[Callable[[], Store]]:
    opened: list[Store] = []

    def open_() -> Store:
        store = open_store("memory://")
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


def world(store: Store, name: str) -> str:
    rid = WORLDS[name](store)
    paused_on(store, "u", None)
    return rid


@attrs.frozen
class Attacked:
    """A store in one of the :data:`WORLDS`, its guarded review's id, and a made-up id
    of the same length."""

    store: Store
    name: str
    rid: str
    made_up: str


@pytest.fixture(params=sorted(WORLDS))
def attacked(memory: Callable[[], Store], request: pytest.FixtureRequest) -> Attacked:
    store = memory()
    rid = world(store, request.param)
    return Attacked(store, request.param, rid, "r" * len(rid))


def attacker_token(review_id: str, call_id: str = "c1") -> str:
    """The pause token of a review's pause, as anyone who knows the review id and its
    call computes it (service._pauses.pause_token)."""
    return hashlib.sha256(f"review\x00{call_id}\x00{review_id}".encode()).hexdigest()[:32]


def answered(response: Any) -> tuple[int, str, str, str | None]:
    """A response's status, text (each session's own CSRF token left out), type and
    redirect."""
    return (
        response.status_code,
        re.sub(r'(name="csrf" value=|data-csrf=|content=)"[^"]*"', r'\1"~"', response.text),
        response.headers.get("content-type", ""),
        response.headers.get("location"),
    )


# 1. GET by id: hidden == made-up, in every state, and no write ------------------------

BY_ID = [
    ("/api/reviews/{id}", {}),
    ("/review", {"id": "{id}"}),
    ("/review/status", {"id": "{id}"}),
]
THREADS = (None, "", "t", "t-fork", "u", "nope")


@contextlib.contextmanager
def signed_in_outside(store: Store) -> Iterator[tuple[Any, str]]:
    """An inbox client on ``store``, current, signed in as NO_SCOPE; and its CSRF token."""
    with inbox_client(store) as client:
        current(client)
        yield client, sign_in(client, NO_SCOPE)


def ask(client: Any, path: str, params: dict[str, str], rid: str, thread: str | None) -> Any:
    query = {k: v.format(id=rid) for k, v in params.items()}
    if thread is not None:
        query["thread"] = thread
    return client.get(path.format(id=rid), params=query, headers=bearer(NO_SCOPE))


def test_get_by_id_reads_as_a_made_up_id_in_every_state(attacked: Attacked) -> None:
    store, name, rid, made_up = attacked.store, attacked.name, attacked.rid, attacked.made_up
    before = store.last_log_position()
    with signed_in_outside(store) as (client, _):
        for path, params in BY_ID:
            for thread in THREADS:
                hidden = ask(client, path, params, rid, thread)
                unknown = ask(client, path, params, made_up, thread)
                where = (name, path, thread)
                assert hidden.status_code == unknown.status_code, (where, hidden.text)
                assert hidden.text.replace(rid, made_up) == unknown.text, where
                assert dict(hidden.headers) == dict(unknown.headers), where
    # No out-of-scope read records anything (a due review is not expired by it).
    assert store.last_log_position() == before, name


# 2. Deciding: 403 "not permitted", the same text in every state -----------------------


def refusal(rid: str) -> str:
    return (
        f"reviewer 'alice' may not decide review {rid!r}: it needs one of the scopes "
        "['payments'], and the reviewer's credential grants none; ask a reviewer who holds "
        "one; nothing was recorded"
    )


def test_deciding_answers_the_same_403_in_every_state(attacked: Attacked) -> None:
    store, name, rid, made_up = attacked.store, attacked.name, attacked.rid, attacked.made_up
    before = store.last_log_position()
    bodies = {"approve": {}, "reject": {"reason": "no"}, "respond": {"answer": "no"}}
    with signed_in_outside(store) as (client, csrf):
        for action, body in bodies.items():
            for thread in (None, "t", "t-fork", "u", "nope"):
                params = {} if thread is None else {"thread": thread}
                hidden = client.post(f"/api/reviews/{rid}/{action}", params=params, json=body,
                                     headers=bearer(NO_SCOPE))  # fmt: skip
                unknown = client.post(f"/api/reviews/{made_up}/{action}", params=params,
                                      json=body, headers=bearer(NO_SCOPE))  # fmt: skip
                where = (name, "api", action, thread)
                if hidden.text.replace(rid, made_up) != unknown.text:
                    assert hidden.status_code == 403, (where, hidden.text)
                    assert hidden.json() == {"error": refusal(rid)}, where
        # The pages' form.
        for thread in ("", "t", "t-fork", "u", "nope"):
            form = {"review": rid, "thread": thread, "csrf": csrf, "action": "reject",
                    "reason": "no"}  # fmt: skip
            hidden = client.post("/decide", data=form, headers=OWN)
            unknown = client.post("/decide", data={**form, "review": made_up}, headers=OWN)
            where = (name, "form", thread)
            if hidden.text.replace(rid, made_up) != unknown.text:
                assert hidden.status_code == 403, (where, hidden.text)
                assert "t-fork" not in hidden.text or thread == "t-fork", where
    assert store.last_log_position() == before, name


# 3. Surfaces keyed by a thread and a call: the same answer in every state -------------


def observe_thread_surfaces(store: Store, rid: str) -> dict[str, tuple[Any, ...]]:
    """What NO_SCOPE is answered about thread t and call c1, by every surface keyed by
    them, with and without a pause token (a wrong one, and the one the review's id and
    call give)."""
    seen: dict[str, tuple[Any, ...]] = {}
    tokens = {"none": None, "wrong": "0" * 32, "computed": attacker_token(rid)}
    with inbox_client(store) as client:
        current(client)
        csrf = sign_in(client, NO_SCOPE)
        seen["GET /pause"] = answered(client.get("/pause", params={"thread": "t", "call": "c1"}))
        for label, token in tokens.items():
            params = {"thread": "t", "call": "c1", "pause": token or ""}
            seen[f"GET /pause/status {label}"] = answered(
                client.get("/pause/status", params=params)
            )
        seen["GET /thread"] = answered(client.get("/thread", params={"id": "t"}))
        for label, token in tokens.items():
            extra = {} if token is None else {"pause": token}
            for name, body in (
                ("answer", {"answer": "yes"}),
                ("settle", {"ran": False, "note": "n"}),
                ("retry", {}),
            ):
                response = client.post(f"/api/pauses/t/c1/{name}", json={**body, **extra},
                                       headers=bearer(NO_SCOPE))  # fmt: skip
                seen[f"POST {name} {label}"] = answered(response)
            if token is not None:  # without one, giving up is the documented 403/200
                response = client.post("/api/threads/t/abandon", json={"reason": "x", **extra},
                                       headers=bearer(NO_SCOPE))  # fmt: skip
                seen[f"POST abandon {label}"] = answered(response)
                form = {"thread": "t", "call": "c1", "csrf": csrf, "action": "answer",
                        "answer": "yes", "pause": token}  # fmt: skip
                seen[f"POST /pause form {label}"] = answered(
                    client.post("/pause", data=form, headers=OWN)
                )
    return seen


STATE_CHANGES = sorted(set(WORLDS) - {"pending", "forked", "forked-parent-rejected"})


@pytest.mark.parametrize("name", STATE_CHANGES)
def test_thread_keyed_surfaces_tell_no_review_state(memory: Callable[[], Store], name: str) -> None:
    """Compared with the same thread while the review is pending: the review's
    status (decided, expired, given up, approved in part) must not show."""
    reference_store = memory()
    reference = observe_thread_surfaces(reference_store, world(reference_store, "pending"))
    store = memory()
    rid = world(store, name)
    before = store.last_log_position()
    seen = observe_thread_surfaces(store, rid)
    differ = {
        k: (reference[k][:2], seen[k][:2])
        for k in seen
        if seen[k] != reference[k] and "abandon" not in k  # allowed once nothing waits
    }
    assert not differ, (name, differ)
    assert store.last_log_position() == before


def test_the_computed_token_is_the_reviews_pause_token(memory: Callable[[], Store]) -> None:
    from covonaut_es.service import pause_token

    store = memory()
    rid = world(store, "pending")
    state = store.state_at("t")
    (pause,) = state.pauses
    assert pause_token(state.messages, pause) == attacker_token(rid)


# 4. Thread-keyed surfaces: thread t vs a made-up thread of the same length ------------


def test_thread_keyed_surfaces_read_as_a_made_up_thread(memory: Callable[[], Store]) -> None:
    """/thread answers 404 'no thread that reviewer may see' alike for t and for a
    thread no one made: so must the other surfaces keyed by a thread, or together
    they tell that t exists and asked for a review outside the reviewer's scopes."""
    store = memory()
    world(store, "pending")
    with inbox_client(store) as client:
        current(client)
        sign_in(client, NO_SCOPE)
        for path, params in (
            ("/thread", {"id": "{t}"}),
            ("/pause", {"thread": "{t}", "call": "c1"}),
            ("/pause/status", {"thread": "{t}", "call": "c1", "pause": "x"}),
        ):
            real = client.get(path, params={k: v.format(t="t") for k, v in params.items()})
            fake = client.get(path, params={k: v.format(t="q") for k, v in params.items()})
            swapped = real.text.replace("'t'", "'q'").replace("&#39;t&#39;", "&#39;q&#39;")
            assert (real.status_code, swapped) == (fake.status_code, fake.text), path


def test_a_visible_threads_fork_tree_names_no_thread_it_may_not_see(
    memory: Callable[[], Store],
) -> None:
    """An early fork of t (before its review) holds no review, so NO_SCOPE may see its
    page: its tree of forks lists t, the thread whose review they may not see, unnamed
    and unlinked; a reviewer who may decide it sees it named."""
    store = memory()
    world(store, "pending")
    store.fork("t", new_thread_id="t-early", at_version=1)
    with signed_in_outside(store) as (client, _):
        assert client.get("/thread", params={"id": "t"}).status_code == 404
        page = client.get("/thread", params={"id": "t-early"})
        assert page.status_code == 200
        assert "?id=t&" not in page.text and '?id=t"' not in page.text
        assert ">t<" not in page.text and "a thread you may not see" in page.text
        sign_in(client, PAYMENTS)
        assert ">t<" in client.get("/thread", params={"id": "t-early"}).text


def test_a_visible_forks_page_names_no_thread_it_may_not_see_in_its_history(
    memory: Callable[[], Store],
) -> None:
    """A fork's history opens with its ancestors' first events and its own ``Forked``,
    whose summaries name the thread that started and the parent it came from: on the
    page of a fork a reviewer may see, a parent they may not see is named in neither,
    at any depth."""
    store = memory()
    world(store, "pending")
    store.fork("t", new_thread_id="t-early", at_version=1)
    store.fork("t-early", new_thread_id="t-early-2")
    named = ("&#39;t&#39;", ">t<", "?id=t&", '?id=t"')
    with signed_in_outside(store) as (client, _):
        for fork in ("t-early", "t-early-2"):
            page = client.get("/thread", params={"id": fork})
            assert page.status_code == 200
            assert "started" in page.text and "a thread you may not see" in page.text
            assert not [n for n in named if n in page.text], fork
        sign_in(client, PAYMENTS)
        assert "&#39;t&#39;" in client.get("/thread", params={"id": "t-early"}).text


# 5. A thread that does not load -------------------------------------------------------


def altered(path: Path, kind: type[AgentThread.Event], leaf: tuple[Any, ...], value: Any) -> str:
    """A SQLite store at ``path`` in the pending world, the ``leaf`` of thread t's event
    of ``kind`` set to ``value`` and the chain resealed (as a writer holding the chain
    key would); the guarded review's id."""
    with open_store(f"sqlite:///{path}") as store:
        rid = world(store, "pending")
        record = next(
            r for r in store._records.stored_records("t") if full_topic(r.topic) == kind.TOPIC
        )
        payload = msgspec.json.decode(store._records.mapper.plain_payload(record))
        _reseal(store, path, record, _leaves(payload).index(leaf), value)
    return rid


def test_a_review_whose_thread_does_not_load_reads_as_a_made_up_id(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    rid = altered(path, AgentThread.ReviewRequested, ("request", "digest"), "0" * 64)
    with open_store(f"sqlite:///{path}") as store:
        made_up = "r" * len(rid)
        with inbox_client(store) as client:
            current(client)
            sign_in(client, NO_SCOPE)
            for path_, params in BY_ID:
                for thread in (None, "t", "nope"):
                    hidden = ask(client, path_, params, rid, thread)
                    unknown = ask(client, path_, params, made_up, thread)
                    where = (path_, thread, hidden.status_code, hidden.text[:300])
                    assert hidden.status_code == unknown.status_code, where
                    assert hidden.text.replace(rid, made_up) == unknown.text, where


# 6. A stored pause copy whose rules do not read ------------------------------------------


def test_a_pause_copy_whose_rules_do_not_read_is_listed_to_no_one_outside_its_scopes(
    tmp_path: Path,
) -> None:
    """The queue's item reads a review's rules from the stored copy of its pause (the
    Interrupted row), and rules that do not convert read as DEFAULT_RULES (no scopes):
    the listing's scope filter then lets every reviewer see the review's arguments. A
    copy altered so (resealed, as test_shown alters copies), or written by a version
    whose rules this one cannot read, must fail closed."""
    path = tmp_path / "store.db"
    rid = altered(path, AgentThread.Interrupted, ("interrupt", "data", "rules", "scopes", 0), 5)
    with open_store(f"sqlite:///{path}") as store, inbox_client(store) as client:
        current(client)
        listed = client.get("/api/reviews", headers=bearer(NO_SCOPE)).json()
        shown = [r for r in listed if r["review_id"] == rid]
        assert not shown, shown
        pauses = client.get("/api/pauses", headers=bearer(NO_SCOPE)).json()
        assert rid not in {p["review_id"] for p in pauses}
        sign_in(client, NO_SCOPE)
        assert rid not in client.get("/").text
