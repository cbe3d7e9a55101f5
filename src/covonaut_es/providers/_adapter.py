"""What the provider adapters share: their SDK's client, retries, errors, finish reasons.

Each adapter describes its vendor once, as a :class:`Vendor`, and builds on
:class:`SdkAdapter`; what differs between vendors (the wire format of requests and
answers) stays in the adapter's own module.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, Protocol, Self, TypeVar

import attrs

from covonaut_es._arguments import positive_seconds
from covonaut_es._closing import Closing
from covonaut_es._extras import missing_extra
from covonaut_es._secrets import Secrets
from covonaut_es.errors import (
    ConfigurationError,
    CovonautError,
    ProviderError,
    ProviderRequestError,
)
from covonaut_es.messages import Message
from covonaut_es.providers._retry import (
    RetryPolicy,
    call_with_retry,
    connection_error,
    error_for_status,
)
from covonaut_es.providers._secrets import Credentials, check_sendable, client_secrets
from covonaut_es.store._url_secrets import redact

T = TypeVar("T")
StatusErrorT = TypeVar("StatusErrorT", bound=Exception)


def missing_sdk(exc: ModuleNotFoundError, package: str, extra: str) -> ImportError:
    """The error to raise when an adapter's SDK cannot be imported (see
    :func:`~covonaut_es._extras.missing_extra`)."""
    return missing_extra(exc, package, extra, user="this provider adapter")


@attrs.frozen
class HttpFailure:
    """What an SDK's error for an HTTP error answer says.

    Attributes:
        status_code: The HTTP status the failure stands for.
        detail: The API's own explanation.
        headers: The answer's headers, read for ``retry-after``; None where none applies.
    """

    status_code: int
    detail: str
    headers: Mapping[str, str] | None


@attrs.frozen
class SdkErrors(Generic[StatusErrorT]):
    """The classes of a vendor SDK's errors that the adapters tell apart.

    Attributes:
        base: The base class of every error the SDK raises.
        status: The error for an HTTP error answer.
        connection: The error for an API not reached or not answering in time.
    """

    base: type[Exception]
    status: type[StatusErrorT]
    connection: type[Exception]


@attrs.frozen
class Vendor(Generic[StatusErrorT]):
    """One vendor's API and SDK, as far as the code shared by the adapters needs them.

    Attributes:
        name: The API's name in messages, e.g. ``"OpenAI"``.
        finish_reasons: The vendor's finish reasons in the common vocabulary.
        errors: The SDK's error classes.
        http_failure: Reads the SDK's error for an HTTP error answer.
        credentials: Where the SDK's client keeps its credentials.
    """

    name: str
    finish_reasons: Mapping[str, str]
    errors: SdkErrors[StatusErrorT]
    http_failure: Callable[[StatusErrorT], HttpFailure]
    credentials: Credentials

    def refused_client(self, reason: str) -> ConfigurationError:
        """The error for a client the SDK would not build, or that has no credential:
        ``reason`` says why, and the message how to give it one."""
        variables = " or ".join(self.credentials.variables)
        msg = (
            f"cannot create the {self.name} client: {reason}; pass api_key= or set the "
            f"environment variable {variables}"
        )
        return ConfigurationError(msg)

    def check_credentials(self, client: object) -> None:
        """Refuse a client, built or the caller's, that has no credential: the SDK
        would refuse each of its requests, or send them to be refused.

        Raises:
            ConfigurationError: The client has none (see
                :meth:`~covonaut_es.providers._secrets.Credentials.held_by`).
        """
        if not self.credentials.held_by(client):
            raise self.refused_client("it has no API key, token or credential header")

    def finish_reason(self, reason: str | None) -> str | None:
        """The common name of ``reason``; a reason the table lacks passes through."""
        if reason is None:
            return None
        return self.finish_reasons.get(reason, reason)

    @contextlib.contextmanager
    def translated_errors(self, secrets: Secrets) -> Iterator[None]:
        """Raise the SDK's errors as the library's typed provider errors, ``secrets``
        hidden in their text and in that of the SDK's errors they are raised from.

        Raises:
            ProviderError: Or one of its subclasses, for an SDK's error; for a body the
                SDK could not read as JSON; for a header it could not encode.
        """
        with secrets.hidden():
            try:
                yield
            except self.errors.status as exc:
                failure = self.http_failure(exc)
                raise error_for_status(
                    self.name, failure.status_code, failure.detail, failure.headers
                ) from exc
            except self.errors.connection as exc:
                # The SDKs' errors carry their message as their only argument.
                raise connection_error(self.name, str(exc)) from exc
            except self.errors.base as exc:
                msg = f"the {self.name} SDK failed: {type(exc).__name__}: {exc}"
                raise ProviderError(msg) from exc
            except CovonautError:
                raise
            except UnicodeEncodeError as exc:
                # A header changed since the client was checked. The error holds the whole
                # header, a key among them, and stays the new one's context: emptied.
                exc.object, exc.args = "", ()
                msg = f"the {self.name} request was not sent: a header value is not ASCII"
                raise ProviderError(msg) from None
            except (ValueError, RecursionError) as exc:
                # The SDK's JSON reader, on a body that is not JSON or not UTF-8, nested
                # past the recursion limit, or with an integer past Python's digit limit.
                msg = (
                    f"the {self.name} API answered a body that is not readable JSON "
                    f"({type(exc).__name__})"
                )
                raise ProviderError(msg) from None

    def tool_call_id(self, message: Message, answered: str) -> str:
        """The id of the call a tool message answers.

        Args:
            message: A tool message.
            answered: What the vendor calls the thing answered, e.g. ``"call"``.

        Raises:
            ProviderRequestError: The message names no call, so it cannot be sent.
        """
        if message.tool_call_id is None:
            msg = (
                f"a tool message has no tool_call_id, so the {self.name} API cannot tell "
                f"which {answered} it answers: {message.content[:80]!r}"
            )
            raise ProviderRequestError(msg)
        return message.tool_call_id


class SdkClient(Protocol):
    """The part of a vendor SDK's client that the shared adapter code uses."""

    def with_options(self, *, max_retries: int) -> Self:
        """A copy of the client with other settings, sharing its connections."""
        ...

    def close(self) -> None:
        """Close the client's connections."""
        ...


