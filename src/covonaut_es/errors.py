"""The library's exceptions.

Every exception derives from :class:`CovonautError` and also from the builtin a caller
would naturally catch, so ``except LookupError`` finds a missing thread.
"""

from __future__ import annotations

from typing import Any

from eventsourcing.persistence import ConnectionPoolClosedError


class CovonautError(Exception):
    """Base class of every error raised by covonaut-es."""


class ConfigurationError(CovonautError, ValueError):
    """A configuration value is missing or invalid."""


class StoreURLError(ConfigurationError):
    """A store URL has an unknown scheme or is malformed."""


class StoreSettingsError(ConfigurationError):
    """A store was opened with other encryption or compression options than it was
    created with; nothing was written."""


class CipherKeyMismatchError(StoreSettingsError):
    """The cipher key given is not the store's: another key, none for an encrypted
    store, or one for a store that is not encrypted."""


class CompressionMismatchError(StoreSettingsError):
    """The compress option given is not the one the store was created with."""


class ChainKeyRequiredError(StoreSettingsError):
    """The store seals its hash chain with a key, and was opened to write without it
    (``chain_key``; ``--chain-key-env`` on the command line); nothing was written."""


class ChainKeyMismatchError(StoreSettingsError):
    """The chain key given is not the one the store adopted; nothing was written."""


class BrokenChainError(CovonautError, RuntimeError):
    """A save was refused: the stored event it would be sealed after does not verify
    under the store's chain key (it was rewritten by someone without the key). Nothing
    was stored; ``verify`` names the damage.

    Attributes:
        thread_id: The thread whose save was refused.
        version: The version of the stored event that does not verify.
    """

    def __init__(self, message: str, *, thread_id: str, version: int) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.version = version


class FollowerError(CovonautError):
    """A follower of the application (a process application of an eventsourcing
    ``System`` run in the writer's thread) failed on events a command stored outside a
    save (a fork, a named state, a submission, an input taken, an import): the events
    are stored; the follower's error is its cause. Typed apart, so that a follower's
    own conflict is never taken for another writer's."""


class StoreUnavailableError(CovonautError, ConnectionError):
    """The store's database cannot be reached or refused the connection, or failed a
    statement (a full disk, a session the server ended): a write it failed was rolled
    back whole."""


class StoreLockedError(StoreUnavailableError):
    """Another connection held the store's write lock for longer than the store waits
    (SQLite's ``database is locked``): nothing was saved; try again shortly."""

    @staticmethod
    def said_by(error: BaseException) -> bool:
        """Whether a database's ``error`` is SQLite's: another connection held the
        write lock for longer than the store waits."""
        return "database is locked" in str(error)


class StoreOwnerRequiredError(StoreUnavailableError, PermissionError):
    """The store lacks a table, index, column or function of this version's (it is
    missing, or an earlier version's), and the role that opened it may not make it:
    open the store once as the owner of its tables (ADR 0117)."""


class UntrustedLeaseDirectoryError(StoreUnavailableError):
    """The directory beside a SQLite store that holds its run leases and worker records
    could have been made, or can be written, by a local user other than the store's: it
    is a link, belongs to another user, or is writable by every user. Nothing in it was
    used; remove it and the store makes it again."""


class NotAStoreError(CovonautError, ValueError):
    """The database is not a covonaut-es store: a file that is not a database, or
    tables of another application under the names a store uses."""


class ForeignSchemaError(NotAStoreError):
    """The database holds another application's tables: under a store's names but with
    other columns (or, on PostgreSQL, columns of other types: a store's table changed
    around the library), or an eventsourcing application's own and no store (open that
    one with ``Store.from_application``); nothing was written to them."""


class ReadOnlyStoreError(CovonautError, PermissionError):
    """The store cannot be written: its file is read-only, it was opened read-only, or
    its PostgreSQL session is read-only (a standby, ``default_transaction_read_only``)."""


