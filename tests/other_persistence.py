"""A persistence module that is none of the store's back ends nor eventsourcing's own
(as a user's application may name): in-memory recorders behind a factory of its own."""

from __future__ import annotations

from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    InfrastructureFactory,
    ProcessRecorder,
)
from eventsourcing.popo import (
    POPOAggregateRecorder,
    POPOApplicationRecorder,
    POPOProcessRecorder,
    POPOTrackingRecorder,
)


class Factory(InfrastructureFactory[POPOTrackingRecorder]):
    """Makes eventsourcing's in-memory recorders."""

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        return POPOAggregateRecorder()

    def application_recorder(self) -> ApplicationRecorder:
        return POPOApplicationRecorder()

    def tracking_recorder(
        self, tracking_recorder_class: type[POPOTrackingRecorder] | None = None
    ) -> POPOTrackingRecorder:
        return (tracking_recorder_class or POPOTrackingRecorder)()

    def process_recorder(self) -> ProcessRecorder:
        return POPOProcessRecorder()
