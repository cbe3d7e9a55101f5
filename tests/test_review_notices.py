"""Review notices: the store's log is the outbox, a signed webhook delivers each notice
at least once with the same idempotency key, retries a failing receiver with bounded
backoff, and a sender killed after a delivery and before recording it sends it again,
never losing one; against a real HTTP server on loopback, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import deadline_app
from covonaut_es import Agent, CheckpointSettings, Store, open_store
from covonaut_es.errors import ConfigurationError, NoticeDeliveryError
from covonaut_es.providers import RetryPolicy
from covonaut_es.workers import NoticeSender, ReviewNotice, WebhookNotifier
from test_review_deadlines import Clock, paused
from webhook_receiver import SECRET, Receiver

ROOT = Path(__file__).resolve().parent.parent
FAST = RetryPolicy(max_attempts=3, initial_delay=0.01, max_delay=0.02)


def requested(store: Store, count: int) -> list[str]:
    """``count`` threads paused on a review each; their review ids, in log order."""
    clock = Clock()
    return [paused(store, clock, thread_id=f"t{i}")[1] for i in range(count)]


def webhook(receiver: Receiver, sleeps: list[float] | None = None, **options: Any) -> Any:
    waits = sleeps if sleeps is not None else []
    return WebhookNotifier(receiver.url, SECRET, sleep=waits.append, **{"retry": FAST, **options})


@pytest.mark.usefixtures("simulated_time")
def test_a_notice_is_posted_signed_with_its_key_and_no_arguments(store: Store) -> None:
    """The receiver verifies the signature; the body names the review, its thread, tool
    and deadline, and carries no argument of the operation."""
    [review_id] = requested(store, 1)
    with Receiver() as receiver:
        assert NoticeSender(store, webhook(receiver)).send_pending() == 1
    [(key, notice)] = receiver.deliveries
    assert receiver.bad_signatures == 0
    assert notice["kind"] == "review_requested" and notice["review_id"] == review_id
    assert (notice["thread_id"], notice["tool_name"]) == ("t0", "pay")
    assert notice["deadline"].startswith("2026-03-01T09:30:00")
    # Neither the payee nor the amount's field (the review id is hex, and may hold "40").
    assert "bob" not in str(notice) and "amount" not in str(notice)
    assert key == notice["idempotency_key"]


def test_a_receiver_that_fails_then_recovers_gets_the_notice_under_one_key(
    store: Store,
) -> None:
    """Answers of 500 and 503 are retried with backoff; the 200 delivers; every attempt
    carries the same idempotency key, and the next send starts after it."""
    requested(store, 1)
    sleeps: list[float] = []
    with Receiver() as receiver:
        receiver.failures = [500, 503]
        sender = NoticeSender(store, webhook(receiver, sleeps))
        assert sender.send_pending() == 1
        assert sender.send_pending() == 0
    assert len(receiver.deliveries) == 3 and len(set(receiver.keys())) == 1
    assert len(sleeps) == 2 and all(0 < s <= FAST.max_delay for s in sleeps)


def test_a_refusal_or_a_receiver_down_loses_nothing(store: Store) -> None:
    """A 400 is not retried, and a receiver down is retried to the bound; either way
    NoticeDeliveryError says which notice and where (the path is not shown), the
    position stays, and the notices go out, in order, once the receiver takes them."""
    requested(store, 2)
    receiver = Receiver().start()
    sender = NoticeSender(store, webhook(receiver))
    receiver.failures = [400]
    with pytest.raises(NoticeDeliveryError, match="HTTP 400") as refused:
        sender.send_pending()
    assert "/hooks" not in str(refused.value) and len(receiver.deliveries) == 1
    receiver.stop()
    with pytest.raises(NoticeDeliveryError, match="after 3 attempt"):
        sender.send_pending()
    receiver.start()  # the same port, as a restarted receiver
    try:
        assert sender.send_pending() == 2
    finally:
        receiver.stop()
    keys = list(receiver.keys())
    assert keys[0] == keys[1] and len(set(keys)) == 2 and len(receiver.accepted) == 2


def test_a_redirect_is_not_followed(store: Store) -> None:
    """A receiver answering 307 to another URL gets a refusal, not the signed notice
    sent on: the other receiver sees nothing."""
    requested(store, 1)
    with Receiver() as receiver, Receiver() as elsewhere:
        receiver.failures, receiver.redirect_to = [307], elsewhere.url
        with pytest.raises(NoticeDeliveryError, match="HTTP 307"):
            NoticeSender(store, webhook(receiver)).send_pending()
    assert len(receiver.deliveries) == 1 and elsewhere.deliveries == []


def test_a_webhook_refuses_a_bad_url_or_a_short_secret_without_echoing_it() -> None:
    """Only http(s) URLs with a host; a secret of 16 bytes or more, never shown."""
    with pytest.raises(ConfigurationError, match="http:// or https://"):
        WebhookNotifier("file:///etc/passwd", SECRET)
    with pytest.raises(ConfigurationError, match="at least 16 bytes") as short:
        WebhookNotifier("https://hooks.example", "tiny-secret")
    assert "tiny-secret" not in str(short.value)


@pytest.mark.slow
def test_a_sender_killed_after_sending_resends_that_notice_with_its_key(
    shared_url: str,
) -> None:
    """A sender process killed after a delivery and before recording it: the next
    process sends that notice again, same key, and all the rest once; the receiver,
    dropping repeats by key, has each notice exactly once and none is lost."""
    with open_store(shared_url) as store:
        review_ids = requested(store, 5)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
    sender = [sys.executable, str(ROOT / "tests" / "notice_sender.py"), shared_url]
    with Receiver() as receiver:
        killed = subprocess.run(
            [*sender, receiver.url, "3"], env=env, capture_output=True, timeout=120, check=False
        )
        assert killed.returncode == -9, killed.stderr
        assert len(receiver.deliveries) == 3
        done = subprocess.run(
            [*sender, receiver.url, "0"], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "3"
        again = subprocess.run(
            [*sender, receiver.url, "0"], env=env, capture_output=True, text=True, timeout=120
        )
        assert again.stdout.strip() == "0"
    counts = Counter(receiver.keys())
    third = list(receiver.keys())[2]
    assert counts[third] == 2 and all(n == 1 for k, n in counts.items() if k != third)
    assert sorted(n["review_id"] for n in receiver.accepted.values()) == sorted(review_ids)


class Crash(BaseException):
    """Stands in for the sender dying: nothing after it runs in that 'process'."""


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    answers=st.lists(st.sampled_from([200, 200, 500, 503, 429]), max_size=12),
    crashes=st.lists(st.integers(1, 6), max_size=3),
)
def test_generated_faults_deliver_every_notice_once_per_key(
    answers: list[int], crashes: list[int]
) -> None:
    """Over any sequence of receiver answers and of sender deaths after a delivery:
    sending again until done, every notice reaches the receiver and is accepted once by
    its key, and the notices arrive in log order (a repeat comes before any later one)."""
    with open_store("memory://") as store, Receiver() as receiver:
        review_ids = requested(store, 4)
        receiver.failures = list(answers)
        base = webhook(receiver)
        pending_crashes = list(crashes)
        delivered = 0

        def dying(notice: ReviewNotice) -> None:
            nonlocal delivered
            base(notice)
            delivered += 1
            if pending_crashes and delivered == pending_crashes[0]:
                pending_crashes.pop(0)
                delivered = 0
                raise Crash

        sender = NoticeSender(store, dying)
        for _ in range(50):
            try:
                sender.send_pending()
            except (Crash, NoticeDeliveryError):
                continue
            if not receiver.failures and not pending_crashes:
                break
        sender.send_pending()
        assert sorted(n["review_id"] for n in receiver.accepted.values()) == sorted(review_ids)
        keys = list(receiver.keys())
        assert len(set(keys)) == 4
        # In log order: once a later notice was sent, an earlier key never comes back.
        first_seen = {key: keys.index(key) for key in set(keys)}
        order = sorted(first_seen, key=first_seen.__getitem__)
        assert keys == sorted(keys, key=order.index)


def test_the_worker_command_posts_notices_and_refuses_a_webhook_without_its_secret(
    tmp_path: Path,
) -> None:
    """``covonaut-es worker --webhook URL --webhook-secret-env VAR`` posts the notices
    of the store's reviews (and expires the ones past their deadline); a webhook
    without its secret, or a secret without a webhook, is a usage error."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as store:
        config = deadline_app.make_config("t")
        settings_ = CheckpointSettings(store=store, thread_id="t")
        Agent(attrs.evolve(config, checkpoint=settings_)).run("Pay.")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
        "DEADLINE_TEST_LEDGER": str(tmp_path / "ledger"),
        "HOOK_SECRET": SECRET.decode(),
    }
    worker = [sys.executable, "-m", "covonaut_es", "worker", "--store", url, "--once"]
    worker += ["--app", "deadline_app:make_config"]

    def run(*options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*worker, *options], env=env, capture_output=True, text=True, timeout=120
        )

    with Receiver() as receiver:
        no_secret = run("--webhook", receiver.url)
        assert no_secret.returncode == 2 and "--webhook-secret-env" in no_secret.stderr
        no_hook = run("--webhook-secret-env", "HOOK_SECRET")
        assert no_hook.returncode == 2 and "--webhook URL" in no_hook.stderr
        done = run("--webhook", receiver.url, "--webhook-secret-env", "HOOK_SECRET")
        assert done.returncode == 0, done.stderr
    [notice] = receiver.accepted.values()
    assert (notice["kind"], notice["thread_id"]) == ("review_requested", "t")
    assert SECRET.decode() not in done.stderr
    with open_store(url) as store:
        assert store.state_at("t").messages[-1].content.startswith("Finished: Expired")
