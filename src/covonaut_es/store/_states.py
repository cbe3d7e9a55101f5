"""Named states: state documents and the stores that keep them by key.

:func:`state_document` takes a self-contained copy of a thread's state; it is stored as
a JSON object with its schema version under ``"_v"``, and :func:`decode_state_document`
migrates it to the current schema, one version at a time, when it is read. A state store
keeps the documents by key: :class:`MemoryStateStore` in this process,
:class:`FileStateStore` in a directory of JSON files, or the thread
:class:`~covonaut_es.Store` itself (through its :class:`StoredStates`).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import msgspec
from eventsourcing.persistence import IntegrityError

from covonaut_es._arguments import check_instance
from covonaut_es.domain import StateDocument, ThreadState
from covonaut_es.domain._canonical import json_data
from covonaut_es.domain._named_states import StateSaved, check_state_key, state_stream_id
from covonaut_es.errors import SerializationError, StoredRowError, ToolCallsInDoubtError
from covonaut_es.migrations import VERSION_KEY, Upcaster, stored_version
from covonaut_es.migrations._registry import state_document_schema
from covonaut_es.migrations._upcasting import NO_MIGRATORS
from covonaut_es.store._application import AgentApplication
from covonaut_es.store._codec import decode_object
from covonaut_es.store._read_only import WriteGuard


@runtime_checkable
class StateStore(Protocol):
    """Where named state documents are kept, by key.

    Every state store accepts the same keys (see ``check_state_key``) and keeps each
    document as the JSON object it was given; the agent encodes and migrates them.
    """

    def write_state(self, key: str, document: Mapping[str, Any]) -> None:
        """Save ``document`` under ``key``, replacing what was saved there before.

        Raises:
            InvalidStateKeyError: The key is not allowed.
            ConfigurationError: ``document`` is no mapping.
            NonFiniteNumberError: It holds NaN or an infinity (:func:`plain_document`).
            NotJSONDataError: It holds what else JSON cannot carry.
        """

    def read_state(self, key: str) -> dict[str, Any] | None:
        """The document last saved under ``key``, or None.

        Raises:
            InvalidStateKeyError: The key is not allowed.
            SerializationError: What is stored there is not a JSON object.
        """


def plain_document(key: str, document: Mapping[str, Any]) -> dict[str, Any]:
    """``document`` as every state store keeps it under ``key``: the JSON object it
    reads back as (lists for tuples, text for datetimes), so that what is read is what
    was saved, and what would not read back alike is refused before anything is saved.

    Raises:
        ConfigurationError: ``document`` is no mapping.
        NonFiniteNumberError: It holds NaN or an infinity, which msgspec would write
            as null. Names the state.
        NotJSONDataError: It holds what else JSON cannot carry: an object msgspec
            cannot encode, a key that is no text, a lone surrogate. Names the state.
    """
    check_instance("document", document, Mapping, "a mapping of JSON values")
    plain: dict[str, Any] = json_data(document, where=f"state {key!r}")
    return plain


class MemoryStateStore:
    """State documents in this process's memory, lost when it exits."""

    def __init__(self) -> None:
        self._documents: dict[str, bytes] = {}

    def write_state(self, key: str, document: Mapping[str, Any]) -> None:
        # Kept encoded, so that later changes to the caller's objects change nothing.
        encoded = msgspec.json.encode(plain_document(check_state_key(key), document))
        self._documents[key] = encoded

    def read_state(self, key: str) -> dict[str, Any] | None:
        data = self._documents.get(check_state_key(key))
        return None if data is None else decode_object(data, where=f"state {key!r}")

    def __repr__(self) -> str:
        return "MemoryStateStore()"


