"""Workers: processes that run every thread that is ready, on one machine or many.

This package owns :class:`Worker`: it follows the store's log, finds the threads that
are ready (paused only on reviews that are all decided, handed new input with
``Store.submit``, or left mid-run by a runner that died), and runs each to its next
pause or end under the thread's run lease, so that any number of workers can share
one store. A worker also expires reviews past their deadline (through the service)
and, given a :class:`ReviewNotifier` such as :class:`WebhookNotifier`, sends the
review notices of the store's log with :class:`NoticeSender`. It drives agents
through :mod:`covonaut_es.runtime`, changes threads through :mod:`covonaut_es.service`,
reads the log and the leases through :mod:`covonaut_es.store`, and may import the
layers below those; never the projections, the audit, the command line or a provider
adapter.
"""

from covonaut_es.workers._notices import NoticeSender, ReviewNotice, ReviewNotifier
from covonaut_es.workers._webhook import WebhookNotifier
from covonaut_es.workers._worker import Worker, WorkerSummary

__all__ = [
    "NoticeSender",
    "ReviewNotice",
    "ReviewNotifier",
    "WebhookNotifier",
    "Worker",
    "WorkerSummary",
]
