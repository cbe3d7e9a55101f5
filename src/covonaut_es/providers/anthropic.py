"""The Anthropic Messages API adapter; needs the extra ``covonaut-es[anthropic]``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from covonaut_es.providers._adapter import missing_sdk

try:
    import anthropic
except ModuleNotFoundError as exc:
    raise missing_sdk(exc, "anthropic", "anthropic") from exc
import msgspec

from covonaut_es._strict_json import FOR_THE_MODEL, strict_loads
from covonaut_es.errors import ProviderError
from covonaut_es.messages import (
    Message,
    OutputSpec,
    ProviderRequest,
    ProviderResponse,
    Role,
    StreamDelta,
    ToolCall,
    ToolCallDelta,
    ToolSpec,
    Usage,
    token_count,
)
from covonaut_es.providers import _anthropic_answers as shapes
from covonaut_es.providers._adapter import (
    ClientSettings,
    HttpFailure,
    SdkAdapter,
    SdkErrors,
    Vendor,
)
from covonaut_es.providers._protocol import after_end, final_delta, joined
from covonaut_es.providers._retry import RetryPolicy
from covonaut_es.providers._secrets import Credentials
from covonaut_es.providers._wire import read_answer

if TYPE_CHECKING:
    from anthropic import APIResponse
    from anthropic.types import Message as AnthropicMessage
    from anthropic.types import (
        MessageParam,
        TextBlockParam,
        ToolChoiceParam,
        ToolParam,
        ToolResultBlockParam,
        ToolUseBlockParam,
    )
    from anthropic.types.message_create_params import MessageCreateParamsBase

    _Block = TextBlockParam | ToolUseBlockParam | ToolResultBlockParam

DEFAULT_MAX_TOKENS = 4096
"""The answer cap sent when neither the request nor the provider sets one; the
Messages API requires a cap on every request."""

FINISH_REASONS: Mapping[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
}
"""Anthropic's stop reasons in the common vocabulary; others (``pause_turn``,
``refusal``) pass through unchanged."""

ERROR_TYPE_STATUS: Mapping[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}
"""The HTTP status each documented error type stands for, used for an error event that
arrives inside a stream (whose HTTP status was 200)."""


def _http_failure(exc: anthropic.APIStatusError) -> HttpFailure:
    detail = _error_field(exc, "message") or exc.message
    if exc.status_code < 400:
        # An error event inside a stream that began with 200: no retry-after applies.
        status = ERROR_TYPE_STATUS.get(_error_field(exc, "type") or "", 500)
        return HttpFailure(status, detail, None)
    return HttpFailure(exc.status_code, detail, exc.response.headers)


def _error_field(exc: anthropic.APIError, field: str) -> str | None:
    """A field of the body's ``error`` object: ``{"type": "error", "error": {...}}``."""
    body = exc.body
    error = body.get("error") if isinstance(body, dict) else None
    value = error.get(field) if isinstance(error, dict) else None
    return value if isinstance(value, str) else None


_VENDOR = Vendor(
    "Anthropic",
    FINISH_REASONS,
    SdkErrors(anthropic.AnthropicError, anthropic.APIStatusError, anthropic.APIConnectionError),
    _http_failure,
    # ``credentials`` is a provider of tokens (a profile, workload identity federation).
    Credentials(
        anthropic.Anthropic,
        ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
        ("authorization", "x-api-key"),
        ("credentials",),
        omittable=True,
    ),
)
_Role = Literal["user", "assistant"]


