"""What in a store URL is secret, and how a message shows the URL without it.

The URL is read as loosely as any parser might read it, so that no reading of a malformed
one leaves a secret, or a piece of one, in sight:

- the user information ends at the last ``@`` that is not in a query parameter (libpq
  ends it at the first: a password holding a raw ``@`` is read into the host), after a
  scheme however mistyped (``postgresql:/``, ``postgresql//``);
- a ``password=`` (or ``sslpassword=``, ``oauth_client_secret=``, a SCRAM key, or any
  parameter whose name says it carries a credential: a ``cipher_key``, a ``token``) anywhere
  (a key=value string, a mistyped scheme), under a key that may be percent-encoded
  (``pass%77ord``), runs to the next ``&`` that starts a parameter libpq takes (the rest
  of a password holding a raw ``&``), or, in a key=value string, to the end;
- a character that ends a part of a URL (``@ / ? # & = , :`` or a space), written raw
  in a password, cuts it into runs that a driver may show apart (as a host, a port, an
  option), cutting at some of them and not at others.

:func:`redact` replaces the secrets where they stand in the URL, and nothing else;
:func:`scrub` hides, in any other text (a driver's error), each secret and each run of
three characters or more: a shorter one hidden everywhere would make every message noise.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator
from urllib.parse import unquote

from covonaut_es._secrets import looks_secret, scrub_chain
from covonaut_es.errors import CovonautError

_URL_DELIMITERS = re.compile(r"[@/?#&=,:\s]+")  # ":" ends a host before its port
_SHORTEST_HIDDEN = 3
_SCHEME = re.compile(r"^[A-Za-z][\w+.-]*:?[/\\]+")  # also as mistyped: postgresql:/, //
_SECRET_PARAMETERS = frozenset({"oauth_client_secret", "scram_client_key", "scram_server_key"})
# A key starts where no key character precedes it: tried at every offset of a long run of
# them, the pattern took time quadratic in a long password's length.
_PARAMETER_KEY = re.compile(r"(?<![\w%])([\w%]+)\s*=\s*", re.ASCII)


def redact(url: str) -> str:
    """The URL with its password, and any secret parameter, replaced by ``***``, for
    messages and logs, however malformed the URL is."""
    shown = url
    for start, end in sorted(_secret_spans(url), reverse=True):
        shown = shown[:start] + "***" + shown[end:]
    return shown


def scrub(text: str, url: str) -> str:
    """``text`` (a driver's error about ``url``, or a message showing it) without the
    secrets of ``url``; the URL as :func:`redact` shows it is left as it stands."""
    if not _secrets(url):
        return text
    shown = redact(url)
    return shown.join(_hidden(part, url) for part in text.split(shown))


@contextlib.contextmanager
def secrets_hidden(url: str) -> Iterator[None]:
    """Around an open of ``url``: an error whose message, or that of an error it was
    raised from or during, shows a secret of the URL (a driver's text about a host or an
    option it read from a malformed URL) has its chain scrubbed before it goes on (see
    :func:`scrub_chain`).

    Raises:
        CovonautError: What the open raised, scrubbed.
    """
    try:
        yield
    except CovonautError as exc:
        scrub_chain(exc, functools.partial(scrub, url=url))
        raise


def _hidden(text: str, url: str) -> str:
    for secret in _secrets(url):
        text = text.replace(secret, "***")
    return text


@functools.lru_cache(maxsize=16)
def _secrets(url: str) -> tuple[str, ...]:
    """The texts :func:`scrub` hides, longest first."""
    found = {url[start:end] for start, end in _secret_spans(url)}
    every = {run for secret in found | {unquote(t) for t in found} for run in _runs(secret)}
    every |= {unquote(text) for text in every}
    return tuple(sorted((t for t in every if len(t) >= _SHORTEST_HIDDEN), key=len, reverse=True))


_MOST_CUTS_SPANNED = 64


def _runs(secret: str) -> Iterator[str]:
    """Each run of ``secret`` a parser may show apart: from its start or a character
    that ends a part of a URL to its end or another such character, whichever of them
    the parser cuts at (libpq cuts a password at ``@`` and ``:`` but not at ``#``, so
    ``ab#cd:ef`` may show ``ab#cd``). A run across more than :data:`_MOST_CUTS_SPANNED`
    cuts is not listed: longest first, the runs it holds hide it."""
    cuts = [(m.start(), m.end()) for m in _URL_DELIMITERS.finditer(secret)]
    starts = [0, *(end for _, end in cuts)]
    ends = [*(start for start, _ in cuts), len(secret)]
    for first, start in enumerate(starts):
        for end in ends[first : first + _MOST_CUTS_SPANNED + 1]:
            yield secret[start:end]


@functools.lru_cache(maxsize=16)
def _secret_spans(url: str) -> tuple[tuple[int, int], ...]:
    """Where the secrets stand in ``url`` (start, end), without overlaps."""
    spans: list[tuple[int, int]] = []
    at = _end_of_user_information(url)
    if at is not None:
        scheme = _SCHEME.match(url)
        colon = url.find(":", scheme.end() if scheme else 0, at)
        if colon >= 0:
            spans.append((colon + 1, at))
    for key in _PARAMETER_KEY.finditer(url):
        name = unquote(key.group(1)).lower()
        if name.endswith("password") or name in _SECRET_PARAMETERS or looks_secret(name):
            in_a_query = url[key.start() - 1 : key.start()] in ("?", "&")
            value = _password_value(url[key.end() :], in_a_query=in_a_query)
            spans.append((key.end(), key.end() + len(value)))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        elif end > start:
            merged.append((start, end))
    return tuple(merged)


def _end_of_user_information(url: str) -> int | None:
    """The position of the ``@`` that ends the user information: the last one that is not
    in a query parameter's value (``/db?user=ann@corp``), if any. A query begins at the
    first ``?`` after the path, and only where an ``@`` stands before the path (libpq
    reads user information there only): a ``?`` before the first ``/`` after the scheme
    is a password's own character (``pw@x?y=@host``), and so is a ``?``, ``&`` or ``=``
    after a raw ``/`` in a password (``pw/x?y=@host``, which libpq reads as a host, a
    port and a query), so the ``@`` after them may still end the password."""
    scheme = _SCHEME.match(url)
    start = scheme.end() if scheme else 0
    path = url.find("/", start)
    query = url.find("?", path) if path >= 0 and "@" in url[start:path] else -1
    at = len(url)
    while (at := url.rfind("@", 0, at)) >= 0:
        parameter_start = max(url.rfind("?", 0, at), url.rfind("&", 0, at))
        in_a_query = 0 <= query <= parameter_start and "=" in url[parameter_start:at]
        if not in_a_query:
            return at
    return None


def _password_value(text: str, *, in_a_query: bool) -> str:
    """The value at the start of ``text`` (after a secret's ``=``): in a URL's query, up
    to the next ``&`` that starts a parameter libpq takes (what follows a raw ``&`` in a
    password is read as a parameter of another name, or none); elsewhere (a key=value
    string, which no store URL is), the rest of the text, as a raw space may not end it."""
    if not in_a_query:
        return text
    value, *after = text.split("&")
    for parameter in after:
        if unquote(parameter.partition("=")[0]).strip().lower() in _libpq_keywords():
            break
        value += "&" + parameter
    return value


@functools.cache
def _libpq_keywords() -> frozenset[str]:
    """The parameters libpq takes (none known without psycopg: every parameter after a
    secret is then taken for a piece of it)."""
    try:
        from psycopg import pq
    except ImportError:
        return frozenset()
    return frozenset(option.keyword.decode() for option in pq.Conninfo.get_defaults())