class StorePrivilegeError(ReadOnlyStoreError):
    """The store's database refused a statement because the role the store connects as
    lacks a privilege it needs on a table of the store (or a row-level security policy
    refused its row): nothing was written. Grant the role what the operations guide
    lists for an application role."""


class StoreClosedError(StoreUnavailableError, ConnectionPoolClosedError):
    """The store was closed (:meth:`covonaut_es.Store.close`): open it again to use its
    database. Also eventsourcing's ``ConnectionPoolClosedError``, which a closed SQLite
    store raised before, for code that catches that."""


class StoreDamagedError(StoreUnavailableError):
    """The store's database holds what the library cannot use, and will on every try: a
    damaged SQLite file, tables changed around the library (a rule, a trigger, a column,
    a constraint or index that refuses its rows). Nothing was written. Restore the file or
    the tables from a backup, or remove what was added; a follower of the log stops on
    it rather than wait for a database that answers."""


class StoreFileReplacedError(StoreUnavailableError):
    """A SQLite store's file was replaced or deleted while the store was open (a backup
    restored with ``mv``, say): its writes would go on into the old file, lost, and its
    reads would show the old file's threads, so each is refused. Open the store again."""


class MissingEventError(CovonautError, LookupError):
    """A thread's stream lacks an event that its later events follow: it was deleted
    behind the library's back.

    Attributes:
        thread_id: The damaged thread.
        version: The missing version (for a missing first event, the version the
            stream starts at instead, or, when none of the stream is left, the version
            its head was anchored at).
    """

    def __init__(self, message: str, *, thread_id: str, version: int) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.version = version


class MissingFirstEventError(MissingEventError):
    """A thread's stream lacks its first event, so the thread cannot be rebuilt (nor
    listed by ``thread_ids``, which reads first events); or the store anchored the
    thread's head, and none of its stream can be read."""


class MissingToolCallError(CovonautError, LookupError):
    """A stored ``ToolCalled`` names a call that no assistant message before it holds:
    the message that asked for the call was deleted or changed behind the library's
    back, so the thread cannot be rebuilt.

    Attributes:
        thread_id: The damaged thread.
        tool_call_id: The call id the ``ToolCalled`` event names.
        version: The version of that event.
    """

    def __init__(self, message: str, *, thread_id: str, tool_call_id: str, version: int) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.tool_call_id = tool_call_id
        self.version = version


class ThreadNotFoundError(CovonautError, LookupError):
    """No thread with the given id exists in the store."""

    @classmethod
    def in_store(
        cls, thread_id: str, store_url: str, *, version: int | None = None
    ) -> ThreadNotFoundError:
        """The error for a store (named by its URL) that holds no events of the thread,
        or none up to ``version``: every read and command that misses one says it so."""
        at = "" if version is None else f" at version {version}"
        return cls(f"thread {thread_id!r} not found{at} in store {store_url}")


class CheckpointNotFoundError(CovonautError, LookupError):
    """The thread has no (retained) checkpoint with that sequence number."""


class ThreadConflictError(CovonautError, RuntimeError):
    """Another writer appended to the thread first (optimistic concurrency).

    Attributes:
        thread_id: The contested thread.
        expected_version: The version this writer started from.
    """

    def __init__(self, message: str, *, thread_id: str, expected_version: int) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.expected_version = expected_version


class ThreadBusyError(CovonautError, RuntimeError):
    """Another runner holds the thread's run lease: nothing of this run was started,
    no model was asked and no tool was called.

    Attributes:
        thread_id: The thread.
        holder: Who holds the lease (a worker's id, or a process on a host), when the
            store can tell; else None.
    """

    def __init__(self, message: str, *, thread_id: str, holder: str | None = None) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.holder = holder


