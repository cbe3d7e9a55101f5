"""A system of eventsourcing applications with agent threads in it, and its audit.

``Payments`` is an ordinary eventsourcing application with an aggregate of its own,
``Payment``, and the agent threads that review payments: a reviewer's approval changes
the payment and tells the reviewing agent in one transaction. ``ApprovedByReviewer``
is a process application that follows it in an ``eventsourcing.system.System``: its
policy keeps a projection of the approved payments per reviewer, recorded with its
position in the leader's log, and a thread of its own noting each approval. Both are
``AgentApplication`` subclasses, so both read each other's events with their types
(``Decimal`` stays ``Decimal``), and threads are sealed into their hash chains on
either side. Payments are snapshotted every two events, as eventsourcing does.

``Payment.Approved`` is at version 2, with the one-step upcaster eventsourcing's
convention names, so events stored at version 1 still read.

The audit at the end checks each thread's chain and, on SQLite files, its head anchor
(written by each side's saves, the follower's included), with ``Store.verify`` and with
the replay that ``covonaut-es replay --verify`` prints; given a directory, it then runs on
each database file the standard-library verifier that docs/audits.md prints, as an
auditor without this library would.

Run it with no argument for in-memory applications, or with a directory for SQLite
files, configured through eventsourcing's environment variables as usual.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from functools import singledispatchmethod
from pathlib import Path
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

from eventsourcing.application import AggregateNotFoundError, ProcessingEvent
from eventsourcing.domain import Aggregate, event
from eventsourcing.system import ProcessApplication, SingleThreadedRunner, System

from covonaut_es import AgentApplication, AgentThread, Message, Role, Store
from covonaut_es.store import AggregateSnapshot


class Payment(Aggregate):
    """A payment waiting for a reviewer's approval."""

    # Annotated on the class: a snapshot's state is decoded by these types.
    payee: str
    amount: Decimal
    approved_by: str | None

    class Snapshot(AggregateSnapshot):
        """Its snapshots, decoded with the types above."""

    @event("Requested")
    def __init__(self, payee: str, amount: Decimal) -> None:
        self.payee = payee
        self.amount = amount
        self.approved_by = None

    def approve(self, reviewer: str) -> None:
        """Record the reviewer's approval."""
        self._approved(reviewer, self.amount)

    class Approved(Aggregate.Event):
        """A reviewer approved it. Version 1 did not record the amount: its one step to
        version 2, eventsourcing's way, reads an older event's amount as zero."""

        class_version = 2
        reviewer: str
        amount: Decimal

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["amount"] = "0"  # fields as JSON holds them: a Decimal is text

    @event(Approved)
    def _approved(self, reviewer: str, amount: Decimal) -> None:
        self.approved_by = reviewer


class Payments(AgentApplication):
    """Payments and the agent threads that review them, in one event store."""

    aggregate_classes = (Payment,)
    snapshotting_intervals = {Payment: 2}  # noqa: RUF012 (eventsourcing's declaration)

    def request(self, payee: str, amount: Decimal) -> UUID:
        """Store a new payment and the thread of its review; the payment's id."""
        payment = Payment(payee, amount)
        review = AgentThread.start(f"review-{payment.id}", now=datetime.now(UTC))
        review.append_message(
            Message(Role.USER, f"Review {amount} to {payee}."), now=review.modified_on
        )
        self.save(payment, review)
        return payment.id

    def approve(self, payment_id: UUID, reviewer: str) -> None:
        """Approve the payment and tell its reviewing agent, in one transaction."""
        payment: Payment = self.repository.get(payment_id)
        review = Store.from_application(self).load(f"review-{payment_id}")
        payment.approve(reviewer)
        review.steer(Message(Role.USER, f"{reviewer} approved it."), now=datetime.now(UTC))
        self.save(payment, review)


class ReviewerTotal(Aggregate):
    """The payments one reviewer approved, and their sum."""

    reviewer: str
    count: int
    total: Decimal

    @staticmethod
    def create_id(reviewer: str) -> UUID:
        return uuid5(NAMESPACE_URL, f"/reviewers/{reviewer}")

    @event("Opened")
    def __init__(self, reviewer: str) -> None:
        self.reviewer = reviewer
        self.count = 0
        self.total = Decimal(0)

    @event("Counted")
    def count_payment(self, payment_id: UUID, amount: Decimal) -> None:
        """Add an approved payment."""
        self.count += 1
        self.total += amount


