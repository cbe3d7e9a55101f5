"""What the Anthropic adapter reads of the Messages API's answers, as msgspec Structs
(see :func:`~covonaut_es.providers._wire.read_answer`), and the tool_use inputs of a
whole answer as the model wrote them.

Only the fields the adapter uses are described; others are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import msgspec


class Usage(msgspec.Struct):
    """A message's token counts."""

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class Block(msgspec.Struct):
    """A content block; other types than ``text`` and ``tool_use`` are passed over."""

    type: str
    text: str = ""
    id: str = ""
    name: str = ""


class Message(msgspec.Struct):
    """What the adapter reads of a message (its tool_use inputs are read as written)."""

    content: list[Block]
    usage: Usage
    stop_reason: str | None = None
    model: str | None = None


class Kind(msgspec.Struct):
    """An event's type, read first to choose its shape."""

    type: str


class MessageStart(msgspec.Struct):
    """The ``message_start`` event: the message so far, with its usage."""

    message: Message


class BlockStart(msgspec.Struct):
    """The ``content_block_start`` event."""

    index: int
    content_block: Block


class Delta(msgspec.Struct):
    """A piece of a block: text, or a fragment of a tool_use input's JSON."""

    type: str
    text: str = ""
    partial_json: str = ""


class BlockDelta(msgspec.Struct):
    """The ``content_block_delta`` event."""

    index: int
    delta: Delta


class BlockStop(msgspec.Struct):
    """The ``content_block_stop`` event."""

    index: int


class StopReason(msgspec.Struct):
    """The part of ``message_delta`` that says why the model stopped."""

    stop_reason: str | None = None


class OutputUsage(msgspec.Struct):
    """The output tokens so far, as ``message_delta`` counts them."""

    output_tokens: int


class MessageDelta(msgspec.Struct):
    """The ``message_delta`` event."""

    delta: StopReason
    usage: OutputUsage


class MessageStop(msgspec.Struct):
    """The ``message_stop`` event: the stream's end."""


Event = MessageStart | BlockStart | BlockDelta | BlockStop | MessageDelta | MessageStop
EVENTS: Mapping[str, type[Event]] = {
    "message_start": MessageStart,
    "content_block_start": BlockStart,
    "content_block_delta": BlockDelta,
    "content_block_stop": BlockStop,
    "message_delta": MessageDelta,
    "message_stop": MessageStop,
}
"""The stream events the adapter reads, by type; others (``ping``, events added since)
are passed over."""


class _Written(str):
    """A JSON number or constant (``NaN``) as written."""

    __slots__ = ()


def inputs_as_written(body: bytes) -> list[str]:
    """The input of each tool_use block of a Messages API answer, as JSON text that
    keeps what the model wrote: a key given twice, a number as spelt (``1e999``,
    ``NaN``); whitespace aside."""

    def written(value: object) -> str:
        if isinstance(value, _Written):
            return str(value)
        if isinstance(value, tuple):  # an object's pairs, in order
            return "{" + ",".join(f"{written(k)}:{written(v)}" for k, v in value) + "}"
        if isinstance(value, list):
            return "[" + ",".join(map(written, value)) + "]"
        return json.dumps(value, ensure_ascii=False)

    parsed = json.loads(
        body,
        object_pairs_hook=tuple,
        parse_float=_Written,
        parse_int=_Written,
        parse_constant=_Written,
    )
    content = dict(parsed).get("content") if isinstance(parsed, tuple) else None
    blocks = [dict(block) for block in content or () if isinstance(block, tuple)]
    return [written(block.get("input", ())) for block in blocks if block.get("type") == "tool_use"]
