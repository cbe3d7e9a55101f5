"""The tool calls running in this process: the service layer keeps the list (it refuses
to take the lease of a thread whose tool still runs); the runtime's drivers add to it,
and ``running_calls()`` is re-exported here for workers and applications."""

from covonaut_es.service._running import listed, running_calls

__all__ = ["listed", "running_calls"]
