"""The AG-UI endpoint: :func:`create_agui_app` runs a stored thread for a chat front end.

One route takes the front end's ``RunAgentInput`` (POST, JSON read strictly) and answers
with the run's AG-UI events over server-sent events, encoded by the ``ag-ui-protocol``
package's own encoder. What the request asks for is decided from the store, never from
the history the front end sends: a new user message runs the thread on it; resume
entries record the reviewer's decisions, then resume; a request with neither picks the
thread up where the store has it (a run cut by a reload goes on; a pause is announced
again).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence

import ag_ui.core as agui
import pydantic
from ag_ui.encoder import EventEncoder
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from covonaut_es import _logs
from covonaut_es._bearer import bearer_token
from covonaut_es._request_bodies import RequestBodyRefusedError, bounded_body
from covonaut_es._text import exception_line
from covonaut_es.agui._events import (
    RunEvents,
    interrupts,
    message_id,
    messages_snapshot,
    open_interrupt_ids,
    results_of,
    state_snapshot,
)
from covonaut_es.agui._resume import checked, record
from covonaut_es.domain import Pause, ThreadStatus, check_thread_id_or_stored, message_id_problem
from covonaut_es.errors import (
    CovonautError,
    IdentityProviderUnavailableError,
    InvalidDecisionError,
    InvalidRunInputError,
    InvalidThreadIdError,
    MaxTurnsExceededError,
    ReviewerNotPermittedError,
    ReviewerNotVerifiedError,
    ReviewNotFoundError,
    ThreadBusyError,
    ThreadConflictError,
    ThreadNotFoundError,
    ThreadStateError,
    ToolCallsInDoubtError,
)
from covonaut_es.messages import Message, Role
from covonaut_es.runtime import Agent, AgentConfig, StreamItem
from covonaut_es.runtime._config import bound_config
from covonaut_es.service import (
    Reviewer,
    ReviewerVerifier,
    ThreadService,
    parse_json,
    shown_message,
)
from covonaut_es.store import Store

logger = _logs.logger("covonaut_es.agui")

REQUEST_ERRORS = (
    InvalidRunInputError,
    InvalidDecisionError,
    ReviewerNotPermittedError,
    ReviewNotFoundError,
    ThreadNotFoundError,
    ThreadStateError,
    ThreadBusyError,
    ThreadConflictError,
    MaxTurnsExceededError,
)
"""The errors a run request meets that its front end is told of, each saying what to
do; of any other the front end learns only its kind."""

MAX_BODY_BYTES = 1024 * 1024
"""The largest run request taken: the front end sends the conversation's history."""


