"""Figure 9: the reviewer inbox.

A SQLite store holds N threads, each paused on one review (written with the aggregate's
own commands: a tool call, then its review request). The inbox (``create_app`` with its
default in-memory queue) is served by uvicorn on loopback and read with httpx.

First page: the time from sending ``GET /`` (page 1 of 50 reviews, oldest first) to the
last byte of the page, signed in, on loopback; the first request after the queue caught
up, and the median of the following ones. It is an upper bound of the server's time.

Decision to another inbox: a second signed-in client waits on the inbox's live-update
request (``GET /changes``, as the page's script does); the time runs from the response
of ``POST /api/reviews/{id}/approve`` to the end of that client's ``GET /rows``, which
no longer lists the review: the projection's lag, the long-poll's wake-up and the
re-rendering of the rows.
"""

from __future__ import annotations

import socket
import statistics
import threading
import time
from datetime import UTC, datetime
from typing import Any

import httpx
import uvicorn
from harness import Context, cli, log
from report import Section, Table, Target, intro, seconds, status

from covonaut_es import HmacReviewerVerifier, Message, Role, Store, ToolCall, open_store
from covonaut_es.domain import AgentThread
from covonaut_es.inbox import create_app

FULL_REVIEWS = 10_000
QUICK_REVIEWS = 300
FULL_SAMPLES = 30
QUICK_SAMPLES = 5
PAGE_TARGET_S = 0.100
DECISION_TARGET_S = 0.200
SECRET = b"benchmark secret of thirty-two bytes!"


def _fill(store: Store, count: int) -> None:
    now = datetime.now(UTC)
    for index in range(count):
        thread = AgentThread.start(f"thread-{index:05d}", now=now)
        call = ToolCall("c1", "refund", f'{{"amount": {index}, "order": "A-{index}"}}')
        thread.append_message(Message(Role.ASSISTANT, tool_calls=(call,)), now=now)
        thread.call_tools([call], now=now)
        thread.request_review(call, {"amount": index, "order": f"A-{index}"}, now=now)
        store.save(thread)


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _signed_in(base: str, token: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=60)
    client.post("/login", data={"token": token}, headers={"Origin": base})
    return client


def measure(ctx: Context, reviews: int, samples: int) -> dict[str, Any]:
    """Serve the inbox over ``reviews`` pending reviews; time pages and decisions."""
    verifier = HmacReviewerVerifier(SECRET)
    token = verifier.issue_token("bench", ttl_seconds=3600)
    with open_store(f"sqlite:///{ctx.workdir / 'inbox.db'}") as store:
        started = time.perf_counter()
        _fill(store, reviews)
        filled = time.perf_counter() - started
        app = create_app(store, verifier)
        port = _port()
        server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
        serving = threading.Thread(target=server.run, daemon=True)
        serving.start()
        while not server.started:
            time.sleep(0.01)
        base = f"http://127.0.0.1:{port}"
        try:
            desk = app.state.inbox.desk
            desk.queue.wait_until_current(store, timeout=300)
            reader, watcher = _signed_in(base, token), _signed_in(base, token)
            pages = []
            for _ in range(samples + 1):
                start = time.perf_counter()
                page = reader.get("/")
                pages.append(time.perf_counter() - start)
                assert page.status_code == 200 and f"{reviews} pending" in page.text
            lags = []
            reviewer = desk.reviewer(token)
            for index in range(samples):
                review_id = desk.page(reviewer, number=index + 1, size=1).items[0].review_id
                position = str(desk.position())
                woke: list[float] = []

                def watch(
                    since: str = position, gone: str = review_id, into: list[float] = woke
                ) -> None:
                    watcher.get("/changes", params={"since": since})
                    rows = watcher.get("/rows")
                    assert gone not in rows.text
                    into.append(time.perf_counter())

                waiting = threading.Thread(target=watch)
                waiting.start()
                time.sleep(0.02)  # the watcher waits before the decision is made
                decided = reader.post(
                    f"/api/reviews/{review_id}/approve",
                    headers={"Authorization": f"Bearer {token}"},
                    json={},
                )
                answered = time.perf_counter()
                assert decided.status_code == 200, decided.text
                waiting.join()
                lags.append(woke[0] - answered)
            reader.close()
            watcher.close()
        finally:
            server.should_exit = True
            serving.join(10)
    return {"filled_s": filled, "first_s": pages[0], "pages": pages[1:], "lags": lags}


def run(ctx: Context) -> list[Section]:
    """Figure 9."""
    section = Section("9. The reviewer inbox", intro(__doc__))
    reviews = QUICK_REVIEWS if ctx.quick else FULL_REVIEWS
    samples = QUICK_SAMPLES if ctx.quick else FULL_SAMPLES
    log(f"reviewer inbox, {reviews} pending reviews, {samples} samples")
    found = measure(ctx, reviews, samples)
    page_s = statistics.median(found["pages"])
    lag_s = statistics.median(found["lags"])
    table = Table(
        f"the inbox over {reviews} pending reviews (SQLite, loopback HTTP)",
        ["measure", "first", "median", "max"],
    )
    table.rows += [
        [
            "first inbox page",
            seconds(found["first_s"]),
            seconds(page_s),
            seconds(max(found["pages"])),
        ],
        ["decision to another inbox", "", seconds(lag_s), seconds(max(found["lags"]))],
    ]
    table.notes.append(f"writing the {reviews} paused threads took {seconds(found['filled_s'])}.")
    section.tables.append(table)
    section.targets += [
        Target(
            f"the first inbox page with {reviews} pending reviews: under 100 ms",
            f"{seconds(page_s)} median",
            status(page_s < PAGE_TARGET_S),
        ),
        Target(
            "a decision reaches another open inbox: under 200 ms median",
            f"{seconds(lag_s)} median",
            status(lag_s < DECISION_TARGET_S),
        ),
    ]
    return [section]


if __name__ == "__main__":
    raise SystemExit(cli([run]))
