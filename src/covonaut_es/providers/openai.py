"""The OpenAI Chat Completions adapter; needs the extra ``covonaut-es[openai]``.

It also serves any server that speaks the Chat Completions API (vLLM, Ollama, LM
Studio, llama.cpp, gateways): point ``base_url`` at it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Literal

from covonaut_es.providers._adapter import missing_sdk

try:
    import openai
except ModuleNotFoundError as exc:
    raise missing_sdk(exc, "openai", "openai") from exc
import msgspec

from covonaut_es.errors import ProviderError
from covonaut_es.messages import (
    Message,
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
from covonaut_es.providers._adapter import (
    ClientSettings,
    HttpFailure,
    SdkAdapter,
    SdkErrors,
    Vendor,
)
from covonaut_es.providers._protocol import after_end, assembled_calls, final_delta
from covonaut_es.providers._retry import RetryPolicy
from covonaut_es.providers._secrets import Credentials
from covonaut_es.providers._wire import read_answer

if TYPE_CHECKING:
    from openai.types.chat import (
        ChatCompletionAssistantMessageParam,
        ChatCompletionFunctionToolParam,
        ChatCompletionMessageParam,
        ChatCompletionSystemMessageParam,
        ChatCompletionUserMessageParam,
    )
    from openai.types.chat.completion_create_params import (
        CompletionCreateParamsBase,
        CompletionCreateParamsStreaming,
    )

MaxTokensParameter = Literal["max_completion_tokens", "max_tokens"]

FINISH_REASONS: Mapping[str, str] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
}
"""OpenAI's finish reasons in the common vocabulary; others (``content_filter``) pass
through unchanged."""


def _http_failure(exc: openai.APIStatusError) -> HttpFailure:
    return HttpFailure(exc.status_code, _detail(exc), exc.response.headers)


def _detail(exc: openai.APIError) -> str:
    """The API's own explanation: the SDK keeps the ``error`` object as the body."""
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return exc.message


_VENDOR = Vendor(
    "OpenAI",
    FINISH_REASONS,
    SdkErrors(openai.OpenAIError, openai.APIStatusError, openai.APIConnectionError),
    _http_failure,
    # The SDK keeps a key given as a callable, and a provider's set-up (Bedrock, Vertex),
    # in attributes of its own (private names, the only ones of the SDK this library
    # reads; checked against openai 3.63.0); it refuses every request of a client that
    # omits its Authorization header.
    Credentials(
        openai.OpenAI,
        ("OPENAI_API_KEY",),
        ("authorization",),
        ("workload_identity", "_api_key_provider", "_provider_runtime"),
    ),
)


