"""The runtime facade: an agent bound to one thread, driving the run loop.

:class:`Agent` runs the model here; its other commands come from its bases, the review
decisions (:mod:`covonaut_es.runtime._reviews`) and the checkpoints and named states
(:mod:`covonaut_es.runtime._states`), all built on :mod:`covonaut_es.runtime._agent_base`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncGenerator
from typing import Any

from covonaut_es._arguments import check_instance, check_text
from covonaut_es.domain import (
    Interrupt,
    Pause,
    PendingToolCall,
    ReviewRequest,
    RunMode,
    ThreadState,
    ThreadStatus,
    run_input,
    steering_message,
)
from covonaut_es.errors import ThreadStateError
from covonaut_es.messages import Message, Role, Usage
from covonaut_es.runtime._agent_base import DEFAULT_THREAD_ID as DEFAULT_THREAD_ID
from covonaut_es.runtime._agent_base import MakeProgram
from covonaut_es.runtime._config import AgentConfig
from covonaut_es.runtime._loop import (
    RunSettings,
    retry_program,
    run_program,
    settle_program,
)
from covonaut_es.runtime._output import output_of
from covonaut_es.runtime._results import RunResult, failed, finished
from covonaut_es.runtime._reviews import ReviewCommands
from covonaut_es.runtime._states import StateCommands
from covonaut_es.runtime._streaming import StreamItem
from covonaut_es.service import Settlement
from covonaut_es.tools import result_text

_NO_RESULT: Any = object()


class Agent(ReviewCommands, StateCommands):
    """An LLM agent whose state is the event-sourced thread it is bound to.

    The thread id comes from ``config.checkpoint.thread_id``. If the store already has
    that thread, the agent continues it; otherwise the first run starts it.

    A run returns the final answer, or ``""`` when it paused; :attr:`result` then
    says how it ended: finished, paused (with what waits, for whom) or failed.

    ``arun``, ``acontinue_run``, ``aresume`` and ``asettle`` are the same commands for
    asyncio: they drive the same run loop, await ``async def`` providers and tools, run
    blocking ones and every store call in worker threads, and run a parallel batch of
    tool calls as concurrent tasks. One agent runs one command at a time, either way.
    """

    def __init__(self, config: AgentConfig) -> None:
        super().__init__(config)
        self._steering: deque[Message] = deque()
        self._result: RunResult | None = None

    # State ------------------------------------------------------------------------

    @property
    def thread_id(self) -> str:
        """The id of the thread this agent runs."""
        return self._thread_id

    @property
    def state(self) -> ThreadState:
        """A read-only copy of the thread's current state."""
        return self._current.state

    @property
    def status(self) -> ThreadStatus:
        """The thread's status."""
        return self._current.status

    @property
    def messages(self) -> tuple[Message, ...]:
        """Every message of the thread, oldest first."""
        return tuple(self._current.messages)

    @property
    def usage(self) -> Usage:
        """Token usage accumulated over the thread's runs."""
        return self._current.usage

    @property
    def result(self) -> RunResult | None:
        """How the last run command of this agent ended (``run``, ``resume``,
        ``continue_run``, their awaited and streamed forms): finished with its output,
        paused with what waits for whom, or failed. None before the first."""
        return self._result

    @property
    def interrupted(self) -> Interrupt | None:
        """The pending interrupt (the first, if a batch raised several), or None."""
        interrupts = self._current.interrupts
        return interrupts[0] if interrupts else None

    @property
    def interrupts(self) -> tuple[Interrupt, ...]:
        """Every pending interrupt."""
        return tuple(self._current.interrupts)

    @property
    def in_doubt(self) -> tuple[PendingToolCall, ...]:
        """Tool calls recorded as called whose result was never recorded."""
        return self._current.in_doubt

    @property
    def pending_reviews(self) -> tuple[ReviewRequest, ...]:
        """Review requests awaiting a decision; ``resume()`` needs every one decided.
        None once the thread is abandoned: nobody decides its reviews."""
        return tuple(review.request for review in self._current.reviews_awaiting)

    @property
    def pauses(self) -> tuple[Pause, ...]:
        """Every pending interrupt with its kind (a tool's pause, a review, a call in
        doubt) and whether a person has dealt with it."""
        return self._current.pauses

    @property
    def awaiting_person(self) -> tuple[Pause, ...]:
        """The pauses a person can still act on: those of :attr:`pauses` nobody has
        dealt with, and none once the thread is abandoned."""
        return self._current.awaiting_person

    @property
    def output(self) -> Any:
        """The typed final answer of the thread's last finished run: an instance of
        ``AgentConfig.output_type`` for a class, the validated JSON data for a JSON
        Schema; None when that run's answer was not typed (or no run finished).

        It is read from the thread (``state.output``) and converted into the type on
        every read, so an agent restored from the store gives the same value back.

        Raises:
            OutputValidationError: The recorded value does not fit the configured
                ``output_type`` (it changed since the run).
        """
        return output_of(self._current.output, self.config.output_shape)

    # Running ----------------------------------------------------------------------

    def run(self, input: str, *, message_id: str | None = None) -> str:
        """Append a user message and run until an answer or an interrupt.

        Args:
            input: The user's message.
            message_id: An id its sender gave the message (kept as ``Message.id``): a
                message whose id the thread holds is refused, so a request retried
                with it runs once.

        Raises:
            InvalidRunInputError: ``input`` is not a str, ``message_id`` is no text of
                1 to 256 printable characters, or the thread holds a message of that
                id; nothing was recorded.
        """
        return self._drive(RunMode.RUN, run_input(input, message_id))

    def continue_run(self) -> str:
        """Run on from the history without new input.

        Raises:
            ThreadNotFoundError: No store holds the thread; nothing was recorded and the
                model was not called.
            ThreadStateError: The thread holds no message but system prompts, nothing
                to go on from (start it with ``run(input)``); nothing was recorded.
        """
        return self._drive(RunMode.CONTINUE, None)

    def resume(self) -> str:
        """Clear the pending interrupt and run on from the recorded tool results; the
        interrupted call is never run again.

        Raises:
            NotInterruptedError: No interrupt is pending.
        """
        return self._drive(RunMode.RESUME, None)

    async def arun(self, input: str, *, message_id: str | None = None) -> str:
        """Like :meth:`run`, awaited.

        Raises:
            InvalidRunInputError: As :meth:`run`; nothing was recorded.
        """
        return await self._adrive(RunMode.RUN, run_input(input, message_id))

    async def acontinue_run(self) -> str:
        """Like :meth:`continue_run`, awaited.

        Raises:
            ThreadNotFoundError: No store holds the thread; nothing was recorded.
            ThreadStateError: The thread holds no message to go on from.
        """
        return await self._adrive(RunMode.CONTINUE, None)

    async def aresume(self) -> str:
        """Like :meth:`resume`, awaited.

        Raises:
            NotInterruptedError: No interrupt is pending.
        """
        return await self._adrive(RunMode.RESUME, None)

    def astream(
        self, input: str, *, message_id: str | None = None
    ) -> AsyncGenerator[StreamItem, None]:
        """Like :meth:`arun`, yielding the run as it happens: each piece of the model's
        answers (:class:`~covonaut_es.TextDelta`, :class:`~covonaut_es.ToolCallDelta`) as
        the provider streams it and, at each commit point, the events committed
        (:class:`~covonaut_es.runtime.CommittedEvent`). The run's error, if it fails, is
        raised once everything before it was yielded.

        Leaving the iteration early (``break`` inside ``contextlib.aclosing``, or
        cancelling the task) stops the run where it stands; what is stored resumes
        cleanly, as after any crash, with ``continue_run()`` or ``resume()``. A tool never
        starts before its call is committed, streamed or not, but for read-only tools
        (``Tool.read_only``), whose calls are committed with their results.

        Raises:
            InvalidRunInputError: ``input`` or ``message_id`` is not what :meth:`run`
                takes (when called), or the thread holds a message of that id (on the
                first item); nothing was recorded.
        """
        return self._astream(RunMode.RUN, run_input(input, message_id))

    def astream_continue(self) -> AsyncGenerator[StreamItem, None]:
        """Like :meth:`acontinue_run`, yielding the run as :meth:`astream` does.

        Raises:
            ThreadNotFoundError: No store holds the thread (on the first item).
            ThreadStateError: The thread holds no message to go on from (on the first
                item).
        """
        return self._astream(RunMode.CONTINUE, None)

    def astream_resume(self) -> AsyncGenerator[StreamItem, None]:
        """Like :meth:`aresume`, yielding the run as :meth:`astream` does.

        Raises:
            NotInterruptedError: No interrupt is pending (on the first item).
        """
        return self._astream(RunMode.RESUME, None)

    def steer(self, message: str | Message) -> None:
        """Queue a message for the model; it is recorded when the next model call is
        prepared. A string is a user message.

        Raises:
            InvalidRunInputError: ``message`` is not a str, nor a user's or a system's
                ``Message`` of valid text, without tool calls, a call it answers, usage
                or an id (:func:`~covonaut_es.domain.steering_message`); nothing was
                queued.
        """
        if isinstance(message, str):
            message = Message(Role.USER, message)
        self._steering.append(steering_message(message))

    def settle(
        self,
        tool_call_id: str,
        *,
        result: Any = _NO_RESULT,
        retry: bool = False,
        ran: bool = True,
    ) -> None:
        """Settle a tool call in doubt, after checking the external state: record the
        ``result`` it gave, record that it did not run (``ran=False``; a ``result``
        given then is what the model reads of it), or run it again (``retry=True``, with
        the same idempotency key).

        Settling is recorded as an event. Nothing ever re-runs a call in doubt unless
        settled with ``retry=True`` or its tool is declared ``idempotent``.

        Raises:
            ThreadStateError: The call is not open, or not exactly one of ``result``,
                ``ran=False`` and ``retry`` was given.
            ConfigurationError: ``tool_call_id`` is no str, or ``retry`` or ``ran`` no bool.
        """
        self._perform(self._settling(tool_call_id, result, retry, ran))

    async def asettle(
        self,
        tool_call_id: str,
        *,
        result: Any = _NO_RESULT,
        retry: bool = False,
        ran: bool = True,
    ) -> None:
        """Like :meth:`settle`, awaited."""
        await self._aperform(self._settling(tool_call_id, result, retry, ran))

    # Driving ----------------------------------------------------------------------

    def _drive(self, mode: RunMode, user_input: Message | None) -> str:
        try:
            answer = self._perform(self._running(mode, user_input), mode)
        except Exception as exc:
            self._result = failed(self._thread, exc)
            raise
        return self._ended(answer)

    async def _adrive(self, mode: RunMode, user_input: Message | None) -> str:
        try:
            answer = await self._aperform(self._running(mode, user_input), mode)
        except Exception as exc:
            self._result = failed(self._thread, exc)
            raise
        return self._ended(answer)

    def _ended(self, answer: str) -> str:
        typed = self.config.output_shape is not None
        self._result = finished(self._current, lambda: self.output if typed else answer)
        return answer

    async def _astream(
        self, mode: RunMode, user_input: Message | None
    ) -> AsyncGenerator[StreamItem, None]:
        items: asyncio.Queue[StreamItem | None] = asyncio.Queue()  # None: the run ended
        run = asyncio.create_task(
            self._aperform(self._running(mode, user_input), mode, items.put_nowait)
        )
        run.add_done_callback(self._streamed)
        run.add_done_callback(lambda _: items.put_nowait(None))
        try:
            while (item := await items.get()) is not None:
                yield item
            await run  # its error, if it failed
        finally:
            if not run.done():  # the consumer left early: stop the run where it stands
                run.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await run

    def _streamed(self, run: asyncio.Task[str]) -> None:
        if run.cancelled():
            return  # the consumer left early: the run stopped where it stood
        error = run.exception()
        if isinstance(error, Exception):
            self._result = failed(self._thread, error)
        elif error is None:
            self._ended(run.result())

    def _running(self, mode: RunMode, user_input: Message | None) -> MakeProgram:
        return lambda thread, trace_parent: run_program(
            thread,
            self.config,
            self._run_settings(),
            mode,
            user_input=user_input,
            steering=self._drain_steering,
            trace_parent=trace_parent,
        )

    def _settling(self, tool_call_id: str, result: Any, retry: bool, ran: bool) -> MakeProgram:
        check_text("tool_call_id", tool_call_id)
        check_instance("retry", retry, bool, "True or False")
        check_instance("ran", ran, bool, "True or False")
        given = result is not _NO_RESULT
        if (retry and (given or not ran)) or (not retry and ran and not given):
            msg = (
                "settle() takes exactly one of result=..., ran=False (with a result, what "
                "the model reads of it) or retry=True"
            )
            raise ThreadStateError(msg)
        if retry:
            return lambda thread, _: retry_program(thread, self.config, tool_call_id)
        content = result_text(result) if given else Settlement.not_run().content
        return lambda thread, _: settle_program(thread, self.config, tool_call_id, content, ran=ran)

    def _run_settings(self) -> RunSettings:
        settings = self.config.checkpoint
        if settings is None:
            return RunSettings(checkpointing=False)
        return RunSettings(
            checkpointing=True,
            retain=settings.store.max_checkpoints_per_thread,
            save_on_turn_start=settings.save_on_turn_start,
            skip_save_on_turn_end=settings.skip_save_on_turn_end,
        )

    def _drain_steering(self) -> tuple[Message, ...]:
        drained = []
        while self._steering:
            drained.append(self._steering.popleft())
        return tuple(drained)