class ToolCallRunningError(ThreadBusyError):
    """A call of the thread outran its timeout and is in doubt, but its tool still runs
    in this process, or in a live worker's that reports it: nothing settles the call or
    runs it again until the tool has returned (``covonaut_es.runtime.running_calls()``
    lists it till then) or its process is gone, or "did not run" and a retry could run
    it twice. Nothing was recorded.

    Attributes:
        tool_call_id: The call whose tool still runs.
    """

    def __init__(self, message: str, *, thread_id: str, tool_call_id: str) -> None:
        super().__init__(message, thread_id=thread_id)
        self.tool_call_id = tool_call_id


class LeaseLostError(CovonautError, RuntimeError):
    """A runner's lease on a thread no longer stands: its database session ended, or
    another runner took the thread since. Nothing more of the run is stored or run:
    the store refused the write, or the runner stopped before its next tool call.

    Attributes:
        token: The lease the runner held (each lease of a thread has a greater one).
    """

    def __init__(self, message: str, *, token: int) -> None:
        super().__init__(message)
        self.token = token


class ThreadStateError(CovonautError, RuntimeError):
    """The thread is not in a state that allows the requested operation."""


class ThreadAbandonedError(ThreadStateError):
    """The thread was given up while a run was going: the results of the calls that ran
    are recorded after the abandonment, and nothing more runs."""


class NotInterruptedError(ThreadStateError):
    """``resume()`` was called but no interrupt is pending."""


class InterruptPendingError(ThreadStateError):
    """An interrupt is pending: decide it and call ``resume()``."""


class ToolCallsInDoubtError(ThreadStateError):
    """Some tool calls were recorded as called but have no recorded result.

    Attributes:
        tool_call_ids: The calls in doubt; settle each with ``Agent.settle``.
    """

    def __init__(self, message: str, *, tool_call_ids: tuple[str, ...]) -> None:
        super().__init__(message)
        self.tool_call_ids = tool_call_ids


class ReviewPendingError(InterruptPendingError):
    """``resume()`` was called while reviews of the batch still await a decision.

    Attributes:
        review_ids: The reviews to approve or reject first.
    """

    def __init__(self, message: str, *, review_ids: tuple[str, ...]) -> None:
        super().__init__(message)
        self.review_ids = review_ids


class StaleReviewError(ThreadStateError):
    """The review no longer awaits a decision: it was decided already and the thread
    may have moved on. A review is decided once."""


class ReviewExpiredError(StaleReviewError):
    """The review's deadline passed before this decision: it failed closed (its
    operation does not run), and no decision on it is recorded any more."""


class ClockOutOfStepError(ConfigurationError):
    """This process's clock runs ahead of the database's by more than the bound a
    deadline is judged within (``CLOCK_SKEW_BOUND``, ADR 0119): a review it would take
    for expired is still pending, and nothing was recorded. Set the clock in step (NTP),
    or decide through a process whose clock is."""


class NoticeDeliveryError(CovonautError, ConnectionError):
    """A review notice was not delivered: its receiver refused it or could not be
    reached. The notice is not lost: the sender tries it again, with the same
    idempotency key, before any later one."""


class StalePauseError(ThreadStateError):
    """The pause a request names (by the token its page or listing gave) is no longer
    pending: it was dealt with, and the thread may have moved on to another pause on
    the same call. Reload the pause to act on what waits now."""


class ReviewNotFoundError(CovonautError, LookupError):
    """The thread has no review with that id (it may belong to another thread)."""


class AmbiguousReviewError(ReviewNotFoundError):
    """A review id is pending in several threads (forks inherit pending reviews): name
    the thread to decide it on.

    Attributes:
        thread_ids: The threads where it is pending.
    """

    def __init__(self, message: str, *, thread_ids: tuple[str, ...]) -> None:
        super().__init__(message)
        self.thread_ids = thread_ids


class InvalidDecisionError(CovonautError, ValueError):
    """What a person submitted (a review's decision, edited arguments, an answer to a
    pause, a settlement of a call in doubt) is refused: the message names the field and
    what is wrong with it. Nothing was recorded."""