class AnthropicProvider(SdkAdapter[anthropic.Anthropic]):
    """A model behind the Anthropic Messages API.

    System messages, wherever they stand, are joined in order into the request's
    system prompt; tool calls and tool results travel as ``tool_use`` and
    ``tool_result`` content blocks, and consecutive messages of one role (such as the
    results of one batch of calls) are merged into one message.

    A typed answer (``ProviderRequest.output``) is a tool whose input schema is the
    answer's, which the model is made to call (``tool_choice``); its input comes back
    as the answer's JSON text, not as a tool call.

    Rate limits, server errors (including 529 "overloaded") and connection errors are
    retried per ``retry`` (the SDK's own retries are switched off); every failure is
    raised as a typed :class:`~covonaut_es.errors.ProviderError`. Close the provider (or use
    it in a ``with`` block) to release the connections of the client it built.

    Args:
        api_key: The API key; defaults to ``$ANTHROPIC_API_KEY``, else the SDK's other
            credentials (``$ANTHROPIC_AUTH_TOKEN``, a profile).
        base_url: The API's URL, without ``/v1``; defaults to ``$ANTHROPIC_BASE_URL``,
            else Anthropic's.
        timeout: Seconds one attempt may take; None keeps the SDK's default.
        max_tokens: The answer cap for requests that set none (the API needs one).
        client: A ready ``anthropic.Anthropic`` client to use instead of ``api_key``,
            ``base_url`` and ``timeout``. It stays the caller's to close.
        retry: The retry policy; defaults to ``RetryPolicy()``.
        sleep: Waits between attempts; tests inject a no-op.

    Raises:
        ConfigurationError: ``client`` was combined with the other client settings, or
            the client (built or given) has no credential: no API key, token or
            credentials provider, and no ``Authorization`` or ``X-Api-Key`` header.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        client: anthropic.Anthropic | None = None,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.max_tokens = max_tokens
        settings = ClientSettings(api_key, base_url, timeout)
        super().__init__(_VENDOR, anthropic.Anthropic, settings, client, retry=retry, sleep=sleep)

    def complete(self, request: ProviderRequest) -> ProviderResponse:
        """Ask for the whole answer in one response."""
        params = self._params(request)
        extra_body = _extra_body(request)

        def create() -> APIResponse[AnthropicMessage]:
            # Raw, for each tool_use input as the model wrote it (the SDK's JSON reader
            # keeps the last of a key given twice and reads NaN).
            return self._client.messages.with_raw_response.create(**params, extra_body=extra_body)

        raw = self._call(create)
        with self._translated_errors():
            sent = raw.parse(to=object)  # the JSON as sent (see SdkAdapter)
            message = read_answer(_VENDOR.name, "message", sent, shapes.Message)
            inputs = iter(shapes.inputs_as_written(raw.http_response.content))
        text: list[str] = []
        calls: list[ToolCall] = []
        answer = _answer_name(request)
        for block in message.content:
            if block.type == "text":
                text.append(block.text)
            elif block.type == "tool_use" and block.name == answer:
                text.append(_arguments(next(inputs)))
            elif block.type == "tool_use":
                calls.append(ToolCall(block.id, block.name, _arguments(next(inputs))))
        return ProviderResponse(
            content="".join(text),
            tool_calls=tuple(calls),
            usage=Usage(_input_tokens(message.usage), _output_tokens(message.usage)),
            finish_reason=_VENDOR.finish_reason(message.stop_reason),
            model=message.model or "",
        )

    def stream(self, request: ProviderRequest) -> Iterator[StreamDelta]:
        """Stream the answer: text as it arrives; tool calls, usage and the finish
        reason in the last delta. Only opening the stream is retried."""
        params = self._params(request)
        extra_body = _extra_body(request)

        def create() -> anthropic.Stream[object]:
            # Each event's JSON as sent (see SdkAdapter).
            response = self._client.messages.with_raw_response.create(
                **params, stream=True, extra_body=extra_body
            )
            return response.parse(to=anthropic.Stream[object])

        # Open tool_use blocks by index: (id, name, pieces of the input's JSON text).
        open_calls: dict[int, tuple[str, str, list[str]]] = {}
        answer, answers = _answer_name(request), set[int]()  # the typed answer's blocks
        positions: dict[int, int] = {}  # a tool_use block's index -> the call's position
        started = set[int]()  # every block's index
        open_blocks = set[int]()  # the blocks started and not yet stopped
        stopped = False  # message_stop, the stream's end, was seen
        calls: list[ToolCall] = []
        input_tokens: int | None = None
        output_tokens = 0
        finish_reason: str | None = None
        model = ""
        with (
            self._call(create) as events,
            self._translated_errors(),
        ):
            for sent in events:
                kind = read_answer(_VENDOR.name, "stream event", sent, shapes.Kind)
                if kind.type == "ping":
                    continue
                after_end(_VENDOR.name, "message_stop", stopped, f"{kind.type[:40]!r} event")
                shape = shapes.EVENTS.get(kind.type)
                if shape is None:
                    continue  # events added since
                event = read_answer(_VENDOR.name, "stream event", sent, shape)
                if isinstance(event, shapes.MessageStart):
                    input_tokens = _input_tokens(event.message.usage)
                    output_tokens = _output_tokens(event.message.usage)
                    model = event.message.model or ""
                elif isinstance(event, shapes.BlockStart):
                    block = event.content_block
                    if event.index in started:
                        msg = f"the {_VENDOR.name} stream started content block {event.index} twice"
                        raise ProviderError(msg)
                    started.add(event.index)
                    open_blocks.add(event.index)
                    if block.type == "tool_use" and block.name == answer:
                        answers.add(event.index)
                    elif block.type == "tool_use":
                        positions[event.index] = len(positions)
                        open_calls[event.index] = (block.id, block.name, [])
                        opened = ToolCallDelta(
                            index=positions[event.index], id=block.id, name=block.name
                        )
                        yield StreamDelta(tool_call_deltas=(opened,))
                elif isinstance(event, shapes.BlockDelta):
                    _check_open(open_blocks, event.index, "a content_block_delta")
                    delta = event.delta
                    if delta.type == "text_delta" and delta.text:
                        yield StreamDelta(content=delta.text)
                    elif delta.type == "input_json_delta" and event.index in answers:
                        if delta.partial_json:
                            yield StreamDelta(content=delta.partial_json)
                    elif delta.type == "input_json_delta" and event.index in open_calls:
                        open_calls[event.index][2].append(delta.partial_json)
                        if delta.partial_json:
                            piece = ToolCallDelta(
                                index=positions[event.index], arguments=delta.partial_json
                            )
                            yield StreamDelta(tool_call_deltas=(piece,))
                elif isinstance(event, shapes.BlockStop):
                    _check_open(open_blocks, event.index, "a content_block_stop")
                    open_blocks.remove(event.index)
                    if event.index in open_calls:
                        call_id, name, pieces = open_calls.pop(event.index)
                        calls.append(ToolCall(call_id, name, _arguments(joined(pieces))))
                elif isinstance(event, shapes.MessageDelta):
                    # The usage in message_delta is cumulative.
                    output_tokens = _output_tokens(event.usage)
                    finish_reason = _VENDOR.finish_reason(event.delta.stop_reason) or finish_reason
                else:
                    stopped = True  # message_stop
        if stopped and open_calls:
            msg = (
                f"the {_VENDOR.name} stream ended with tool_use block(s) "
                f"{sorted(open_calls)} never closed: their calls may be incomplete"
            )
            raise ProviderError(msg)
        usage = None if input_tokens is None else Usage(input_tokens, output_tokens)
        yield final_delta(
            _VENDOR.name,
            "message_stop",
            stopped,
            tool_calls=tuple(calls),
            usage=usage,
            finish_reason=finish_reason,
            model=model,
        )

    def _params(self, request: ProviderRequest) -> MessageCreateParamsBase:
        system, messages = _conversation(request.messages)
        params: MessageCreateParamsBase = {
            "model": request.model,
            "max_tokens": self.max_tokens if request.max_tokens is None else request.max_tokens,
            "messages": messages,
        }
        if system:
            params["system"] = system
        tools = [_tool(spec) for spec in request.tools]
        if request.output is not None:
            tools.append(_answer_tool(request.output))
        if tools:
            params["tools"] = tools
        choice = _tool_choice(request)
        if choice is not None:
            params["tool_choice"] = choice
        return params


def _conversation(messages: Sequence[Message]) -> tuple[str, list[MessageParam]]:
    """The system prompt and the alternating user/assistant turns of ``messages``."""
    system: list[str] = []
    turns: list[tuple[_Role, list[_Block]]] = []
    for message in messages:
        if message.role is Role.SYSTEM:
            if message.content:
                system.append(message.content)
            continue
        role, blocks = _turn(message)
        if not blocks:
            continue  # the API rejects empty content
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    params: list[MessageParam] = []
    for role, blocks in turns:
        if role == "user":
            params.append({"role": "user", "content": blocks})
        else:
            params.append({"role": "assistant", "content": blocks})
    return "\n\n".join(system), params


def _turn(message: Message) -> tuple[_Role, list[_Block]]:
    blocks: list[_Block] = []
    if message.role is Role.TOOL:
        result: ToolResultBlockParam = {
            "type": "tool_result",
            "tool_use_id": _VENDOR.tool_call_id(message, "tool_use"),
            "content": message.content,
        }
        return "user", [result]
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    if message.role is Role.USER:
        return "user", blocks
    for call in message.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": _input(call)})
    return "assistant", blocks


def _check_open(open_blocks: set[int], index: int, what: str) -> None:
    """Refuse ``what`` (a piece or the end of content block ``index``) unless the block
    is open: a piece of a block never started belongs to no part of the answer.

    Raises:
        ProviderError: Block ``index`` was never started, or was already stopped.
    """
    if index not in open_blocks:
        msg = (
            f"the {_VENDOR.name} stream sent {what} for content block {index}, which was "
            "never started or was already stopped"
        )
        raise ProviderError(msg)


def _input(call: ToolCall) -> dict[str, object]:
    """A call's arguments as the JSON object the API wants; arguments that are not one
    (a model's malformed JSON, recorded as produced) become an empty object."""
    try:
        value = msgspec.json.decode(call.arguments or "{}")
    except msgspec.DecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _tool(spec: ToolSpec) -> ToolParam:
    schema = dict(spec.parameters)
    schema.setdefault("type", "object")  # the API requires an object schema
    return {"name": spec.name, "description": spec.description, "input_schema": schema}


def _answer_tool(output: OutputSpec) -> ToolParam:
    return {
        "name": output.name,
        "description": "Give your final answer with this tool: its input is the answer.",
        "input_schema": output.schema,
    }


def _answer_name(request: ProviderRequest) -> str | None:
    """The name of the tool whose input is the typed answer, if the answer is typed."""
    return None if request.output is None else request.output.name


def _tool_choice(request: ProviderRequest) -> ToolChoiceParam | None:
    """A typed answer is a tool the model must call: that tool when it may call no
    other (the last turn, or no tools), else any tool; an untyped answer's last turn
    may call none."""
    if request.output is not None:
        if request.tool_choice == "none" or not request.tools:
            return {"type": "tool", "name": request.output.name}
        return {"type": "any"}
    if request.tools and request.tool_choice == "none":
        return {"type": "none"}
    return None


def _extra_body(request: ProviderRequest) -> dict[str, object] | None:
    # Newer SDKs dropped the typed ``temperature`` parameter; the field still travels.
    if request.temperature is None:
        return None
    return {"temperature": request.temperature}


def _arguments(text: str) -> str:
    """A tool_use input's JSON text, re-encoded compactly so that a streamed call equals
    the same call answered in one piece; kept as written where it does not parse or the
    strict reader refuses it (a key given twice, a number that is not finite), so that
    reading the call's arguments refuses what the model wrote, not one reading of it."""
    text = text or "{}"
    try:
        strict_loads(text, FOR_THE_MODEL)
        return msgspec.json.encode(msgspec.json.decode(text)).decode()
    except (ValueError, RecursionError):  # msgspec.DecodeError and JsonRefused included
        return text


def _input_tokens(usage: shapes.Usage) -> int:
    # Anthropic counts cached prompt tokens apart from input_tokens (OpenAI's prompt
    # tokens include them), each count checked before it is added, and their sum after.
    counts = {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens or 0,
        "cache_read_input_tokens": usage.cache_read_input_tokens or 0,
    }
    total = sum(token_count(count, f"usage.{field}") for field, count in counts.items())
    return token_count(total, "usage.input_tokens with its cache counts")


def _output_tokens(usage: shapes.Usage | shapes.OutputUsage) -> int:
    return token_count(usage.output_tokens, "usage.output_tokens")
