"""covonaut-es: durable, reviewable LLM agents as event-sourced aggregates.

The public API is what ``__all__`` lists; every other module is internal.
"""

from covonaut_es.agent import Agent
from covonaut_es.compaction import CompactionPlan, Compactor, SummarizingCompactor
from covonaut_es.config import AgentConfig, CheckpointSettings
from covonaut_es.domain import AgentThread, Compaction, RunMode, ThreadState, ToolOutcome
from covonaut_es.errors import (
    ConfigurationError,
    CovonautError,
    InterruptError,
    InterruptPendingError,
    MaxTurnsExceededError,
    MissingUpcasterError,
    NotInterruptedError,
    ProviderError,
    SchemaVersionError,
    ScriptExhaustedError,
    SerializationError,
    StoreUnavailableError,
    StoreURLError,
    ThreadConflictError,
    ThreadNotFoundError,
    ThreadStateError,
    ToolCallsInDoubtError,
)
from covonaut_es.providers import Provider, ScriptedProvider, collect_stream
from covonaut_es.store import Store, create_cipher_key, open_store
from covonaut_es.tools import Tool, ToolContext
from covonaut_es.values import (
    Checkpoint,
    CheckpointReason,
    Interrupt,
    Message,
    PendingToolCall,
    ProviderRequest,
    ProviderResponse,
    Role,
    StreamDelta,
    ThreadStatus,
    ToolCall,
    ToolSpec,
    Usage,
)

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentThread",
    "Checkpoint",
    "CheckpointReason",
    "CheckpointSettings",
    "Compaction",
    "CompactionPlan",
    "Compactor",
    "ConfigurationError",
    "CovonautError",
    "Interrupt",
    "InterruptError",
    "InterruptPendingError",
    "MaxTurnsExceededError",
    "Message",
    "MissingUpcasterError",
    "NotInterruptedError",
    "PendingToolCall",
    "Provider",
    "ProviderError",
    "ProviderRequest",
    "ProviderResponse",
    "Role",
    "RunMode",
    "SchemaVersionError",
    "ScriptExhaustedError",
    "ScriptedProvider",
    "SerializationError",
    "Store",
    "StoreURLError",
    "StoreUnavailableError",
    "StreamDelta",
    "SummarizingCompactor",
    "ThreadConflictError",
    "ThreadNotFoundError",
    "ThreadState",
    "ThreadStateError",
    "ThreadStatus",
    "Tool",
    "ToolCall",
    "ToolCallsInDoubtError",
    "ToolContext",
    "ToolOutcome",
    "ToolSpec",
    "Usage",
    "collect_stream",
    "create_cipher_key",
    "open_store",
]
