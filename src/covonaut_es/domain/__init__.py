"""The domain: an agent thread as a pure event-sourced aggregate.

This package owns :class:`AgentThread` with its nested events, the values of its state,
the review ledger that makes approvals single-use, what a fork inherits, and the session
tree's queries. The hash chain that makes tampering evident is the store's: it seals
events when it saves them, and the aggregate only holds the head it is given.
Everything here is pure: no I/O and no clock (every command takes ``now`` from its
caller). Of the library it imports
only :mod:`covonaut_es.errors` and :mod:`covonaut_es.messages` (besides eventsourcing's
domain classes and msgspec), never a layer above it.
"""

from covonaut_es.domain._calls import requested_call
from covonaut_es.domain._canonical import canonical_json
from covonaut_es.domain._ids import (
    check_thread_id,
    check_thread_id_or_stored,
    check_thread_stream,
    default_fork_id,
    thread_aggregate_id,
)
from covonaut_es.domain._review_rules import (
    check_may_act_on_call,
    check_may_decide,
    may_act_on_call,
    may_decide,
    may_offer_edit,
    same_reviewer,
)
from covonaut_es.domain._reviews import (
    Decision,
    Review,
    ReviewDecision,
    ReviewLimit,
    ReviewRequest,
    ReviewRules,
    near,
    operation_digest,
)
from covonaut_es.domain._snapshot import ThreadSnapshot
from covonaut_es.domain._thread import (
    AgentThread,
    message_id_problem,
    run_input,
    steering_message,
)
from covonaut_es.domain._tool_pins import ToolPin
from covonaut_es.domain._tree import BranchPoint, ForkRecord, SessionTree, ThreadTree, TreeStats
from covonaut_es.domain._values import (
    Checkpoint,
    CheckpointReason,
    Compaction,
    Interrupt,
    Label,
    Pause,
    PauseKind,
    PendingToolCall,
    RunMode,
    StateDocument,
    ThreadParent,
    ThreadState,
    ThreadStatus,
    ToolOutcome,
    TypedOutput,
    awaiting_a_person,
)

__all__ = [
    "AgentThread",
    "BranchPoint",
    "Checkpoint",
    "CheckpointReason",
    "Compaction",
    "Decision",
    "ForkRecord",
    "Interrupt",
    "Label",
    "Pause",
    "PauseKind",
    "PendingToolCall",
    "Review",
    "ReviewDecision",
    "ReviewLimit",
    "ReviewRequest",
    "ReviewRules",
    "RunMode",
    "SessionTree",
    "StateDocument",
    "ThreadParent",
    "ThreadSnapshot",
    "ThreadState",
    "ThreadStatus",
    "ThreadTree",
    "ToolOutcome",
    "ToolPin",
    "TreeStats",
    "TypedOutput",
    "awaiting_a_person",
    "canonical_json",
    "check_may_act_on_call",
    "check_may_decide",
    "check_thread_id",
    "check_thread_id_or_stored",
    "check_thread_stream",
    "default_fork_id",
    "may_act_on_call",
    "may_decide",
    "may_offer_edit",
    "message_id_problem",
    "near",
    "operation_digest",
    "requested_call",
    "run_input",
    "same_reviewer",
    "steering_message",
    "thread_aggregate_id",
]
