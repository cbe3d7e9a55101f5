"""The runtime: an agent that drives a model provider and tools over a stored thread.

This package owns :class:`Agent` and its configuration, the run loop as a program of
effects with the sync and async drivers that perform it (tool timeouts and the calls
running in the process among them), the streaming of answers beside the committed
events, and context compaction. It changes threads only
through the service layer (:mod:`covonaut_es.service`: a run holds a session there,
decisions go through its commands), calls models only through the
:mod:`covonaut_es.providers` protocol, and may import the layers below those and
:mod:`covonaut_es.tools`; never the projections, the audit, the command line or a
provider adapter. The reviewer verifiers are the service layer's, re-exported here
(:class:`JwtReviewerVerifier` is imported on first use: it needs the ``inbox`` extra).
"""

from typing import TYPE_CHECKING

from covonaut_es._extras import lazy_names
from covonaut_es.runtime._agent import Agent
from covonaut_es.runtime._compaction import CompactionPlan, Compactor, SummarizingCompactor
from covonaut_es.runtime._config import AgentConfig, CheckpointSettings, Durability
from covonaut_es.runtime._results import RunResult, RunStatus, Waiting, WaitsFor
from covonaut_es.runtime._streaming import CommittedEvent, StreamItem
from covonaut_es.service import HmacReviewerVerifier, ReviewerVerifier
from covonaut_es.service._running import running_calls

if TYPE_CHECKING:
    from covonaut_es.service import JwtReviewerVerifier as JwtReviewerVerifier

# JwtReviewerVerifier is left out of __all__: `from covonaut_es.runtime import *` must work
# without PyJWT.
__all__ = [
    "Agent",
    "AgentConfig",
    "CheckpointSettings",
    "CommittedEvent",
    "CompactionPlan",
    "Compactor",
    "Durability",
    "HmacReviewerVerifier",
    "ReviewerVerifier",
    "RunResult",
    "RunStatus",
    "StreamItem",
    "SummarizingCompactor",
    "Waiting",
    "WaitsFor",
    "running_calls",
]


# JwtReviewerVerifier moved to covonaut_es.service; imported from there on first access,
# since it needs the inbox extra.
if not TYPE_CHECKING:  # a type checker sees the names above, and no other
    __getattr__ = lazy_names(__name__, globals(), {"JwtReviewerVerifier": "covonaut_es.service"})
