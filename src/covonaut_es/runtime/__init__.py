"""The runtime: an agent that drives a model provider and tools over a stored thread.

This package owns :class:`Agent` and its configuration, the run loop as a program of
effects with the sync and async drivers that perform it, context compaction, and the
verification of reviewers' credentials. It persists only through
:mod:`covonaut_es.store`, calls models only through the :mod:`covonaut_es.providers`
protocol, and may import the domain, the migrations and :mod:`covonaut_es.tools`;
never the projections, the audit, the command line or a provider adapter.
"""

from covonaut_es.runtime._agent import Agent
from covonaut_es.runtime._compaction import CompactionPlan, Compactor, SummarizingCompactor
from covonaut_es.runtime._config import AgentConfig, CheckpointSettings, Durability
from covonaut_es.runtime._reviewers import HmacReviewerVerifier, ReviewerVerifier

__all__ = [
    "Agent",
    "AgentConfig",
    "CheckpointSettings",
    "CompactionPlan",
    "Compactor",
    "Durability",
    "HmacReviewerVerifier",
    "ReviewerVerifier",
    "SummarizingCompactor",
]
