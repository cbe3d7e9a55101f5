"""Messages and the values a model provider exchanges with the runtime.

Every type here is a frozen ``msgspec.Struct``: they are stored inside events and
snapshots, so msgspec must be able to encode them and decode them back to the same
types. Change one with ``msgspec.structs.replace``.
"""

from __future__ import annotations

import enum
from typing import Any, Literal

import msgspec

from covonaut_es.errors import ProviderError

JsonValue = Any
"""A value that ``msgspec.json`` can encode: None, bool, int, float, str, list, dict."""

STORED_INTEGERS = range(-(2**63), 2**64)
"""The integers a stored JSON value may hold: what an import reads back (msgspec's
range for a typed integer)."""


class Role(enum.StrEnum):
    """Who wrote a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class ToolCall(msgspec.Struct, frozen=True, gc=False):
    """A tool call requested by the model.

    Attributes:
        id: The call id the model gave; unique within its response.
        name: The tool's name.
        arguments: The JSON text of the arguments, exactly as the model produced it.
    """

    id: str
    name: str
    arguments: str = "{}"


class Message(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One message of the conversation.

    Attributes:
        role: Who wrote it.
        content: Its text.
        tool_calls: Calls requested by an assistant message.
        tool_call_id: For a tool message, the call it answers.
        name: For a tool message, the tool's name; otherwise an optional author name.
        usage: For an assistant message, the tokens the provider reported for it.
        id: For a user's message, the id its sender gave it (``run(..., message_id=)``,
            an AG-UI client's message id): a thread holds each id once, so the same
            message sent again, as a retried request sends it, is refused, not run
            twice. Stored only when given.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    usage: Usage | None = None
    id: str | None = None


MAX_TOKEN_COUNT = 2**53 - 1
"""The largest token count one response may report: the largest whole number every JSON
reader holds exactly, so that a thread's total stays storable."""


def token_count(value: object, field: str) -> int:
    """``value``, a token count a provider reported as ``field``, once it is known to be
    a whole number from 0 to :data:`MAX_TOKEN_COUNT`.

    Raises:
        ProviderError: It is not: the response is refused, as a provider's failure.
    """
    if type(value) is int and 0 <= value <= MAX_TOKEN_COUNT:
        return value
    if type(value) is not int:
        shown = f"a value of type {type(value).__name__}"
    else:  # a number too long for str() to convert is named by its size
        shown = str(value) if value.bit_length() <= 64 else f"a {value.bit_length()}-bit number"
    msg = (
        f"the model provider reported {shown} as {field}; a token count is a whole number "
        f"from 0 to {MAX_TOKEN_COUNT}, so the response is refused"
    )
    raise ProviderError(msg)


class Usage(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """Token usage reported by a provider; usages add up. A provider's response holds
    counts from 0 to :data:`MAX_TOKEN_COUNT` (see :func:`token_count`)."""

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Input and output tokens together."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )


class ToolSpec(msgspec.Struct, frozen=True):
    """A tool as the model is told about it: name, description, JSON schema."""

    name: str
    description: str
    parameters: dict[str, JsonValue]


class OutputSpec(msgspec.Struct, frozen=True):
    """The shape a run's final answer must have, as the model is told about it.

    Attributes:
        name: A name for the shape (letters, digits, ``_`` and ``-``): the OpenAI
            response format's name, the Anthropic output tool's name.
        schema: JSON Schema of the answer, an object schema.
        strict: The schema fits OpenAI's strict structured outputs (every object closed,
            every property required), so the API is asked to enforce it.
    """

    name: str
    schema: dict[str, JsonValue]
    strict: bool = False


class ProviderRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What the runtime asks a model provider.

    Attributes:
        model: The model name from the agent's configuration.
        messages: The context the model sees (after compaction).
        tools: The tools the model knows about.
        tool_choice: ``"auto"``: the model may call tools; ``"none"``: it must answer in
            text (the last turn of a run). Tools stay declared either way, since some
            APIs refuse a history with tool calls but no tool definitions.
        max_tokens: An optional cap on the answer's length.
        temperature: Optional sampling temperature.
        output: When the run's answer is typed, its shape: the final answer is the JSON
            text of a value of that shape (an adapter uses its API's structured-output
            mode, or a tool the model must call, and gives the answer back as text).
    """

    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: Literal["auto", "none"] = "auto"
    max_tokens: int | None = None
    temperature: float | None = None
    output: OutputSpec | None = None


class ProviderResponse(msgspec.Struct, frozen=True, kw_only=True):
    """A provider's complete answer: text, tool calls, or both.

    Attributes:
        content: The answer's text.
        tool_calls: The tool calls the model asks for.
        usage: The tokens the call used, when the provider says.
        finish_reason: Why the model stopped, in the common vocabulary.
        model: The model that answered, as the vendor names it (often a dated version
            of the model asked for); empty when the provider does not say.
    """

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    finish_reason: str | None = None
    model: str = ""


class TextDelta(msgspec.Struct, frozen=True, tag="text_delta"):
    """A piece of the answer's text as the model streams it; the pieces of one answer,
    joined, are the text of the assistant message that is committed.

    Attributes:
        text: The piece, never empty.
    """

    text: str


class ToolCallDelta(msgspec.Struct, frozen=True, kw_only=True, tag="tool_call_delta"):
    """A piece of a tool call as the model streams it.

    The first piece of a call names it (``id`` and ``name``); every piece may carry a
    fragment of its JSON ``arguments``. Pieces of several calls may interleave: ``index``
    tells them apart. What is recorded is the assembled call of the committed assistant
    message, under the id the thread gives it (a repeated id is renamed), with the
    arguments in the vendor's canonical form.

    Attributes:
        index: The call's position among the response's tool calls, from 0.
        id: The call id the model gave, on the piece that opens the call.
        name: The tool's name, on the piece that opens the call.
        arguments: A fragment of the arguments' JSON text.
    """

    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""


Delta = TextDelta | ToolCallDelta
"""A piece of a model's answer as it streams in: text or a tool call's."""


class StreamDelta(msgspec.Struct, frozen=True, kw_only=True):
    """One piece of a streamed answer, as a provider yields it.

    Text arrives in ``content`` pieces, tool calls in ``tool_call_deltas`` pieces;
    ``tool_calls`` (the assembled calls, when the provider assembles them), ``usage``,
    ``finish_reason`` and ``model`` (the model that answered) arrive with the last delta.
    A provider marks that delta ``final`` once its vendor said the answer ended: its
    ``tool_calls`` are then the answer's calls, none if empty, whatever the pieces held.
    """

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    finish_reason: str | None = None
    tool_call_deltas: tuple[ToolCallDelta, ...] = ()
    model: str = ""
    final: bool = False

    def pieces(self) -> tuple[Delta, ...]:
        """What a consumer of the stream sees of this delta: its text, then its pieces
        of tool calls."""
        text: tuple[Delta, ...] = (TextDelta(self.content),) if self.content else ()
        return text + self.tool_call_deltas
