"""One step of a worker: run a ready thread to its next pause or end, under its lease.

What to do is decided from the thread as stored, read once the lease is held, so two
workers that both saw a thread ready never both run it, and a worker that saw it late
finds nothing to do.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import attrs

from covonaut_es.domain import AgentThread, Interrupt, ThreadStatus
from covonaut_es.domain._submissions import InputSubmitted, InputTaken
from covonaut_es.errors import ConfigurationError
from covonaut_es.runtime import Agent, AgentConfig, CheckpointSettings
from covonaut_es.store import Store


class Action(enum.Enum):
    """What a step did with a thread."""

    RESUMED = "resumed"
    """It was paused on reviews, all decided: resumed."""
    RAN_INPUT = "ran input"
    """It had submitted input: ran it as a user message."""
    TOOK_OVER = "took over"
    """Its runner died mid-run: continued from the history."""
    PAUSED_IN_DOUBT = "paused on calls in doubt"
    """Its runner died leaving calls in doubt that no runner may retry: paused with an
    interrupt per call, for a person to settle; once all are settled it is resumed."""
    NOTHING = "nothing"
    """Nothing to run (already run by another worker, or waiting for a person)."""


def bound_config(
    make_config: Callable[[str], AgentConfig], store: Store, thread_id: str
) -> AgentConfig:
    """The application's configuration for the thread; one without checkpoint settings
    is bound to the worker's store and that thread.

    Raises:
        ConfigurationError: The factory returned no AgentConfig, or one bound to
            another thread.
    """
    config = make_config(thread_id)
    if not isinstance(config, AgentConfig):
        msg = (
            f"the worker's config factory returned {type(config).__name__} for thread "
            f"{thread_id!r}, expected an AgentConfig"
        )
        raise ConfigurationError(msg)
    settings = config.checkpoint
    if settings is None:
        return attrs.evolve(config, checkpoint=CheckpointSettings(store=store, thread_id=thread_id))
    if settings.thread_id != thread_id:
        msg = (
            f"the worker's config factory bound thread {thread_id!r} to thread "
            f"{settings.thread_id!r}; leave checkpoint unset, or set thread_id={thread_id!r}"
        )
        raise ConfigurationError(msg)
    return config


def step(store: Store, config: AgentConfig, thread_id: str) -> Action:
    """Run the thread if it is ready; the caller holds its lease."""
    thread = store.find(thread_id)
    submitted, taken = store._submissions(thread_id)
    agent = Agent(config)
    if thread is not None and thread.status is ThreadStatus.ABANDONED:
        return Action.NOTHING
    if taken is not None and not _started(store, thread, taken):
        redo = next(s for s in submitted if s.originator_version == taken.submitted_version)
        agent.run(redo.text)  # its taker died before the run started
        return Action.RAN_INPUT
    if thread is not None and thread.status is ThreadStatus.RUNNING:
        agent.continue_run()
        return Action.TOOK_OVER
    if thread is not None and thread.status is ThreadStatus.INTERRUPTED:
        if not _resumable(thread):
            return Action.NOTHING
        agent.resume()
        return Action.RESUMED
    waiting = _next_submission(submitted, taken)
    if waiting is None:
        return Action.NOTHING
    store._take(thread_id, waiting.originator_version, thread.version if thread else 0)
    agent.run(waiting.text)
    return Action.RAN_INPUT


def pause_in_doubt(store: Store, config: AgentConfig, thread_id: str) -> None:
    """Pause a thread on its calls in doubt, one interrupt per call not yet reported,
    so that the reviewer queue (and inbox) show them to a person, who checks the
    external system and settles each call; a worker then resumes the thread."""
    thread = store.load(thread_id)
    reported = {interrupt.tool_call_id for interrupt in thread.interrupts}
    new = [pending for pending in thread.in_doubt if pending.call.id not in reported]
    for pending in new:
        call = pending.call
        reason = (
            f"call {call.id!r} of tool {call.name!r} is in doubt: its runner stopped after "
            "recording it and before its result; check the external system, settle it, "
            "then resume"
        )
        data = {
            "in_doubt": True,
            "tool_call_id": call.id,
            "idempotency_key": pending.idempotency_key,
            "arguments": call.arguments,
        }
        thread.interrupt(Interrupt(reason, data, call.id, call.name), now=config.clock())
    store.save(thread)


def _resumable(thread: AgentThread) -> bool:
    """Paused only on reviews, all of them decided, and on calls in doubt, all of them
    settled."""
    reviewed = {review.request.tool_call_id for review in thread.reviews.reviews}
    return not thread.reviews.pending and all(
        interrupt.tool_call_id in reviewed or _settled(thread, interrupt)
        for interrupt in thread.interrupts
    )


def _settled(thread: AgentThread, interrupt: Interrupt) -> bool:
    """Whether the interrupt reported a call in doubt that has been settled since."""
    data = interrupt.data
    in_doubt = isinstance(data, dict) and data.get("in_doubt") is True
    return in_doubt and interrupt.tool_call_id not in thread.open_calls


def _next_submission(
    submitted: list[InputSubmitted], taken: InputTaken | None
) -> InputSubmitted | None:
    done = taken.submitted_version if taken else 0
    return next((s for s in submitted if s.originator_version > done), None)


def _started(store: Store, thread: AgentThread | None, taken: InputTaken) -> bool:
    """Whether the run of a taken submission started: a ``RunStarted`` of a run with
    input was stored after the version the taker found."""
    if thread is None or thread.version <= taken.thread_version:
        return False
    return store._taken_run_started(taken)
