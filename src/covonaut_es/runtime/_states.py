"""Saving and restoring the state of :class:`~covonaut_es.Agent`'s thread.

Internal: :class:`StateCommands` is a base of ``Agent``. Checkpoints are records in the
thread store; a named state is a self-contained copy of the thread's state in
``AgentConfig.state_store``, from which a new thread can go on.
"""

from __future__ import annotations

import uuid

from covonaut_es._aio import in_worker_thread
from covonaut_es.domain import AgentThread, Checkpoint, CheckpointReason, StateDocument, ThreadState
from covonaut_es.domain._named_states import check_state_key
from covonaut_es.errors import ConfigurationError, StateNotFoundError, ThreadConflictError
from covonaut_es.runtime._agent_base import AgentBase
from covonaut_es.runtime._config import CheckpointSettings
from covonaut_es.runtime._loop import Commit
from covonaut_es.store import StateStore
from covonaut_es.store._states import decode_state_document, encode_state_document, state_document


class StateCommands(AgentBase):
    """Checkpoints and named states: saving the thread's state and going back to it."""

    # Checkpoints ------------------------------------------------------------------

    def save_checkpoint(self) -> int:
        """Save a checkpoint now and return its sequence number."""
        settings = self._require_checkpointing("save_checkpoint()")
        with (
            self._exclusive(),
            self._service.session(
                self._thread_id, thread=self._thread, migrators=self._migrators
            ) as session,
        ):
            self._bind_session(session)
            checkpoint = session.thread.save_checkpoint(
                CheckpointReason.MANUAL,
                retain=settings.store.max_checkpoints_per_thread,
                now=self.config.clock(),
            )
            self._commit(session, Commit(checkpoint=True))
            return checkpoint.sequence

    def restore_latest_checkpoint(self, thread_id: str | None = None) -> Checkpoint | None:
        """Bind this agent to a stored thread and load its latest committed state.

        Restores state and interrupt information only: the model is not called.
        Then call ``run``, ``continue_run`` or ``resume``.

        Args:
            thread_id: The thread to restore; defaults to the configured one.

        Returns:
            The thread's newest checkpoint, or None if none was saved yet.

        Raises:
            ThreadNotFoundError: The store has no such thread.
        """
        settings = self._require_checkpointing("restore_latest_checkpoint()")
        with self._run_lock:
            thread = settings.store.load(
                self._thread_id if thread_id is None else thread_id,
                snapshot_migrators=settings.migrators,
            )
            self._thread_id = thread.thread_id
            self._bind(thread)
            return thread.checkpoints[-1] if thread.checkpoints else None

    asave_checkpoint = in_worker_thread(save_checkpoint)
    arestore_latest_checkpoint = in_worker_thread(restore_latest_checkpoint)

    # Named states -----------------------------------------------------------------

    def save_state(self, key: str) -> StateDocument:
        """Save a self-contained copy of the thread's current state under ``key`` in
        ``AgentConfig.state_store``, replacing what was saved there. The thread itself
        is not changed.

        Returns:
            The document saved; it is stored with its schema version.

        Raises:
            ConfigurationError: No state store is configured.
            InvalidStateKeyError: The key is not allowed.
            ToolCallsInDoubtError: Some tool calls have no recorded result; settle them
                first.
        """
        store = self._require_state_store("save_state()")
        check_state_key(key)
        with self._run_lock:
            document = state_document(self._current.state, saved_at=self.config.clock())
        store.write_state(key, encode_state_document(document))
        return document

    def load_state(self, key: str, *, thread_id: str | None = None) -> ThreadState:
        """Continue from the state saved under ``key``, as a new thread.

        The document is first migrated to the current schema, with
        ``AgentConfig.state_migrators`` replacing the library's steps they name;
        if that fails, nothing has changed. The agent is then bound to a new thread
        whose first event, ``StartedFromState``, records the key, the document and the
        schema version it was stored at. Like a restore, this never calls the model:
        then call ``run``, ``continue_run`` or ``resume``.

        Args:
            key: The key the state was saved under.
            thread_id: The new thread's id; by default the key and a random suffix.

        Returns:
            The new thread's state.

        Raises:
            ConfigurationError: No state store is configured.
            InvalidStateKeyError: The key is not allowed.
            StateNotFoundError: Nothing is saved under the key.
            SerializationError: The document cannot be migrated or read; the subclass
                says why (``SchemaVersionError`` for a document newer than this code).
            ThreadConflictError: The checkpoint store already has a thread with that id.
        """
        store = self._require_state_store("load_state()")
        data = store.read_state(key)
        if data is None:
            msg = f"no state is saved under key {key!r} in {store!r}; save_state({key!r}) saves one"
            raise StateNotFoundError(msg)
        document, stored_version = decode_state_document(
            data, where=f"state {key!r} in {store!r}", migrators=self.config.state_migrators
        )
        new_thread_id = f"{key}-{uuid.uuid4().hex[:12]}" if thread_id is None else thread_id
        settings = self.config.checkpoint
        if settings is not None and settings.store.exists(new_thread_id):
            msg = (
                f"thread {new_thread_id!r} already exists in store {settings.store.url}; "
                "load_state() starts a new thread: pass another thread_id"
            )
            raise ThreadConflictError(msg, thread_id=new_thread_id, expected_version=0)
        thread = AgentThread.start_from_state(
            new_thread_id,
            key=key,
            document=document,
            stored_version=stored_version,
            now=self.config.clock(),
        )
        with self._exclusive(), self._service.session(new_thread_id, thread=thread) as session:
            previous_thread_id, self._thread_id = self._thread_id, new_thread_id
            self._bind(thread)
            try:
                self._commit(session, Commit())
            except ThreadConflictError:
                self._thread_id = previous_thread_id  # created meanwhile by another writer
                raise
        return thread.state

    asave_state = in_worker_thread(save_state)
    aload_state = in_worker_thread(load_state)

    def _require_state_store(self, operation: str) -> StateStore:
        if self.config.state_store is None:
            msg = (
                f"{operation} needs AgentConfig(state_store=...): a MemoryStateStore, a "
                "FileStateStore(path) or a Store"
            )
            raise ConfigurationError(msg)
        return self.config.state_store

    def _require_checkpointing(self, operation: str) -> CheckpointSettings:
        if self.config.checkpoint is None:
            msg = f"{operation} needs AgentConfig(checkpoint=CheckpointSettings(store=...))"
            raise ConfigurationError(msg)
        return self.config.checkpoint