class ApprovedByReviewer(AgentApplication, ProcessApplication[UUID]):
    """Follows ``Payments``: the approved payments per reviewer, and a ledger thread."""

    # The leader's aggregates whose events it reads, and its own.
    aggregate_classes = (Payment, ReviewerTotal)

    @singledispatchmethod
    def policy(self, domain_event: Any, processing_event: ProcessingEvent[UUID]) -> None:
        """Other events change nothing here."""

    @policy.register
    def _(self, domain_event: Payment.Approved, processing_event: ProcessingEvent[UUID]) -> None:
        try:
            total: ReviewerTotal = self.repository.get(
                ReviewerTotal.create_id(domain_event.reviewer)
            )
        except AggregateNotFoundError:
            total = ReviewerTotal(domain_event.reviewer)
        total.count_payment(domain_event.originator_id, domain_event.amount)
        ledger = self.ledger()
        note = (
            f"{domain_event.reviewer} approved {domain_event.amount} ({domain_event.originator_id})"
        )
        ledger.append_message(Message(Role.USER, note), now=domain_event.timestamp)
        processing_event.collect_events(total, ledger)  # one transaction, with the position

    def ledger(self) -> AgentThread:
        """The follower's thread noting each approval it counted."""
        store = Store.from_application(self)
        if store.exists("ledger"):
            return store.load("ledger")
        return AgentThread.start("ledger", now=datetime.now(UTC))

    def total(self, reviewer: str) -> ReviewerTotal:
        """What ``reviewer`` approved, as the projection holds it."""
        total: ReviewerTotal = self.repository.get(ReviewerTotal.create_id(reviewer))
        return total


SYSTEM = System(pipes=[[Payments, ApprovedByReviewer]])


def sqlite_env(directory: Path) -> dict[str, str]:
    """eventsourcing's SQLite settings: one database file per application."""
    return {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "PAYMENTS_SQLITE_DBNAME": str(directory / "payments.db"),
        "APPROVEDBYREVIEWER_SQLITE_DBNAME": str(directory / "approvals.db"),
    }


def audit(app: AgentApplication, threads: Mapping[str, str]) -> None:
    """Print each thread's chain check, how many of its events the replay read, and
    whether its head was checked against its anchor."""
    with Store.from_application(app) as store:
        for label, thread_id in threads.items():
            report = store.verify(thread_id)
            events = list(store.replay(thread_id))
            # SQLite and PostgreSQL applications anchor each thread's head; in memory, none.
            head = "no head anchor" if report.notes else "head anchored"
            state = "intact" if report.ok else "TAMPERED"
            print(f"audit {label}: {state}, {len(events)} events, {head}")


def audit_with_the_docs_verifier(directory: Path) -> None:
    """Run the standard-library verifier that docs/audits.md prints on each database
    file, as an auditor without this library would: no site-packages, no import of it."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "audits.md").read_text()
    code = page.split('```python title="verify_chain.py"\n', 1)[1].split("\n```", 1)[0]
    verifier = directory / "verify_chain.py"
    verifier.write_text(code + "\n")
    for database in ("payments.db", "approvals.db"):
        result = subprocess.run(
            [sys.executable, "-I", "-S", str(verifier), str(directory / database)],
            capture_output=True,
            text=True,
            check=True,
        )
        states = [line.split(": ", 1)[1] for line in result.stdout.splitlines()]
        found = "all intact" if set(states) == {"intact"} else "; ".join(states)
        print(f"docs verifier, {database}: {len(states)} thread{'s' * (len(states) != 1)}, {found}")


def main(env: Mapping[str, str]) -> None:
    os.environ.update(env)  # as an eventsourcing user configures a system
    runner: SingleThreadedRunner[UUID] = SingleThreadedRunner(SYSTEM)
    runner.start()
    try:
        payments = runner.get(Payments)
        approvals = runner.get(ApprovedByReviewer)
        first = payments.request("acme", Decimal("120.50"))
        second = payments.request("globex", Decimal("75.25"))
        third = payments.request("initech", Decimal("9.99"))
        payments.approve(first, "maria")
        payments.approve(second, "maria")
        payments.approve(third, "li")
        for reviewer in ("maria", "li"):
            total = approvals.total(reviewer)
            print(f"{reviewer}: {total.count} approved, {total.total}")
        audit(payments, {"review of acme": f"review-{first}"})
        audit(approvals, {"ledger": "ledger"})
    finally:
        runner.stop()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sqlite_env(Path(sys.argv[1])))
        audit_with_the_docs_verifier(Path(sys.argv[1]))
    else:
        main({})