class InvalidPageRequestError(CovonautError, ValueError):
    """A request for a page of the reviewer queue is refused: its cursor is not one a
    page gave, or its size is out of bounds. Ask for the first page again."""


class DecisionNotAllowedError(InvalidDecisionError):
    """The review's tool allows no such decision (a response where its policy allows
    only approve or reject, an edit of an argument it keeps as requested, a second
    approval of another operation than the first under four eyes). Nothing was
    recorded."""


class ReviewerNotVerifiedError(CovonautError, PermissionError):
    """The reviewer's credential could not be verified; nothing was recorded."""


class ReviewerNotPermittedError(CovonautError, PermissionError):
    """The verified reviewer may not make this decision: they lack a scope the review
    (or a limit on its arguments) needs, or they approved it already and it needs a
    second, different reviewer. Nothing was recorded."""


class IdentityProviderUnavailableError(ReviewerNotVerifiedError, ConnectionError):
    """The identity provider's keys could not be fetched, so the reviewer's credential
    could not be checked; nothing was recorded. The credential may be valid: retry."""


class MaxTurnsExceededError(CovonautError, RuntimeError):
    """The model still asked for tools on the last turn ``max_turns`` allowed."""


class OutputValidationError(CovonautError, ValueError):
    """A final answer did not match ``AgentConfig.output_type``: the model's answers
    were refused more often than ``output_retries`` allows (the run is recorded as
    failed), or a recorded output no longer converts into the configured type."""


class ProviderError(CovonautError, RuntimeError):
    """The model provider failed; the thread records the failure and can continue."""