ClientT = TypeVar("ClientT", bound=SdkClient)


@attrs.frozen
class ClientSettings:
    """What a provider builds its SDK client from, when the caller passes no client.

    Attributes:
        api_key: The API key; None lets the SDK read its environment variable.
        base_url: The API's URL; None lets the SDK read its environment variable.
        timeout: Seconds one attempt may take; None keeps the SDK's default.

    Raises:
        ConfigurationError: ``timeout`` is not a positive, finite number of seconds.
    """

    api_key: str | None
    base_url: str | None
    timeout: float | None = attrs.field(validator=lambda _, __, value: _check_timeout(value))


def _check_timeout(timeout: object) -> None:
    """Check a client setting's ``timeout``, named as the adapters' argument.

    Raises:
        ConfigurationError: It is neither None nor a positive, finite number of seconds.
    """
    if timeout is not None:
        positive_seconds("timeout", timeout)


class SdkAdapter(Closing, Generic[ClientT]):
    """A provider adapter over a vendor SDK's client.

    It builds the client, or borrows the caller's, with the SDK's retries off; makes
    each API call under the retry policy with the SDK's errors typed; and closes the
    client if it built it. Adapters read each answer, and each streamed event, as the
    JSON the API sent (the SDK's raw response parsed ``to=object``), never from the
    SDK's answer objects, whose lenient reading turns ``true``, ``3.0`` or ``"5"`` into
    a count on some paths and not others.

    Args:
        vendor: The vendor of the API.
        sdk_client: The SDK's client class.
        settings: What to build the client from when ``client`` is None.
        client: The caller's client, or None to build one.
        retry: The retry policy; defaults to ``RetryPolicy()``.
        sleep: Waits between attempts.

    Attributes:
        retry: The retry policy.

    Raises:
        ConfigurationError: ``client`` was combined with client settings, the SDK could
            not build its client, the client (built or given) has no credential, or its
            key or one of its headers holds a character that is not printable ASCII, or
            a header value begins or ends with a space.
    """

    def __init__(
        self,
        vendor: Vendor[Any],
        sdk_client: Callable[..., ClientT],
        settings: ClientSettings,
        client: ClientT | None,
        *,
        retry: RetryPolicy | None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._vendor = vendor
        self._sleep = sleep
        self._owns_client = client is None
        if client is None:
            self._client = _build(vendor, sdk_client, settings)
        elif settings != ClientSettings(None, None, None):
            msg = (
                f"{type(self).__name__} got a client and also api_key, base_url or timeout: "
                "configure the client itself, or pass the settings without a client"
            )
            raise ConfigurationError(msg)
        else:
            self._client = _copied(vendor, client)
        try:
            vendor.check_credentials(self._client)
            check_sendable(self._client)
        except ConfigurationError:
            self.close()
            raise
        self._secrets = client_secrets(self._client)

    def close(self) -> None:
        """Close the client's connections, unless the client was passed in."""
        if self._owns_client:
            self._client.close()

    def _call(self, call: Callable[[], T]) -> T:
        """Make one API call under the retry policy, with the SDK's errors typed."""

        def attempt() -> T:
            with self._translated_errors():
                return call()

        return call_with_retry(attempt, self.retry, sleep=self._sleep)

    def _translated_errors(self) -> contextlib.AbstractContextManager[None]:
        """The SDK's errors raised as typed provider errors, the client's secrets hidden
        in their text (see :meth:`Vendor.translated_errors`)."""
        return self._vendor.translated_errors(self._secrets)


def _build(
    vendor: Vendor[Any], sdk_client: Callable[..., ClientT], settings: ClientSettings
) -> ClientT:
    # The SDK's default timeout holds unless one is given; None would mean "never".
    timeout = {} if settings.timeout is None else {"timeout": settings.timeout}
    try:
        return sdk_client(
            api_key=settings.api_key, base_url=settings.base_url, max_retries=0, **timeout
        )
    except vendor.errors.base as exc:
        raise vendor.refused_client(str(exc)) from exc
    except Exception as exc:
        # Building a client does no I/O: what it raises is a setting it cannot take, a
        # base URL its HTTP library cannot read (httpx's and httpx2's InvalidURL, neither
        # a ValueError). That error may quote the URL, password and all: the URL is
        # shown redacted, without its query (a gateway's key is often there), and the
        # error is not chained.
        url = settings.base_url
        shown = "" if url is None else f" {redact(str(url).partition('?')[0])!r}"
        msg = (
            f"cannot create the {vendor.name} client: its base URL{shown} is not one the SDK "
            f"can read ({type(exc).__name__}); check base_url= or the environment variable "
            "the SDK reads it from"
        )
        raise ConfigurationError(msg) from None


def _copied(vendor: Vendor[Any], client: ClientT) -> ClientT:
    """A copy of the caller's client that shares its connections but never retries by
    itself. The SDK builds the copy anew, checking its credentials again."""
    try:
        return client.with_options(max_retries=0)
    except vendor.errors.base as exc:
        raise vendor.refused_client(str(exc)) from exc
