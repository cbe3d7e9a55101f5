"""One step of a worker: run a ready thread to its next pause or end, under its lease.

What to do is decided from the thread as stored, read once the lease is held, so two
workers that both saw a thread ready never both run it, and a worker that saw it late
finds nothing to do.
"""

from __future__ import annotations

import enum

from covonaut_es.domain import AgentThread, ThreadStatus
from covonaut_es.domain._submissions import InputTaken
from covonaut_es.runtime import Agent, AgentConfig
from covonaut_es.service import ThreadService
from covonaut_es.store import Store


class Action(enum.Enum):
    """What a step did with a thread."""

    RESUMED = "resumed"
    """It was paused on reviews, all decided: resumed."""
    RAN_INPUT = "ran input"
    """It had submitted input: ran it as a user message."""
    TOOK_OVER = "took over"
    """Its runner died mid-run: continued from the history."""
    RETRIED = "retried"
    """Its run had failed and a person asked for it to be tried again: continued."""
    PAUSED_IN_DOUBT = "paused on calls in doubt"
    """Its runner died leaving calls in doubt that no runner may retry: paused with an
    interrupt per call, for a person to settle; once all are settled it is resumed."""
    ABANDONED = "given up while it ran"
    """A person gave the thread up during the run: the results of the calls that ran
    are recorded, and nothing more runs."""
    NOTHING = "nothing"
    """Nothing to run (already run by another worker, or waiting for a person)."""
    FAILED = "failed"
    """The step raised: the worker logged the error (the run itself records a failure
    in the thread where it can)."""


def step(store: Store, config: AgentConfig, thread_id: str) -> Action:
    """Run the thread if it is ready; the caller holds its lease."""
    thread = store.find(thread_id)
    submitted = store.submissions.submitted(thread_id)
    agent = Agent(config)
    if thread is not None and thread.status is ThreadStatus.ABANDONED:
        return Action.NOTHING
    taken = submitted.taken
    if taken is not None and not _started(store, thread, taken):
        agent.run(submitted.taken_input().text)  # its taker died before the run started
        return Action.RAN_INPUT
    if thread is not None and thread.status is ThreadStatus.RUNNING and not thread.interrupts:
        agent.continue_run()
        return Action.TOOK_OVER
    # Running over interrupts: a resume that stopped before it took them off (a fork at
    # its start), which only a resume goes on from.
    if thread is not None and thread.status in (ThreadStatus.INTERRUPTED, ThreadStatus.RUNNING):
        if not thread.pauses or not all(pause.resolved for pause in thread.pauses):
            return Action.NOTHING  # a person has yet to deal with a pause
        agent.resume()
        return Action.RESUMED
    if thread is not None and thread.status is ThreadStatus.ERROR and thread.retry_requested:
        agent.continue_run()
        return Action.RETRIED
    service = ThreadService(store, clock=config.clock)
    taken_now = service.take_input(
        thread_id, submitted, thread_version=thread.version if thread else 0
    )
    if taken_now is None:
        return Action.NOTHING
    agent.run(taken_now.text)
    return Action.RAN_INPUT


def pause_in_doubt(store: Store, config: AgentConfig, thread_id: str) -> None:
    """Pause a thread on its calls in doubt, one pause per call, so that the reviewer
    queue (and inbox) show them to a person, who checks the external system and settles
    each call; a worker then resumes the thread."""
    ThreadService(store, clock=config.clock).pause_calls_in_doubt(thread_id)


def _started(store: Store, thread: AgentThread | None, taken: InputTaken) -> bool:
    """Whether the run of a taken submission started: a ``RunStarted`` of a run with
    input was stored after the version the taker found."""
    if thread is None or thread.version <= taken.thread_version:
        return False
    return store.submissions.run_started(taken)
