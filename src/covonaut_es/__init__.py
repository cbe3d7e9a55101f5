"""covonaut-es: durable, reviewable LLM agents as event-sourced aggregates.

The public API is what ``__all__`` lists; every other module is internal. The model
provider adapters are imported on first use, so that their SDKs stay optional extras.
"""

import importlib
from typing import TYPE_CHECKING

from covonaut_es.agent import Agent
from covonaut_es.application import AgentApplication
from covonaut_es.approvals import (
    Decision,
    HmacReviewerVerifier,
    Review,
    ReviewDecision,
    ReviewerVerifier,
    ReviewRequest,
    canonical_json,
    operation_digest,
)
from covonaut_es.audit import AuditEntry, AuditFinding, AuditReport
from covonaut_es.compaction import CompactionPlan, Compactor, SummarizingCompactor
from covonaut_es.config import AgentConfig, CheckpointSettings
from covonaut_es.domain import AgentThread
from covonaut_es.errors import (
    CheckpointNotFoundError,
    ConfigurationError,
    CovonautError,
    InterruptError,
    InterruptPendingError,
    InvalidStateKeyError,
    MaxTurnsExceededError,
    MissingUpcasterError,
    NotInterruptedError,
    ProviderConnectionError,
    ProviderError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderServerError,
    ReviewerNotVerifiedError,
    ReviewNotFoundError,
    ReviewPendingError,
    SchemaVersionError,
    ScriptExhaustedError,
    SerializationError,
    StaleReviewError,
    StaleSnapshotError,
    StateNotFoundError,
    StoreUnavailableError,
    StoreURLError,
    ThreadConflictError,
    ThreadNotFoundError,
    ThreadStateError,
    ToolCallsInDoubtError,
    UpcasterError,
)
from covonaut_es.migrations import check_upcasters
from covonaut_es.providers import AsyncProvider, Provider, ScriptedProvider, collect_stream
from covonaut_es.queue_items import PendingReview
from covonaut_es.retry import RetryPolicy
from covonaut_es.review_queue import ReviewQueue
from covonaut_es.states import FileStateStore, MemoryStateStore, StateStore
from covonaut_es.store import Store, create_cipher_key, open_store
from covonaut_es.tools import ApprovalPolicy, Tool, ToolContext
from covonaut_es.tree import BranchPoint, ForkRecord, SessionTree, ThreadTree, TreeStats
from covonaut_es.upcasting import Upcaster
from covonaut_es.values import (
    Checkpoint,
    CheckpointReason,
    Compaction,
    Interrupt,
    Label,
    Message,
    PendingToolCall,
    ProviderRequest,
    ProviderResponse,
    Role,
    RunMode,
    StateDocument,
    StreamDelta,
    ThreadParent,
    ThreadState,
    ThreadStatus,
    ToolCall,
    ToolOutcome,
    ToolSpec,
    Usage,
)

if TYPE_CHECKING:
    from covonaut_es.anthropic_provider import AnthropicProvider
    from covonaut_es.openai_provider import OpenAIProvider

__all__ = [
    "Agent",
    "AgentApplication",
    "AgentConfig",
    "AgentThread",
    "AnthropicProvider",
    "ApprovalPolicy",
    "AsyncProvider",
    "AuditEntry",
    "AuditFinding",
    "AuditReport",
    "BranchPoint",
    "Checkpoint",
    "CheckpointNotFoundError",
    "CheckpointReason",
    "CheckpointSettings",
    "Compaction",
    "CompactionPlan",
    "Compactor",
    "ConfigurationError",
    "CovonautError",
    "Decision",
    "FileStateStore",
    "ForkRecord",
    "HmacReviewerVerifier",
    "Interrupt",
    "InterruptError",
    "InterruptPendingError",
    "InvalidStateKeyError",
    "Label",
    "MaxTurnsExceededError",
    "MemoryStateStore",
    "Message",
    "MissingUpcasterError",
    "NotInterruptedError",
    "OpenAIProvider",
    "PendingReview",
    "PendingToolCall",
    "Provider",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderRateLimitError",
    "ProviderRequest",
    "ProviderRequestError",
    "ProviderResponse",
    "ProviderServerError",
    "RetryPolicy",
    "Review",
    "ReviewDecision",
    "ReviewNotFoundError",
    "ReviewPendingError",
    "ReviewQueue",
    "ReviewRequest",
    "ReviewerNotVerifiedError",
    "ReviewerVerifier",
    "Role",
    "RunMode",
    "SchemaVersionError",
    "ScriptExhaustedError",
    "ScriptedProvider",
    "SerializationError",
    "SessionTree",
    "StaleReviewError",
    "StaleSnapshotError",
    "StateDocument",
    "StateNotFoundError",
    "StateStore",
    "Store",
    "StoreURLError",
    "StoreUnavailableError",
    "StreamDelta",
    "SummarizingCompactor",
    "ThreadConflictError",
    "ThreadNotFoundError",
    "ThreadParent",
    "ThreadState",
    "ThreadStateError",
    "ThreadStatus",
    "ThreadTree",
    "Tool",
    "ToolCall",
    "ToolCallsInDoubtError",
    "ToolContext",
    "ToolOutcome",
    "ToolSpec",
    "TreeStats",
    "Upcaster",
    "UpcasterError",
    "Usage",
    "canonical_json",
    "check_upcasters",
    "collect_stream",
    "create_cipher_key",
    "open_store",
    "operation_digest",
]

# Attribute -> (module, SDK package, extra): the adapters that need an optional SDK.
_LAZY_PROVIDERS = {
    "AnthropicProvider": ("covonaut_es.anthropic_provider", "anthropic", "anthropic"),
    "OpenAIProvider": ("covonaut_es.openai_provider", "openai", "openai"),
}


def __getattr__(name: str) -> object:
    """Import a provider adapter on first access (PEP 562).

    Raises:
        ImportError: The adapter's SDK is not installed; the message names the extra.
    """
    if name not in _LAZY_PROVIDERS:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    module_name, package, extra = _LAZY_PROVIDERS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.partition(".")[0] != package:
            raise
        msg = (
            f"covonaut_es.{name} needs the {package!r} package, which is not installed: "
            f"pip install 'covonaut-es[{extra}]'"
        )
        raise ImportError(msg, name=package) from exc
    value: object = getattr(module, name)
    globals()[name] = value
    return value