class FileStateStore:
    """State documents as JSON files, one per key, in a directory.

    A document is written to a temporary file in the same directory and renamed over
    the old one, so a reader sees the old document or the new one, never a mixture,
    also when the process dies while writing. Keys are checked so that a key cannot
    name a file outside the directory.

    Args:
        path: The directory; it is created on the first save.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def write_state(self, key: str, document: Mapping[str, Any]) -> None:
        target = self._file(key)
        encoded = msgspec.json.encode(plain_document(key, document))
        data = msgspec.json.format(encoded, indent=2) + b"\n"
        self.path.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=self.path, prefix=f".{key}.", suffix=".tmp")
        try:
            with os.fdopen(descriptor, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise
        _sync_directory(self.path)

    def read_state(self, key: str) -> dict[str, Any] | None:
        file = self._file(key)
        try:
            data = file.read_bytes()
        except FileNotFoundError:
            return None
        return decode_object(data, where=f"state file {str(file)!r}")

    def state_keys(self) -> Iterator[str]:
        """The keys of the saved documents, in sorted order."""
        for file in sorted(self.path.glob("*.json")):
            with contextlib.suppress(ValueError):
                yield check_state_key(file.stem)

    def _file(self, key: str) -> Path:
        return self.path / f"{check_state_key(key)}.json"

    def __repr__(self) -> str:
        return f"FileStateStore({str(self.path)!r})"


class StoredStates:
    """State documents in the thread store, each key a stream of its own, so the store
    keeps every save; a :class:`~covonaut_es.Store` delegates to one.

    Args:
        app: The store's application.
        guard: Refuses saves to a store opened read-only.
    """

    def __init__(self, app: AgentApplication, guard: WriteGuard) -> None:
        self._app = app
        self._guard = guard

    def write_state(self, key: str, document: Mapping[str, Any]) -> None:
        """As :meth:`covonaut_es.Store.write_state`."""
        stream = state_stream_id(key)
        self._guard.refuse_if_read_only(f"state {key!r} was not saved")
        plain = plain_document(key, document)
        while True:
            last = self._app.recorder.select_events(stream, desc=True, limit=1)
            saved = StateSaved(
                originator_id=stream,
                originator_version=last[0].originator_version + 1 if last else 1,
                timestamp=StateSaved.create_timestamp(),
                key=key,
                document=plain,
            )
            with contextlib.suppress(IntegrityError):  # another writer saved first: go after it
                self._app.put_and_tell([saved])
                return

    def read_state(self, key: str) -> dict[str, Any] | None:
        """As :meth:`covonaut_es.Store.read_state`.

        Raises:
            StoredRowError: The state's newest stored event is not a save of this key (a
                row moved or copied into its stream behind the library).
        """
        for saved in self._app.events.get(state_stream_id(key), desc=True, limit=1):
            if not isinstance(saved, StateSaved) or saved.key != key:
                msg = (
                    f"stored {type(saved).__qualname__} at version {saved.originator_version} "
                    f"of state {key!r} is not a save of that state: it was copied or altered "
                    "behind the library"
                )
                raise StoredRowError(msg)
            return saved.document
        return None


def _sync_directory(path: Path) -> None:
    # Makes the rename itself durable; not every platform can open a directory.
    with contextlib.suppress(OSError):
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def state_document(state: ThreadState, *, saved_at: datetime) -> StateDocument:
    """A named state of the thread as it is now.

    Raises:
        ToolCallsInDoubtError: Some tool calls have no recorded result; a document
            cannot say whether they ran, so settle them first.
    """
    if state.open_calls:
        ids = tuple(pending.call.id for pending in state.open_calls)
        msg = (
            f"thread {state.thread_id!r} has tool calls in doubt {list(ids)}; a named state "
            "cannot record whether they ran: settle each one, then save the state"
        )
        raise ToolCallsInDoubtError(msg, tool_call_ids=ids)
    return StateDocument(
        thread_id=state.thread_id,
        version=state.version,
        saved_at=saved_at,
        status=state.status,
        messages=state.messages,
        turn=state.turn,
        usage=state.usage,
        interrupts=state.interrupts,
        compaction=state.compaction,
        error=state.error,
    )


def encode_state_document(document: StateDocument) -> dict[str, Any]:
    """The JSON object a state store keeps, with the current schema version."""
    encoded: dict[str, Any] = msgspec.to_builtins(document)
    encoded[VERSION_KEY] = state_document_schema().version
    return encoded


def decode_state_document(
    data: Mapping[str, Any],
    *,
    where: str,
    migrators: Mapping[int, Upcaster] = NO_MIGRATORS,
) -> tuple[StateDocument, int]:
    """Migrate a stored state document to the current schema and decode it.

    Args:
        data: The JSON object as a state store returned it.
        where: What is being read, for messages.
        migrators: The application's upcasters (``AgentConfig.state_migrators``); each
            replaces the library's own for its step.

    Returns:
        The document, and the schema version it was stored at.

    Raises:
        SerializationError: It cannot be migrated or decoded (a subclass says why).
    """
    stored = stored_version(data)
    upgraded = state_document_schema().upgrade(dict(data), where=where, migrators=migrators)
    assert isinstance(stored, int)  # upgrade() refuses anything else
    del upgraded[VERSION_KEY]
    try:
        document = msgspec.convert(upgraded, StateDocument)
    except msgspec.ValidationError as exc:
        msg = f"{where}: StateDocument data (schema version {stored}) does not decode: {exc}"
        raise SerializationError(msg) from exc
    return document, stored
