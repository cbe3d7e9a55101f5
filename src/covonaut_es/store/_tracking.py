"""What a projection's view extends to be an eventsourcing tracking recorder that
applies its changes and records its position in one transaction, and the runner that
hands a projection its events in batches.

Projections import these from here, never from a back-end module: the private parts
of eventsourcing they rest on stay in :mod:`covonaut_es.store._backends._eventsourcing`.
"""

from covonaut_es.store._backends._eventsourcing import (
    BatchingProjectionRunner,
    MemoryTracking,
    TrackedSQL,
    UnreadableRecord,
    altered_tracking_row,
)

__all__ = [
    "BatchingProjectionRunner",
    "MemoryTracking",
    "TrackedSQL",
    "UnreadableRecord",
    "altered_tracking_row",
]
