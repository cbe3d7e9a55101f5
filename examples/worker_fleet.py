"""A fleet of workers runs every thread once its reviews are decided.

Six customers' threads ask to send refunds that need a person's approval and pause.
Two worker processes (``covonaut-es worker``) follow the SQLite store; a reviewer
decides every refund, approving five and rejecting one, and the workers resume each
thread as its decision arrives. Every thread is answered exactly once, and each
approved refund is paid once. SIGTERM then stops the workers, which exit 0.

Run it with ``python examples/worker_fleet.py``. ``make_config`` below is the
application the workers run: ``--app worker_fleet:make_config``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    HmacReviewerVerifier,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Store,
    ThreadStatus,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)

SECRET = b"worker-fleet-example-secret-0123456789"
CUSTOMERS = {"ann": 30, "bob": 12, "cleo": 99, "dev": 45, "eve": 7, "finn": 60}


def model(request: ProviderRequest) -> ProviderResponse:
    """Ask to refund the amount in the request; once the tool answered, sum it up."""
    last = request.messages[-1]
    if last.role is Role.TOOL and '"refunded"' in last.content:
        return ProviderResponse(content=f"Done: {last.content}")
    if last.role is Role.TOOL and "rejected" in last.content:
        return ProviderResponse(content="The refund was not approved.")
    asked = next(m.content for m in request.messages if m.role is Role.USER)
    amount = int(asked.split()[-1])
    answered = sum(m.role is Role.ASSISTANT for m in request.messages)
    call = ToolCall(f"refund-{answered}", "refund", f'{{"amount": {amount}}}')
    return ProviderResponse(tool_calls=(call,))


def refund(ctx: ToolContext, args: dict[str, Any]) -> Any:
    """The side effect: one line per refund in the payments ledger."""
    with open(os.environ["FLEET_LEDGER"], "a") as ledger:
        ledger.write(f"{ctx.thread_id} {args['amount']} {ctx.idempotency_key}\n")
    return {"refunded": args["amount"]}


def make_config(thread_id: str) -> AgentConfig:
    """The workers' factory: the configuration of every thread, left unbound to a
    store so that each worker binds it to its own."""
    return AgentConfig(
        provider=ScriptedProvider(respond=model),
        tools=[Tool("refund", "Refund", {"type": "object"}, refund, requires_approval=True)],
        reviewer_verifier=HmacReviewerVerifier(SECRET),
    )


def agent(store: Store, thread_id: str) -> Agent:
    config = make_config(thread_id)
    settings = CheckpointSettings(store=store, thread_id=thread_id)
    return Agent(attrs.evolve(config, checkpoint=settings))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'threads.db'}"
        ledger = Path(tmp) / "ledger"
        os.environ["FLEET_LEDGER"] = str(ledger)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path]),
        }
        store = open_store(url)
        for customer, amount in CUSTOMERS.items():
            agent(store, customer).run(f"Refund me {amount}")
        print("Paused for review:", ", ".join(sorted(CUSTOMERS)))

        command = [sys.executable, "-m", "covonaut_es", "worker", "--store", url]
        workers = [
            subprocess.Popen(
                [*command, "--app", "worker_fleet:make_config", "--concurrency", "2"],
                env=env,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(2)
        ]
        try:
            while len(store.live_workers()) < len(workers):
                time.sleep(0.05)
            listing = subprocess.run(
                [sys.executable, "-m", "covonaut_es", "workers", "--store", url],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            print("Workers:\n  " + listing.stdout.strip().replace("\n", "\n  "))

            token = HmacReviewerVerifier(SECRET).issue_token("rita", ttl_seconds=300)
            for customer in CUSTOMERS:
                reviewing = agent(store, customer)
                review = reviewing.pending_reviews[0].review_id
                if customer == "cleo":
                    reviewing.reject(review, reviewer=token, reason="over the limit")
                else:
                    reviewing.approve(review, reviewer=token)
            print("Decided every review; the workers resume each thread.")

            deadline = time.monotonic() + 60
            while any(store.state_at(c).status is not ThreadStatus.FINISHED for c in CUSTOMERS):
                if time.monotonic() > deadline:
                    raise TimeoutError("the workers did not answer every thread in 60 s")
                time.sleep(0.05)
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            codes = [worker.wait(timeout=60) for worker in workers]
        print("Workers stopped with exit codes", codes)

        paid = ledger.read_text().splitlines()
        for customer in CUSTOMERS:
            messages = store.state_at(customer).messages
            answers = [m.content for m in messages if m.role is Role.ASSISTANT and m.content]
            refunds = sum(line.startswith(f"{customer} ") for line in paid)
            print(f"  {customer:<5} answered {len(answers)}x: {answers[-1]!r}; refunds {refunds}")
            assert len(answers) == 1 and refunds == (0 if customer == "cleo" else 1)
        store.close()
        print("Every thread was answered exactly once.")


if __name__ == "__main__":
    main()
