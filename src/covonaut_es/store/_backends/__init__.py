"""The back ends of a store, one eventsourcing persistence module each (ADR 0028).

``memory``, ``sqlite`` and ``postgres`` are what ``PERSISTENCE_MODULE`` names: each has
one factory class, its own recorder classes, and a ``BACKEND`` object, its side of the
port :class:`~covonaut_es.store._backend.Backend`. Only :mod:`covonaut_es.store` imports
them, and only these modules of the store use private names of eventsourcing: the
recorders here, and ``_eventsourcing`` for the application's save and the projections'
views (those of its aggregate are named in ``covonaut_es.domain._eventsourcing``).
"""