class _Refused(Exception):
    """A request refused before any event: its HTTP status and what to say."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def create_agui_app(
    store: Store,
    make_config: Callable[[str], AgentConfig],
    verifier: ReviewerVerifier,
    *,
    path: str = "/",
) -> Starlette:
    """An ASGI application that runs threads of ``store`` for AG-UI front ends.

    Args:
        store: The thread store.
        make_config: Gives the agent configuration of a thread id (the workers' factory
            works here too); one without checkpoint settings is bound to ``store``. Its
            clock times the decisions, and judges the reviews' deadlines, as
            ``Agent.approve`` does.
        verifier: Verifies the reviewer's credential a resume carries, as
            ``Authorization: Bearer <token>``; every decision is recorded under the
            reviewer it verifies as.
        path: Where the endpoint takes its POSTs.

    The endpoint runs whatever thread id it is sent: mount it behind the application's
    own authentication of chat users. A run paused on reviews ends with AG-UI interrupt
    outcomes whose ids are the review ids; only a verified reviewer's resume, each
    decision bound to its operation's digest, decides them.
    """
    service = ThreadService(store, verifier=verifier)

    async def run(request: Request) -> Response:
        try:
            run_input = await _run_input(request)
            _check_last_message_id(run_input)
            # Before the application's factory sees it, and before the stream starts: a
            # thread stored under an id earlier versions accepted runs on.
            await asyncio.to_thread(
                check_thread_id_or_stored, run_input.thread_id, stored=store.exists
            )
            reviewer = await _reviewer(service, request) if run_input.resume else None
            config = bound_config(
                make_config, store, run_input.thread_id, server="the AG-UI endpoint"
            )
        except _Refused as exc:
            return _refusal(exc.status, str(exc))
        except InvalidThreadIdError as exc:
            return _refusal(422, str(exc))
        except CovonautError as exc:
            return _refusal(400 if _requests(exc) else 500, _told(exc, store))
        except Exception as exc:  # the application's factory failed
            return _refusal(500, _told(exc, store))
        encoder = EventEncoder(accept=request.headers.get("accept", "text/event-stream"))
        # Decided by the agent's clock, as Agent.approve decides and the run set the
        # review's deadline, not by the store's.
        deciding = ThreadService(store, verifier=verifier, clock=config.clock)
        events = _run(Agent(config), deciding, store, run_input, reviewer)
        return StreamingResponse(_encoded(encoder, events), media_type=encoder.get_content_type())

    return Starlette(routes=[Route(path, run, methods=["POST"])])


def _requests(exc: Exception) -> bool:
    """Whether ``exc`` is about the request, so the front end is told what it says."""
    return isinstance(exc, REQUEST_ERRORS)


def _told(exc: Exception, store: Store) -> str:
    """What the front end is told of ``exc``: its message if it is about the request
    (without the store's location), else only its kind; the server's log has the rest
    (a provider's error may quote a key, a store's names its host)."""
    if isinstance(exc, CovonautError) and _requests(exc):
        return shown_message(exc, store)
    logger.error("the AG-UI endpoint's run failed: %s", exception_line(exc), exc_info=exc)
    return f"the run failed on the server ({type(exc).__name__}); the server's log has the details"


def _refusal(status: int, message: str) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": message}, status, headers=headers)


async def _run_input(request: Request) -> agui.RunAgentInput:
    """The request's ``RunAgentInput``: at most :data:`MAX_BODY_BYTES`, JSON read by the
    service layer's strict reader, then checked against the protocol's own model.

    Only ``application/json`` is taken: a page on another origin cannot send it without
    the browser's CORS preflight, so a chat user's cookies in front of the endpoint never
    carry a run another site asked for (as a form or a no-cors ``fetch``, typed
    ``text/plain``, would)."""
    media_type = request.headers.get("content-type", "").partition(";")[0].strip()
    if media_type.lower() != "application/json":
        msg = f"a run request is sent as application/json, not {media_type or 'untyped'!r}"
        raise _Refused(415, msg)
    try:
        body = await bounded_body(request, MAX_BODY_BYTES, name="run request")
    except RequestBodyRefusedError as exc:
        raise _Refused(exc.status, str(exc)) from exc
    try:
        value = parse_json(body, "the run request")
        return agui.RunAgentInput.model_validate(value)
    except CovonautError as exc:
        raise _Refused(422, str(exc)) from exc
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, error['loc'])) or 'body'}: {error['msg']}"
            for error in exc.errors()[:5]
        )
        msg = f"the run request is no AG-UI RunAgentInput: {problems}"
        raise _Refused(422, msg) from exc


async def _reviewer(service: ThreadService, request: Request) -> Reviewer:
    """The reviewer the request's bearer token verifies as, verified once."""
    token = bearer_token(request.headers.get("authorization", ""))
    if token is None:
        msg = "a resume decides reviews: send Authorization: Bearer <reviewer token>"
        raise _Refused(401, msg)
    try:
        return await asyncio.to_thread(service.reviewer, token)
    except IdentityProviderUnavailableError as exc:  # before its base: not the token's fault
        raise _Refused(503, _told(exc, service.store)) from exc
    except ReviewerNotVerifiedError as exc:
        raise _Refused(401, str(exc)) from exc


async def _encoded(
    encoder: EventEncoder, events: AsyncGenerator[agui.BaseEvent, None]
) -> AsyncGenerator[str, None]:
    async with contextlib.aclosing(events):
        async for event in events:
            try:
                encoded = encoder.encode(event)
            except (ValueError, RecursionError) as exc:  # pydantic's serialization error
                # A value the protocol's encoder cannot write (nested past its depth,
                # from an import or a writer of the database): the run is said to end
                # in an error, rather than the stream stopping without a word.
                message = (
                    f"the run's {type(event).__name__} could not be sent "
                    f"({type(exc).__name__}); read the thread from the store"
                )
                yield encoder.encode(agui.RunErrorEvent(message=message, code=type(exc).__name__))
                return
            yield encoded


async def _run(
    agent: Agent,
    service: ThreadService,
    store: Store,
    run_input: agui.RunAgentInput,
    reviewer: Reviewer | None,
) -> AsyncGenerator[agui.BaseEvent, None]:
    """The run's events: started, what happened, the thread as stored, then finished
    (with the interrupts it waits on) or the error that ended it."""
    thread_id, run_id = run_input.thread_id, run_input.run_id
    yield agui.RunStartedEvent(thread_id=thread_id, run_id=run_id, protocol_version="1.0")
    translated: RunEvents | None = None
    try:
        open_pauses = await asyncio.to_thread(open_interrupt_ids, agent)  # loads the thread
        stored = await asyncio.to_thread(store.exists, thread_id)
        yield state_snapshot(agent, stored=stored)  # what the run's state deltas apply to
        if run_input.resume:
            assert reviewer is not None
            new = _new_message(run_input, agent.messages)
            if new is not None and not any(m.id == new.id for m in agent.messages):
                # Run after the decisions, it would be a second run the client did not
                # ask for by itself; dropped, it would be lost without a word. (One
                # whose id the thread holds was sent before, its text changed since.)
                msg = (
                    "a resume records decisions and resumes the thread; it runs no new "
                    "message: send the new user message in a request of its own once the "
                    "resume has ended; nothing was recorded"
                )
                raise InvalidRunInputError(msg)
            decided = await _decided(agent, service, run_input.resume, open_pauses, reviewer)
            for event in decided:
                yield event
            # Under four eyes a first approval leaves its review pending: nothing to run.
            items: AsyncGenerator[StreamItem, None] | None = (
                None if agent.pending_reviews else agent.astream_resume()
            )
        else:
            items = _started(agent, run_input, open_pauses)
        translated = RunEvents(agent.messages)
        if items is not None:
            try:
                async with contextlib.aclosing(items):
                    async for item in items:
                        for event in translated.of(item):
                            yield event
            except ToolCallsInDoubtError:
                # A run cut short between calls and their results (its client left): as
                # a worker does, pause on each call for a person to settle it.
                await asyncio.to_thread(_paused_in_doubt, agent, service)
        waiting = interrupts(agent)
    except Exception as exc:  # told by its kind alone unless it is about the request
        for event in translated.closed() if translated else ():
            yield event
        yield agui.RunErrorEvent(message=_told(exc, store), code=type(exc).__name__)
        return
    yield messages_snapshot(agent)
    yield state_snapshot(agent, stored=await asyncio.to_thread(store.exists, thread_id))
    outcome: agui.RunFinishedInterruptOutcome | agui.RunFinishedSuccessOutcome
    if waiting:
        outcome = agui.RunFinishedInterruptOutcome(interrupts=waiting)
    else:
        outcome = agui.RunFinishedSuccessOutcome()
    yield agui.RunFinishedEvent(thread_id=thread_id, run_id=run_id, outcome=outcome)


def _paused_in_doubt(agent: Agent, service: ThreadService) -> None:
    """Pause the agent's thread on its calls in doubt and read it again."""
    service.pause_calls_in_doubt(agent.thread_id)
    agent.close()
    open_interrupt_ids(agent)


async def _decided(
    agent: Agent,
    service: ThreadService,
    entries: Sequence[agui.ResumeEntry],
    open_pauses: Mapping[str, Pause],
    reviewer: Reviewer,
) -> list[agui.BaseEvent]:
    """Check the resume whole, record its answers, and reload the agent's thread; the
    results the decisions recorded for the reviewed calls."""
    answers = checked(entries, open_pauses, agent.thread_id)
    await asyncio.to_thread(record, service, agent.thread_id, answers, reviewer)
    agent.close()  # the decisions are stored: read the thread again
    await asyncio.to_thread(open_interrupt_ids, agent)
    return results_of(agent, {answer.pause.interrupt.tool_call_id for answer in answers})


def _started(
    agent: Agent, run_input: agui.RunAgentInput, open_pauses: Mapping[str, Pause]
) -> AsyncGenerator[StreamItem, None] | None:
    """The stream a request without a resume starts, or None when nothing is to run."""
    new = _new_message(run_input, agent.messages)
    if new is not None:
        # Refused by the thread while it is paused, or once it holds the id (a retried
        # request that a run of this one's raced).
        return agent.astream(new.content, message_id=new.id)
    if agent.interrupts and not open_pauses:
        return agent.astream_resume()  # decided elsewhere meanwhile
    if agent.status is ThreadStatus.RUNNING:
        return agent.astream_continue()  # a run cut short (a reload) goes on
    if agent.status is ThreadStatus.ERROR and _resent(run_input, agent.messages):
        return agent.astream_continue()  # the request whose run failed, sent again
    return None


def _resent(run_input: agui.RunAgentInput, stored: Sequence[Message]) -> bool:
    """Whether the request's last message is the one the thread's failed run was given,
    sent again (a client retrying a request whose run failed): a user's message the
    thread holds, after which no client sent another (those the run added itself, such
    as a typed answer's correction, carry no id)."""
    position = _stored_at(run_input, stored)
    if position is None:
        return False
    return all(m.id is None for m in stored[position + 1 :] if m.role is Role.USER)


def _new_message(run_input: agui.RunAgentInput, stored: Sequence[Message]) -> Message | None:
    """The request's new user message, with the id its client gave it: its last
    message, when it is a user's that the thread does not hold yet."""
    last = _last_user_message(run_input)
    if last is None or _stored_at(run_input, stored) is not None:
        return None  # sent before: a retried request, or a reload's history
    text = _text(last)
    if text is None:
        msg = "the new user message holds parts that are not text; this endpoint takes text only"
        raise InvalidRunInputError(msg)
    return Message(Role.USER, text, id=last.id)


def _stored_at(run_input: agui.RunAgentInput, stored: Sequence[Message]) -> int | None:
    """The position of the thread's message that the request's last one is, sent
    again; None when it is a new one (or no user's).

    It is the message that keeps its id, which its client gave it, with its text; or,
    for a history read from a snapshot, the user's message at the position the snapshot
    names by its id (``msg-N``), holding its text, where the history has it (a client
    may leave the system's messages out of it), or sent alone. A client's own ids may
    have the endpoint's form: a message under one is new unless all of that holds.
    """
    sent = _last_user_message(run_input)
    if sent is None:
        return None
    text = _text(sent)
    for position, message in enumerate(stored):
        if message.id == sent.id and message.content == text:
            return position
    named = next((p for p in range(len(stored)) if message_id(p) == sent.id), None)
    if named is None or stored[named].role is not Role.USER or stored[named].content != text:
        return None
    at = len(run_input.messages) - 1
    system = sum(1 for message in stored[:named] if message.role is Role.SYSTEM)
    return named if at in (0, named, named - system) else None


def _last_user_message(run_input: agui.RunAgentInput) -> agui.UserMessage | None:
    last = run_input.messages[-1] if run_input.messages else None
    return last if isinstance(last, agui.UserMessage) else None


def _text(message: agui.UserMessage) -> str | None:
    """A user message's text; None when it holds parts that are not text."""
    if isinstance(message.content, str):
        return message.content
    if all(isinstance(part, agui.TextPart) for part in message.content):
        return "".join(part.text for part in message.content if isinstance(part, agui.TextPart))
    return None


def _check_last_message_id(run_input: agui.RunAgentInput) -> None:
    """Refuse, before anything runs, a last user message whose id no message may keep.

    Raises:
        InvalidRunInputError: Naming the rule, not the id.
    """
    last = _last_user_message(run_input)
    problem = None if last is None else message_id_problem(last.id)
    if problem is not None:
        raise InvalidRunInputError(f"the last user message's id is refused: {problem}")