class ProviderCallError(ProviderError):
    """A call to a model provider's API failed: the base of the four below, which catches
    them all.

    Attributes:
        status_code: The HTTP status the API answered with; for an error reported
            inside a stream, the status its error type stands for; None when there was
            no answer (connection errors).
        retry_after: Seconds the API asked the caller to wait before trying again
            (its ``retry-after`` header), or None.
    """

    def __init__(
        self, message: str, *, status_code: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retry_after = retry_after


class ProviderRateLimitError(ProviderCallError):
    """The provider's API refused the call for now: too many requests or tokens (429).

    Retried with backoff by the provider adapters (see :class:`~covonaut_es.RetryPolicy`).
    """


class ProviderServerError(ProviderCallError):
    """The provider's API failed on its side (5xx, overloaded). Retried with backoff."""


class ProviderRequestError(ProviderCallError):
    """The provider's API rejected the call itself: bad request, authentication,
    permission, unknown model (4xx other than 429). Never retried: fix the request."""


class ProviderConnectionError(ProviderCallError):
    """The provider's API could not be reached or did not answer in time. Retried with
    backoff."""


class ScriptExhaustedError(ProviderError):
    """A :class:`~covonaut_es.ScriptedProvider` was asked for more responses than scripted."""


class ToolArgumentsLimitError(CovonautError, ValueError):
    """A tool call's arguments exceed the size or nesting limit (see
    ``covonaut_es.tools.MAX_ARGUMENTS_BYTES`` and ``MAX_ARGUMENTS_DEPTH``): the call is
    refused before it runs and the refusal is recorded as its result."""


class NonFiniteNumberError(CovonautError, ValueError):
    """A value to be written as JSON, or digested, holds NaN or an infinity, which JSON
    (and RFC 8785) cannot carry: refused rather than written as ``null``, which would
    give NaN, an infinity and None one digest."""


class NotJSONDataError(CovonautError, ValueError):
    """A value to be recorded as JSON data, or digested, holds what JSON cannot carry:
    an object msgspec cannot encode, a recursive structure, a lone surrogate."""


class ToolResultError(CovonautError, ValueError):
    """A tool's return value cannot be recorded as JSON text (an unsupported type, a
    recursive structure, NaN or infinity, bytes, a lone surrogate): the call ran, so
    this is recorded as its error result."""


class ToolInDoubtError(CovonautError, RuntimeError):
    """Raised by a tool that cannot tell whether its operation happened (the connection
    to the system that runs it dropped after the request was sent). The call is
    recorded in doubt, as a call past its timeout is: the run pauses on it, and it runs
    again only if its tool is idempotent or a person asks."""


class ToolServerError(CovonautError, ConnectionError):
    """A server of tools (an MCP server) could not be reached, or answered what no such
    server may (a tool list that breaks the limits, a tool our checks refuse). Before a
    run, the run is recorded as failed; during a call, the call never reached it."""


class MCPToolError(CovonautError, RuntimeError):
    """An MCP server's tool ran and reported an error; the model reads its text."""


class SerializationError(CovonautError, ValueError):
    """Stored bytes could not be decoded into the expected type."""


class UnreadableEventError(SerializationError):
    """An event about to be stored holds a value its declared type cannot read back
    (``42`` where a field is ``str``): refused before anything is stored, since every
    later read of its aggregate would fail.

    Attributes:
        event: The event's class name.
        field: The field, as a path into it (``message.content``).
        expected: The type the field declares there.
        found: The type of the value given.
    """

    def __init__(self, event: str, field: str, expected: str, found: str) -> None:
        self.event = event
        self.field = field
        self.expected = expected
        self.found = found
        super().__init__(
            f"event {event} cannot be stored: its field {field!r} is a {found}, declared "
            f"{expected}; it would be written but never read back"
        )


class StoredRowError(SerializationError):
    """A stored row holds a value of the wrong type or shape (a NULL payload, a version
    that is text, an id that is no UUID): it was written around the library, or
    damaged. The message names the stream, the position and the column."""


class CompressionDictionaryError(SerializationError):
    """A stored payload's zstd frame names a compression dictionary this version does
    not ship: it was written by a newer version, or damaged. The message names the
    row."""


class SchemaVersionError(SerializationError):
    """A schema version breaks the one-step order: stored data is newer than this
    code supports, or an upcaster returned another version than the next one."""


class NewerSchemaError(SchemaVersionError):
    """Stored data was written at a schema version newer than this code supports: only
    newer code reads it, so even a cache (a snapshot) is refused rather than passed over."""


class MissingUpcasterError(SerializationError):
    """No upcaster exists for a version step that stored data needs."""


class UpcasterError(SerializationError):
    """An upcaster failed on stored data, or returned something other than a document."""


class StaleSnapshotError(SerializationError):
    """A snapshot cannot be upgraded to the current schema; the thread is rebuilt from its
    events instead, since snapshots are only a cache.

    Raise it from a checkpoint migrator to ask for that rebuild.
    """


class StateNotFoundError(CovonautError, LookupError):
    """No named state is saved under the given key."""


class InvalidStateKeyError(CovonautError, ValueError):
    """A named state's key is empty, too long or has characters a key may not have."""


class InvalidThreadIdError(CovonautError, ValueError):
    """A new thread's id is empty, too long, or holds control or surrogate characters."""


class InterruptError(CovonautError):
    """Raised by a tool to pause the run.

    The agent records the interrupt and a tool result explaining it, then returns; the
    application decides and calls ``resume()``.

    Attributes:
        reason: Why the run pauses, for a person to read.
        data: Optional structured data for the application (JSON-encodable).
    """

    def __init__(self, reason: str, data: Any = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.data = data


class TransferError(CovonautError, ValueError):
    """An export to import is malformed or does not verify; nothing was written."""


class IncompleteExportError(TransferError):
    """An export to import ends without its trailer, or its trailer disagrees with its
    lines: it was cut short or altered; nothing was written."""


class InvalidSubmissionError(CovonautError, ValueError):
    """Input submitted to a thread is not text that can be stored."""


class InvalidRunInputError(CovonautError, ValueError):
    """A run's input cannot be taken: ``run`` was given no str, or a run request a chat
    front end sent the AG-UI endpoint is no AG-UI ``RunAgentInput`` or its new message is
    not text. Nothing was recorded."""
