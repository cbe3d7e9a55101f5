"""What a projection's view extends to be an eventsourcing tracking recorder that
applies its changes and records its position in one transaction.

Projections import these from here, never from a back-end module: the private parts
of eventsourcing they rest on stay in :mod:`covonaut_es.store._backends._eventsourcing`.
"""

from covonaut_es.store._backends._eventsourcing import MemoryTracking, TrackedSQL

__all__ = ["MemoryTracking", "TrackedSQL"]
