"""The follower of the system test's kills: pulls and processes the leader's events,
printing a line from inside the policy of each, until done or killed."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from eventsourcing.application import ProcessingEvent

from embedded_system import ApprovedByReviewer, Payments


class ReportingFollower(ApprovedByReviewer):
    """The example's follower, under its name, saying when its policy has run (before
    the transaction that records the outcome and the position)."""

    name = ApprovedByReviewer.name

    def policy(self, domain_event: Any, processing_event: ProcessingEvent[UUID]) -> None:
        super().policy(domain_event, processing_event)
        print("processing", flush=True)


def main() -> None:
    """Follow the leader as a system's runner sets a follower up, and process its log."""
    leader = Payments()  # settings from the environment, as eventsourcing reads them
    follower = ReportingFollower()
    follower.follow(leader.name, leader.notification_log)
    follower.pull_and_process(leader.name)
    print("done", flush=True)
    follower.close()
    leader.close()


if __name__ == "__main__":
    main()
