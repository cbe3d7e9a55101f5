"""Input handed to threads for workers to run: the store's side.

A :class:`~covonaut_es.Store` holds one :class:`Submissions` (``store.submissions``);
workers read input through it, and take it through the service
(:meth:`~covonaut_es.service.ThreadService.take_input`). Each thread's submissions are a
stream of their own (:mod:`covonaut_es.domain._submissions`), so submitting never
conflicts with a run in progress; a worker reads it to find input not yet taken.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any
from uuid import UUID

import attrs
from eventsourcing.persistence import IntegrityError

from covonaut_es._arguments import check_instance, check_position
from covonaut_es.domain import (
    AgentThread,
    RunMode,
    check_thread_id_or_stored,
    thread_aggregate_id,
)
from covonaut_es.domain._submissions import (
    InputSubmitted,
    InputTaken,
    submission_stream_id,
    takes_further,
)
from covonaut_es.errors import ConfigurationError, InvalidSubmissionError, LeaseLostError
from covonaut_es.store._application import AgentApplication
from covonaut_es.store._leases import Lease
from covonaut_es.store._read_only import WriteGuard, guarded


@attrs.frozen
class Submitted:
    """A thread's submissions as read at one version of their stream.

    Attributes:
        thread_id: The thread whose submissions they are.
        inputs: The submissions, oldest first.
        taken: The take that counts: the one of the latest submission taken.
        version: The stream's version read (0: it holds nothing), which a take is
            conditional on.
    """

    thread_id: str
    inputs: tuple[InputSubmitted, ...]
    taken: InputTaken | None
    version: int

    def waiting(self) -> InputSubmitted | None:
        """The submission to run next: the first after the one taken."""
        done = self.taken.submitted_version if self.taken else 0
        return next((s for s in self.inputs if s.originator_version > done), None)

    def taken_input(self) -> InputSubmitted:
        """The submission taken (there is one)."""
        assert self.taken is not None
        version = self.taken.submitted_version
        return next(s for s in self.inputs if s.originator_version == version)


@guarded("Store.submissions")
class Submissions:
    """Submit input to a thread; read and take what was submitted. The one place that
    checks a submission and a take, for the store's methods, the service's command and
    whoever calls ``store.submissions`` itself.

    Args:
        app: The store's application.
        guard: Refuses submissions and takes on a store opened read-only.
        exists: Whether the store holds a thread (a new one's id follows the rule).
        held_lease: The lease of a thread the current task holds, if any.
        head_version: A thread's latest version stored (None: it has no event).
    """

    def __init__(
        self,
        app: AgentApplication,
        guard: WriteGuard,
        exists: Callable[[str], bool],
        held_lease: Callable[[str], Lease | None],
        head_version: Callable[[str], int | None],
    ) -> None:
        self._app = app
        self._guard = guard
        self._exists = exists
        self._held_lease = held_lease
        self._head_version = head_version

    def submit(self, thread_id: str, text: str) -> int:
        """As :meth:`covonaut_es.Store.submit`."""
        if not isinstance(text, str):
            msg = f"submitted input (text) must be a string, got {type(text).__name__}"
            raise InvalidSubmissionError(msg)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            msg = f"submitted input to thread {thread_id!r} is not valid text: {exc}"
            raise InvalidSubmissionError(msg) from exc
        # A worker is to start a thread not stored: its id is refused now, not then.
        stream = submission_stream_id(check_thread_id_or_stored(thread_id, stored=self._exists))
        self._guard.refuse_if_read_only(f"the input to thread {thread_id!r} was not submitted")
        return self._append(stream, InputSubmitted, thread_id=thread_id, text=text)

    def submitted(self, thread_id: str) -> Submitted:
        """The thread's submissions, the take that counts, and the version read."""
        return self._submitted_until(thread_id, None)

    def _submitted_until(self, thread_id: str, last: int | None) -> Submitted:
        """The thread's submissions as stored up to version ``last`` (None: all)."""
        inputs: list[InputSubmitted] = []
        taken: InputTaken | None = None
        version = 0
        for event in self._app.events.get(submission_stream_id(thread_id), lte=last):
            version = event.originator_version
            if isinstance(event, InputSubmitted):
                inputs.append(event)
            elif isinstance(event, InputTaken) and takes_further(
                event, taken.submitted_version if taken else 0
            ):
                taken = event
        return Submitted(thread_id, tuple(inputs), taken, version)

    def take(self, thread_id: str, read: Submitted, thread_version: int) -> InputSubmitted | None:
        """As :meth:`covonaut_es.service.ThreadService.take_input`, the command a runner
        takes input with, which says what it raises. This is where every take is
        checked, whoever calls it: the thread's lease must be held by the current task,
        ``read`` be that thread's submissions as stored (up to its version: a stale read
        is one), and ``thread_version`` no later than the thread's latest version.
        """
        stream = submission_stream_id(thread_id)
        check_instance("submitted", read, Submitted, "a Submitted")
        check_position("thread_version", thread_version)
        waiting = read.waiting()
        if read.thread_id != thread_id or (waiting and waiting.thread_id != thread_id):
            msg = (
                f"the submissions given to take input to thread {thread_id!r} are those "
                f"of thread {read.thread_id!r}: read the thread's own; nothing was recorded"
            )
            raise ConfigurationError(msg)
        if waiting is None:
            return None
        self._guard.refuse_if_read_only(f"the input to thread {thread_id!r} was not taken")
        lease = self._held_lease(thread_id)
        if lease is None:
            msg = (
                f"input to thread {thread_id!r} is taken by the runner holding its run "
                "lease, and this task holds none: take it inside store.lease (a worker's "
                "step does); nothing was recorded"
            )
            raise LeaseLostError(msg, token=0)
        lease.check_before_save()
        self._check_as_stored(read, thread_version)
        self._record_take(stream, read, waiting, thread_version, lease)
        return waiting

    def _check_as_stored(self, read: Submitted, thread_version: int) -> None:
        """Refuse a take from submissions the stream never held (built or edited by
        hand), or past the thread's latest version: a take that names a submission
        never made, or is conditional on a version the stream is not at, skips or
        repeats input.

        Raises:
            ConfigurationError: ``read`` is not the thread's submissions as stored up
                to its version, or ``thread_version`` is past the thread's latest.
        """
        thread_id = read.thread_id
        if read != self._submitted_until(thread_id, read.version):
            msg = (
                f"the submissions given to take input to thread {thread_id!r} are not "
                f"those stored up to their version {read.version}: read them with "
                "store.submissions.submitted; nothing was recorded"
            )
            raise ConfigurationError(msg)
        head = self._head_version(thread_id) or 0
        if thread_version > head:
            msg = (
                f"thread_version {thread_version} given to take input to thread "
                f"{thread_id!r} is past its latest version ({head}); nothing was recorded"
            )
            raise ConfigurationError(msg)

    def _record_take(
        self,
        stream: UUID,
        read: Submitted,
        taken: InputSubmitted,
        thread_version: int,
        lease: Lease,
    ) -> None:
        version = read.version
        while True:
            event = _event(
                InputTaken,
                stream,
                version + 1,
                thread_id=read.thread_id,
                submitted_version=taken.originator_version,
                thread_version=thread_version,
            )
            try:
                self._app.put_and_tell([event], **lease.fences())
                return
            except IntegrityError:
                since = list(self._app.events.get(stream, gt=version))
            if not since or any(isinstance(e, InputTaken) for e in since):
                msg = (
                    f"input to thread {read.thread_id!r} was taken by another runner since "
                    f"this one read its submissions (at version {read.version}), so its run "
                    "lease no longer stands; nothing was recorded or run"
                )
                raise LeaseLostError(msg, token=lease.fence_token)
            version = since[-1].originator_version

    def run_started(self, taken: InputTaken) -> bool:
        """Whether the run of a taken submission started: a ``RunStarted`` of a run with
        input was stored after the thread version its taker found."""
        stream = thread_aggregate_id(taken.thread_id)
        return any(
            isinstance(event, AgentThread.RunStarted) and event.mode is RunMode.RUN
            for event in self._app.events.get(stream, gt=taken.thread_version)
        )

    def _append(self, stream: UUID, event_class: type, **fields: object) -> int:
        while True:
            last = self._app.recorder.select_events(stream, desc=True, limit=1)
            version = last[0].originator_version + 1 if last else 1
            event = _event(event_class, stream, version, **fields)
            with contextlib.suppress(IntegrityError):  # another writer went first: follow it
                self._app.put_and_tell([event])
                return version


def _event(event_class: type, stream: UUID, version: int, **fields: object) -> Any:
    return event_class(
        originator_id=stream,
        originator_version=version,
        timestamp=event_class.create_timestamp(),  # type: ignore[attr-defined]
        **fields,
    )
