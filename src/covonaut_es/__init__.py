"""covonaut-es: durable, reviewable LLM agents as event-sourced aggregates.

The public API is what ``__all__`` lists: the names a user meets in the README, the base
error and the errors a caller catches in normal use. Everything else is imported from
its layer's package (:mod:`covonaut_es.domain`, :mod:`covonaut_es.store`,
:mod:`covonaut_es.runtime`, :mod:`covonaut_es.providers`, :mod:`covonaut_es.projections`,
:mod:`covonaut_es.audit`, :mod:`covonaut_es.errors`, ...). The model provider adapters
live in :mod:`covonaut_es.providers.openai` and :mod:`covonaut_es.providers.anthropic`;
``covonaut_es.OpenAIProvider`` and ``covonaut_es.AnthropicProvider`` import them on first
use, so that their SDKs stay optional extras. This module only gathers names: nothing
in the library imports it.
"""

from typing import TYPE_CHECKING

from covonaut_es._extras import lazy_names
from covonaut_es._review_policy import ReviewPolicy
from covonaut_es.domain import (
    AgentThread,
    ThreadState,
    ThreadStatus,
    ThreadTree,
    canonical_json,
    operation_digest,
)
from covonaut_es.errors import (
    CovonautError,
    InterruptError,
    InterruptPendingError,
    OutputValidationError,
    ReviewerNotPermittedError,
    ReviewerNotVerifiedError,
    ReviewExpiredError,
    SchemaVersionError,
    SerializationError,
    StalePauseError,
    StaleReviewError,
    StoreUnavailableError,
    StoreURLError,
    ThreadBusyError,
    ThreadConflictError,
    ThreadNotFoundError,
    ToolCallsInDoubtError,
    ToolInDoubtError,
    ToolServerError,
    UnreadableEventError,
)
from covonaut_es.messages import (
    Message,
    ProviderRequest,
    ProviderResponse,
    Role,
    TextDelta,
    ToolCall,
    ToolCallDelta,
)
from covonaut_es.projections import ReviewQueue
from covonaut_es.providers import Provider, RetryPolicy, ScriptedProvider
from covonaut_es.runtime import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    CommittedEvent,
    RunResult,
    StreamItem,
)
from covonaut_es.service import HmacReviewerVerifier
from covonaut_es.store import (
    AgentApplication,
    FileStateStore,
    MemoryStateStore,
    Store,
    create_cipher_key,
    open_store,
)
from covonaut_es.tools import Tool, ToolContext
from covonaut_es.workers import Worker

if TYPE_CHECKING:
    from covonaut_es.providers.anthropic import AnthropicProvider as AnthropicProvider
    from covonaut_es.providers.openai import OpenAIProvider as OpenAIProvider

# The adapters are left out of __all__: `from covonaut_es import *` must work without
# their extras.
__all__ = [
    "Agent",
    "AgentApplication",
    "AgentConfig",
    "AgentThread",
    "CheckpointSettings",
    "CommittedEvent",
    "CovonautError",
    "FileStateStore",
    "HmacReviewerVerifier",
    "InterruptError",
    "InterruptPendingError",
    "MemoryStateStore",
    "Message",
    "OutputValidationError",
    "Provider",
    "ProviderRequest",
    "ProviderResponse",
    "RetryPolicy",
    "ReviewExpiredError",
    "ReviewPolicy",
    "ReviewQueue",
    "ReviewerNotPermittedError",
    "ReviewerNotVerifiedError",
    "Role",
    "RunResult",
    "SchemaVersionError",
    "ScriptedProvider",
    "SerializationError",
    "StalePauseError",
    "StaleReviewError",
    "Store",
    "StoreURLError",
    "StoreUnavailableError",
    "StreamItem",
    "TextDelta",
    "ThreadBusyError",
    "ThreadConflictError",
    "ThreadNotFoundError",
    "ThreadState",
    "ThreadStatus",
    "ThreadTree",
    "Tool",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallsInDoubtError",
    "ToolContext",
    "ToolInDoubtError",
    "ToolServerError",
    "UnreadableEventError",
    "Worker",
    "canonical_json",
    "create_cipher_key",
    "open_store",
    "operation_digest",
]

# The provider adapters are imported on first access: their SDKs are optional extras.
if not TYPE_CHECKING:  # a type checker sees the names above, and no other
    __getattr__ = lazy_names(
        __name__,
        globals(),
        {
            "AnthropicProvider": "covonaut_es.providers.anthropic",
            "OpenAIProvider": "covonaut_es.providers.openai",
        },
    )
