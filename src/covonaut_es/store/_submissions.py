"""Input handed to threads for workers to run: the store's side.

A :class:`~covonaut_es.Store` holds one :class:`Submissions` (``store._submissions``);
workers read and take input through it. Each thread's submissions are a stream of
their own (:mod:`covonaut_es.domain._submissions`), so submitting never conflicts with
a run in progress; a worker reads it to find input not yet taken.
"""

from __future__ import annotations

import contextlib
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import IntegrityError

from covonaut_es.domain import AgentThread, RunMode, thread_aggregate_id
from covonaut_es.domain._submissions import InputSubmitted, InputTaken, submission_stream_id
from covonaut_es.errors import InvalidSubmissionError


class Submissions:
    """Submit input to a thread; read and take what was submitted."""

    def __init__(self, app: Application[UUID]) -> None:
        self._app = app

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
        stream = submission_stream_id(thread_id)
        return self._append(stream, InputSubmitted, thread_id=thread_id, text=text)

    def submitted(self, thread_id: str) -> tuple[list[InputSubmitted], InputTaken | None]:
        """The thread's submissions, oldest first, and the last one taken."""
        submitted: list[InputSubmitted] = []
        taken: InputTaken | None = None
        for event in self._app.events.get(submission_stream_id(thread_id)):
            if isinstance(event, InputSubmitted):
                submitted.append(event)
            elif isinstance(event, InputTaken):
                taken = event
        return submitted, taken

    def take(self, thread_id: str, submitted_version: int, thread_version: int) -> None:
        """Record that a runner takes a submission, before it starts the run."""
        self._append(
            submission_stream_id(thread_id),
            InputTaken,
            thread_id=thread_id,
            submitted_version=submitted_version,
            thread_version=thread_version,
        )

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
            event = event_class(
                originator_id=stream,
                originator_version=version,
                timestamp=event_class.create_timestamp(),  # type: ignore[attr-defined]
                **fields,
            )
            with contextlib.suppress(IntegrityError):  # another writer went first: follow it
                self._app.events.put([event])
                return version