class OpenAIProvider(SdkAdapter[openai.OpenAI]):
    """A model behind the OpenAI Chat Completions API or a server compatible with it.

    A request for a typed answer (``ProviderRequest.output``) asks for structured
    outputs: a ``json_schema`` response format, strict when the schema fits strict mode.

    Rate limits, server errors and connection errors are retried per ``retry`` (the
    SDK's own retries are switched off); every failure is raised as a typed
    :class:`~covonaut_es.errors.ProviderError`. Close the provider (or use it in a ``with``
    block) to release the connections of the client it built.

    Args:
        api_key: The API key; defaults to ``$OPENAI_API_KEY``. A server that needs no
            key still needs some value here, e.g. ``"no-key-checked"``.
        base_url: The API's URL up to ``/v1``, e.g. ``"http://localhost:11434/v1"``;
            defaults to ``$OPENAI_BASE_URL``, else OpenAI's.
        timeout: Seconds one attempt may take; None keeps the SDK's default.
        client: A ready ``openai.OpenAI`` client to use instead of ``api_key``,
            ``base_url`` and ``timeout``. It stays the caller's to close.
        retry: The retry policy; defaults to ``RetryPolicy()``.
        sleep: Waits between attempts; tests inject a no-op.
        max_tokens_parameter: The request field that carries ``max_tokens``:
            ``"max_completion_tokens"`` (OpenAI's current one, which reasoning models
            require) or ``"max_tokens"`` (for servers that only know the old one).

    Raises:
        ConfigurationError: ``client`` was combined with the other client settings, or
            the client (built or given) has no credential.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = None,
        client: openai.OpenAI | None = None,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        max_tokens_parameter: MaxTokensParameter = "max_completion_tokens",
    ) -> None:
        self._max_tokens_parameter: MaxTokensParameter = max_tokens_parameter
        settings = ClientSettings(api_key, base_url, timeout)
        super().__init__(_VENDOR, openai.OpenAI, settings, client, retry=retry, sleep=sleep)

    def complete(self, request: ProviderRequest) -> ProviderResponse:
        """Ask for the whole answer in one response."""
        params = self._params(request)

        def create() -> object:
            # The JSON as sent (see SdkAdapter).
            return self._client.chat.completions.with_raw_response.create(**params).parse(to=object)

        completion = read_answer(_VENDOR.name, "completion", self._call(create), _Completion)
        if not completion.choices:
            msg = f"the {_VENDOR.name} API answered with no choices (completion {completion.id})"
            raise ProviderError(msg)
        choice = completion.choices[0]
        message = choice.message
        calls = tuple(
            ToolCall(call.id, call.function.name, call.function.arguments or "{}")
            for call in message.tool_calls or ()
            if isinstance(call, _FunctionCall)
        )
        return ProviderResponse(
            content=message.content or message.refusal or "",
            tool_calls=calls,
            usage=_usage(completion.usage),
            finish_reason=_VENDOR.finish_reason(choice.finish_reason),
            model=completion.model or "",
        )

    def stream(self, request: ProviderRequest) -> Iterator[StreamDelta]:
        """Stream the answer: text as it arrives; tool calls, usage and the finish
        reason in the last delta. Only opening the stream is retried."""
        params: CompletionCreateParamsStreaming = {
            **self._params(request),
            "stream": True,
            # Without it the stream reports no usage.
            "stream_options": {"include_usage": True},
        }

        def create() -> openai.Stream[object]:
            # Each chunk's JSON as sent (see SdkAdapter).
            response = self._client.chat.completions.with_raw_response.create(**params)
            return response.parse(to=openai.Stream[object])

        pieces: list[ToolCallDelta] = []
        usage: Usage | None = None
        finish_reason: str | None = None
        model = ""
        with (
            self._call(create) as chunks,
            self._translated_errors(),
        ):
            for sent in chunks:
                chunk = read_answer(_VENDOR.name, "stream chunk", sent, _Chunk)
                usage = _usage(chunk.usage) or usage
                model = chunk.model or model
                for choice in chunk.choices:
                    if choice.index != 0:
                        continue
                    delta = choice.delta or _ChunkDelta()
                    if delta.content or delta.refusal or delta.tool_calls or choice.finish_reason:
                        ended = finish_reason is not None
                        after_end(_VENDOR.name, "finish_reason", ended, "choice 0 delta")
                    finish_reason = _VENDOR.finish_reason(choice.finish_reason) or finish_reason
                    text = delta.content or delta.refusal
                    if text:
                        yield StreamDelta(content=text)
                    # The first fragment of a call names it; the rest carry pieces of its
                    # arguments. Some servers repeat the id and name.
                    fragments = tuple(_piece(f) for f in delta.tool_calls or ())
                    if fragments:
                        pieces.extend(fragments)
                        yield StreamDelta(tool_call_deltas=fragments)
        calls = tuple(call for call in assembled_calls(pieces) if call.name)
        yield final_delta(
            _VENDOR.name,
            "finish_reason",
            finish_reason is not None,
            tool_calls=calls,
            usage=usage,
            finish_reason=finish_reason,
            model=model,
        )

    def _params(self, request: ProviderRequest) -> CompletionCreateParamsBase:
        params: CompletionCreateParamsBase = {
            "model": request.model,
            "messages": [_message(message) for message in request.messages],
        }
        if request.tools:
            params["tools"] = [_tool(spec) for spec in request.tools]
            if request.tool_choice == "none":
                params["tool_choice"] = "none"
        if request.max_tokens is not None:
            params[self._max_tokens_parameter] = request.max_tokens
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.output is not None:
            # Structured outputs: the answer's text is JSON of the schema; strict makes
            # the API enforce it, where the schema allows (the runtime checks it anyway).
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": request.output.name,
                    "schema": request.output.schema,
                    "strict": request.output.strict,
                },
            }
        return params


def _message(message: Message) -> ChatCompletionMessageParam:
    match message.role:
        case Role.SYSTEM:
            system: ChatCompletionSystemMessageParam = {
                "role": "system",
                "content": message.content,
            }
            if message.name:
                system["name"] = message.name
            return system
        case Role.USER:
            user: ChatCompletionUserMessageParam = {"role": "user", "content": message.content}
            if message.name:
                user["name"] = message.name
            return user
        case Role.ASSISTANT:
            # OpenAI itself answers tool calls with a null content; echo that.
            assistant: ChatCompletionAssistantMessageParam = {
                "role": "assistant",
                "content": message.content or (None if message.tool_calls else ""),
            }
            if message.tool_calls:
                assistant["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in message.tool_calls
                ]
            if message.name:
                assistant["name"] = message.name
            return assistant
        case Role.TOOL:
            return {
                "role": "tool",
                "tool_call_id": _VENDOR.tool_call_id(message, "call"),
                "content": message.content,
            }
    raise AssertionError(f"unknown role {message.role!r}")  # pragma: no cover


def _tool(spec: ToolSpec) -> ChatCompletionFunctionToolParam:
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        },
    }


class _Function(msgspec.Struct):
    name: str
    arguments: str | None = None


class _FunctionCall(msgspec.Struct, tag="function", tag_field="type"):
    id: str
    function: _Function


class _CustomCall(msgspec.Struct, tag="custom", tag_field="type"):
    """A call of a custom (free-form) tool, which the library never offers."""


class _AnswerMessage(msgspec.Struct):
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[_FunctionCall | _CustomCall] | None = None


class _Choice(msgspec.Struct):
    message: _AnswerMessage
    finish_reason: str | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int
    completion_tokens: int


class _Completion(msgspec.Struct):
    """What the adapter reads of a ``chat.completion``."""

    choices: list[_Choice]
    id: str = ""
    usage: _Usage | None = None
    model: str | None = None


class _FragmentFunction(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _Fragment(msgspec.Struct):
    index: int
    id: str | None = None
    function: _FragmentFunction | None = None


class _ChunkDelta(msgspec.Struct):
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[_Fragment] | None = None


class _ChunkChoice(msgspec.Struct):
    index: int
    delta: _ChunkDelta | None = None
    finish_reason: str | None = None


class _Chunk(msgspec.Struct):
    """What the adapter reads of a ``chat.completion.chunk``."""

    choices: list[_ChunkChoice]
    usage: _Usage | None = None
    model: str | None = None


def _piece(fragment: _Fragment) -> ToolCallDelta:
    function = fragment.function
    return ToolCallDelta(
        index=fragment.index,
        id=fragment.id or "",
        name=(function.name if function else None) or "",
        arguments=(function.arguments if function else None) or "",
    )


def _usage(usage: _Usage | None) -> Usage | None:
    if usage is None:
        return None
    return Usage(
        input_tokens=token_count(usage.prompt_tokens, "usage.prompt_tokens"),
        output_tokens=token_count(usage.completion_tokens, "usage.completion_tokens"),
    )
