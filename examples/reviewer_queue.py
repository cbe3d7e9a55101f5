"""The reviewer queue across threads, followed by a separate process.

Three customers' threads ask to send payments that need a person's approval. A separate
OS process runs the reviewer-queue projection over the SQLite store; this script prints
the queue it keeps, a reviewer approves one payment from the command line
(``covonaut-es approve``), and the queue is printed again.

Run it with ``python examples/reviewer_queue.py``.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    HmacReviewerVerifier,
    ProviderResponse,
    ReviewQueue,
    ScriptedProvider,
    Store,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)

SECRET = secrets.token_hex(32)  # shared by the token issuer and the command line


def pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
    return {"paid": args["amount"]}


def ask_to_pay(store: Store, customer: str, amount: int) -> None:
    call = ToolCall("pay-1", "send_payment", f'{{"amount": {amount}}}')
    Agent(
        AgentConfig(
            provider=ScriptedProvider([ProviderResponse(tool_calls=(call,))]),
            tools=[Tool("send_payment", "Pay", {"type": "object"}, pay, requires_approval=True)],
            reviewer_verifier=HmacReviewerVerifier(SECRET.encode()),
            checkpoint=CheckpointSettings(store=store, thread_id=customer),
        )
    ).run(f"Refund me {amount}.")


def show(title: str, queue: ReviewQueue) -> None:
    print(title)
    for item in queue.pending():
        arguments = item.data["arguments"]
        print(f"  {item.thread_id:<5} {item.tool_name} {arguments}  review {item.review_id}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'threads.db'}"
        env = {**os.environ, "COVONAUT_ES_STORE": url, "COVONAUT_ES_REVIEWER_SECRET": SECRET}
        store = open_store(url)
        for customer, amount in (("ann", 30), ("bob", 12), ("cleo", 99)):
            ask_to_pay(store, customer, amount)

        projection = subprocess.Popen(
            [sys.executable, "-m", "covonaut_es", "reviews", "--follow", "--json"],
            env=env,
            stdout=subprocess.DEVNULL,
        )
        try:
            queue = ReviewQueue(url)
            queue.wait_until_current(store, timeout=60)
            show("Queue before:", queue)

            review = next(item for item in queue.pending() if item.thread_id == "bob")
            token = HmacReviewerVerifier(SECRET.encode()).issue_token("rita", ttl_seconds=300)
            approval = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "covonaut_es",
                    "approve",
                    review.item_id,
                    "--reviewer-token",
                    token,
                    "--comment",
                    "refund is due",
                ],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            print("Reviewer on the command line:")
            print("  " + approval.stdout.strip().replace("\n", "\n  "))

            queue.wait_until_current(store, timeout=60)
            show("Queue after:", queue)
        finally:
            projection.terminate()
            projection.wait(timeout=30)
            store.close()


if __name__ == "__main__":
    main()
