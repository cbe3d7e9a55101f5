"""The inbox under attack: hostile bodies and edited arguments, errors that must keep
the security headers, a TLS proxy in front, and a second sign-in in the same browser."""

from __future__ import annotations

import html
import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markupsafe import escape
from starlette.testclient import TestClient

from covonaut_es import AgentThread, Store, open_store
from covonaut_es.errors import (
    ConfigurationError,
    IdentityProviderUnavailableError,
    ToolArgumentsLimitError,
)
from covonaut_es.inbox import create_app
from covonaut_es.inbox._app import SECURITY_HEADERS
from covonaut_es.tools import MAX_ARGUMENTS_DEPTH, check_arguments_limits
from inbox_support import (
    HOSTILE,
    current,
    in_doubt,
    inbox_client,
    paused,
    paused_on_tool,
    sign_in,
)
from support import call, earlier_thread_id_rule
from test_approvals import ALICE, VERIFIER, make_agent

OWN = {"Origin": "http://inbox.test"}
DEEP = "[" * 5000 + "]" * 5000


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as opened:
        paused(opened, "t", [], [])
        yield opened


def bearer(token: str = ALICE) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def review_id(client: TestClient) -> str:
    current(client)
    (review,) = client.get("/api/reviews", headers=bearer()).json()
    return str(review["review_id"])


def decided(store: Store) -> list[AgentThread.ReviewDecided]:
    return [e for e in store.history("t") if isinstance(e, AgentThread.ReviewDecided)]


@pytest.mark.parametrize(
    "body",
    [
        '{"arguments": ' + DEEP + "}",
        '{"comment": ' + DEEP + "}",
        '{"arguments": {"a": 1e400}}',
        '{"arguments": {"a": NaN}}',
        '{"arguments": {"a": "\\ud800"}}',
    ],
    ids=["deep-arguments", "deep-comment", "overflow", "nan", "lone-surrogate"],
)
def test_api_bodies_json_cannot_carry_are_400(store: Store, body: str) -> None:
    """Nesting past the tool arguments' limit, numbers JSON cannot carry and lone
    surrogates are refused with 400 and a message; nothing is decided."""
    with inbox_client(store) as client:
        url = f"/api/reviews/{review_id(client)}/approve"
        refused = client.post(url, headers=bearer(), content=body.encode())
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]
        invalid_utf8 = client.post(url, headers=bearer(), content=b'{"comment": "\xff"}')
        assert invalid_utf8.status_code == 400
    assert decided(store) == []


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (DEEP, "must nest at most 65 deep"),
        ('{"a": NaN}', "holds NaN"),
        ('{"a": Infinity}', "holds Infinity"),
        ('{"a": 1e400}', "holds the number 1e400"),
        ('{"a": "\\ud800"}', "lone surrogate"),
        ('{"a": ' + "9" * 5000 + "}", "beyond the 64 bits"),
        ('{"a": 18446744073709551616}', "beyond the 64 bits"),
        ('{"amount": 1, "amount": 2}', "names the key &#39;amount&#39; twice"),
    ],
    ids=[
        "deep",
        "nan",
        "infinity",
        "overflow",
        "lone-surrogate",
        "huge-integer",
        "65-bits",
        "repeated-key",
    ],
)
def test_edited_arguments_json_cannot_carry_are_400(
    store: Store, arguments: str, said: str
) -> None:
    """The review page's edited arguments are read as strictly as the API's: NaN is
    not approved as null, and nothing the store cannot hold is a 500."""
    with inbox_client(store) as client:
        review = review_id(client)
        csrf = sign_in(client, ALICE)
        form = {
            "action": "approve-edited",
            "review": review,
            "thread": "t",
            "csrf": csrf,
            "arguments": arguments,
        }
        refused = client.post("/decide", data=form, headers=OWN)
        assert refused.status_code == 400, refused.text
        assert said in refused.text
    assert decided(store) == []


def test_an_unexpected_error_keeps_the_security_headers(store: Store) -> None:
    """A 500 carries the same CSP and no-store as every other response."""

    class Broken:
        def verify(self, credential: Any) -> str:
            raise RuntimeError("verifier bug; token " + str(credential))

    app = create_app(store, Broken())
    with TestClient(app, base_url="http://inbox.test", raise_server_exceptions=False) as client:
        failed = client.get("/api/reviews", headers=bearer("s3cret-token"))
    assert failed.status_code == 500
    assert "s3cret-token" not in failed.text
    for name, value in SECURITY_HEADERS.items():
        assert failed.headers[name] == value
    assert failed.headers["cache-control"] == "no-store"


def test_behind_a_tls_proxy_the_session_cookie_is_secure(store: Store) -> None:
    """A proxy that ends TLS and forwards plain HTTP: the browser's page is https (its
    Origin says so), so the cookie must be Secure even though this hop is http. The
    operator's capitals in the proxy's origin do not keep its forms out, and an
    operator who did not name it is told how."""
    public = "https://inbox.example.com"
    form: dict[str, Any] = {"data": {"token": ALICE}, "headers": {"Origin": public}}
    with TestClient(create_app(store, VERIFIER), base_url="http://inbox.internal") as client:
        refused = client.post("/login", **form)
    assert refused.status_code == 403 and "--allowed-origin" in refused.text
    app = create_app(store, VERIFIER, allowed_origins=["HTTPS://Inbox.Example.com"])
    with TestClient(app, base_url="http://inbox.internal") as client:
        signed = client.post("/login", **form, follow_redirects=False)
    assert signed.status_code == 303
    assert "secure" in signed.headers["set-cookie"].lower().split("; ")


def test_signing_in_again_ends_the_previous_session(store: Store) -> None:
    """A new sign-in gets a new session id, and the one the browser held is ended."""
    with inbox_client(store) as client:
        sign_in(client, ALICE)
        first = client.cookies["covonaut_inbox"]
        sign_in(client, ALICE)
        assert client.cookies["covonaut_inbox"] != first
        client.cookies.set("covonaut_inbox", first, domain="inbox.test")
        assert client.get("/changes?since=x").status_code == 401


def test_the_edit_box_shows_invisible_characters_as_json_escapes(store: Store) -> None:
    """Bidirectional overrides and C1 controls in the requested arguments are written
    as JSON escapes in the edit box (which parses back to the same arguments), so
    the text a reviewer edits is the text that is stored."""
    thread = "bidi"
    hostile = '{"amount": 40, "to": "bob\\u202e\\u0085\\u2028\\udb40\\udc01"}'
    make_agent(store, [call(("c1", "pay", hostile))], [], thread_id=thread).run("pay")
    with inbox_client(store) as client:
        current(client)
        sign_in(client, ALICE)
        listed = client.get("/api/reviews", headers=bearer()).json()
        (review,) = (r for r in listed if r["thread_id"] == thread)
        page = client.get("/review", params={"id": review["review_id"], "thread": thread})
    box = page.text.split('id="edited-arguments"')[1].split("</textarea>")[0]
    for char in ("\u202e", "\u0085", "\u2028", "\U000e0001"):
        assert char not in box
    assert "\\u202e" in box and "\\udb40\\udc01" in box
    assert json.loads(html.unescape(box.split(">", 1)[1])) == review["arguments"]


SHOWS_NOTHING = (
    "\u115f\u1160\u3164\uffa0\u2800"  # Hangul fillers, the Braille blank
    "\u034f\u17b4\u17b5\u180b\u180f\ufe00\ufe0f\U000e0100\U000e01ef"  # ignorable marks
    "\u00a0\u2007\u3000\u200b\u2060\ufeff\u00ad\u202e\u2028\u0085"  # spaces, formats
    "\u2065\ufff0\U000e0001\U000e0fff"  # reserved default-ignorable code points
)
"""Characters that show nothing wherever they stand, by name; sampled from their
categories too."""
HIDDEN = st.sampled_from(SHOWS_NOTHING) | st.characters(
    categories=("Cc", "Cf", "Zs", "Zl", "Zp", "Co"), exclude_characters=" "
)
ORDINARY = st.sampled_from("ab19\\u ")
"""Ordinary text, the backslash and ``u`` of an escape's spelling among it."""
_stores = itertools.count()


@settings(max_examples=25, deadline=None)
@given(
    base=st.text(ORDINARY, min_size=1, max_size=4),
    hidden=st.lists(HIDDEN, min_size=1, max_size=3),
    at=st.integers(min_value=0, max_value=4),
    value=st.lists(ORDINARY | HIDDEN, max_size=8).map("".join),
    glyph=st.sampled_from("\u115f\u3164\uffa0\u2800\u034f\ufe0f"),
)
def test_what_shows_nothing_is_shown_escaped_and_no_two_keys_look_alike(
    base: str, hidden: list[str], at: int, value: str, glyph: str
) -> None:
    """Arguments mixing ordinary text with characters that show nothing (a Hangul
    filler, the Braille blank, a variation selector, a space other than ASCII's, a
    format or private-use character), in a thread an earlier version stored under an id
    that holds one: the inbox's rows
    and the review page show none of those characters raw, its arguments and edit box
    show two keys that differ by one of them (or by its escape's spelling) differently,
    and the edit box parses back to the arguments."""
    thread = f"shown{glyph}"
    sneaked = base[:at] + "".join(hidden) + base[at:]
    spelt = base[:at] + json.dumps("".join(hidden))[1:-1] + base[at:]
    arguments = {base: 1, sneaked: 1_000_000, spelt: 2, "amount": 40, "to": value}
    raw = json.dumps(arguments, ensure_ascii=False)
    with open_store(f"memory://shown-{next(_stores)}") as store:
        with earlier_thread_id_rule():  # an id new threads may no longer take
            make_agent(store, [call(("c1", "pay", raw))], [], thread_id=thread).run("pay")
        with inbox_client(store) as client:
            current(client)
            sign_in(client, ALICE)
            rows = client.get("/rows", params={"thread": thread}).text
            (review,) = client.get("/api/reviews", headers=bearer()).json()
            page = client.get("/review", params={"id": review["review_id"], "thread": thread})
    page = page.text
    drawn = {char for char in thread + raw if char in SHOWS_NOTHING or char in [*hidden, *value]}
    drawn -= set("ab19\\u ")
    for text in (rows, page):
        shown = html.unescape(re.sub(r'<input type="hidden"[^>]*>', "", text))  # posted back
        assert not drawn & set(shown), [hex(ord(c)) for c in drawn & set(shown)]
    (pre,) = re.findall(r'<pre class="arguments full" id="arguments"[^>]*>(.*?)</pre>', page, re.S)
    keys = re.findall(r'^  "(.*)": ', html.unescape(pre), flags=re.M)
    assert len(set(keys)) == len(arguments)
    box = page.split('id="edited-arguments"')[1].split("</textarea>")[0]
    assert json.loads(html.unescape(box.split(">", 1)[1])) == arguments


def test_depth_check_is_linear_on_unterminated_strings() -> None:
    """A hostile model's arguments of many escaped quotes and no closing quote are
    measured in one pass (the string pattern used to rescan from every quote)."""
    text = '"' + '\\"' * 200_000
    check_arguments_limits("echo", text)
    check_arguments_limits("echo", "[" * MAX_ARGUMENTS_DEPTH + '"]]\\')
    with pytest.raises(ToolArgumentsLimitError, match="nested 65 deep"):
        check_arguments_limits("echo", "[" * (MAX_ARGUMENTS_DEPTH + 1) + '"\\')


def test_an_identity_provider_outage_is_503_and_keeps_sessions(store: Store) -> None:
    """While the provider's keys cannot be fetched, pages, live updates and the API
    answer 503 and decide nothing; the sessions survive the outage."""
    down = [False]

    class Provider:
        def verify(self, credential: Any) -> str:
            if down[0]:
                raise IdentityProviderUnavailableError("the identity provider is down")
            return VERIFIER.verify(credential)

    app = create_app(store, Provider())
    with TestClient(app, base_url="http://inbox.test") as client:
        review = review_id(client)
        csrf = sign_in(client, ALICE)
        down[0] = True
        form = {"action": "approve", "review": review, "thread": "t", "csrf": csrf}
        assert client.post("/decide", data=form, headers=OWN).status_code == 503
        assert client.get("/", follow_redirects=False).status_code == 503
        assert client.get("/changes?since=x").status_code == 503
        assert client.get("/rows").status_code == 503
        assert client.get("/api/reviews", headers=bearer()).status_code == 503
        down[0] = False
        assert client.get("/", follow_redirects=False).status_code == 200
    assert decided(store) == []


def test_a_missing_thread_is_404_without_the_store_location(store: Store, tmp_path: Path) -> None:
    """Reviewers learn that a thread does not exist, not where the store lives."""
    with inbox_client(store) as client:
        sign_in(client, ALICE)
        missing = client.get("/thread", params={"id": "../../etc/passwd"})
    assert missing.status_code == 404
    assert str(tmp_path) not in missing.text and "sqlite" not in missing.text


@pytest.mark.parametrize(
    "origin", ["*", "null", "https://inbox.example.com/", "inbox.example.com", "ftp://x.test"]
)
def test_an_allowed_origin_must_be_an_origin(store: Store, origin: str) -> None:
    """A wildcard, ``null`` or an origin with a path would match too much or nothing:
    the operator is told at once."""
    with pytest.raises(ConfigurationError, match="is not an origin"):
        create_app(store, VERIFIER, allowed_origins=[origin])


def test_the_inbox_shows_the_start_of_long_arguments(store: Store) -> None:
    """A model's megabyte of arguments does not make every inbox page (and every live
    update) a megabyte: the list shows their start, the review page all of them."""
    thread = "long"
    long = json.dumps({"amount": 40, "to": "bob" + "x" * 100_000})
    make_agent(store, [call(("c1", "pay", long))], [], thread_id=thread).run("pay")
    with inbox_client(store) as client:
        current(client)
        sign_in(client, ALICE)
        listed = client.get("/", params={"thread": thread}).text
        rows = client.get("/rows", params={"thread": thread}).text
        listed_reviews = client.get("/api/reviews", headers=bearer()).json()
        (review,) = (r for r in listed_reviews if r["thread_id"] == thread)
        page = client.get("/review", params={"id": review["review_id"], "thread": thread})
    assert "bobxxx" in listed and len(listed) < 20_000 and len(rows) < 20_000
    assert "x" * 100_000 in page.text


@pytest.mark.parametrize(
    "token",
    ["SECRET", "eyJTECRET.SECRET", ALICE.split(".")[0] + ".SECRET"],
    ids=["bare", "header-like", "real-header"],  # a real header's id changes with its expiry
)
def test_a_refused_token_is_never_echoed(store: Store, token: str) -> None:
    """The sign-in page and the API say why a token is refused, without repeating it."""
    with inbox_client(store) as client:
        page = client.post("/login", data={"token": token}, headers=OWN)
        api = client.get("/api/reviews", headers=bearer(token))
    assert (page.status_code, api.status_code) == (401, 401)
    assert "SECRET" not in page.text and "SECRET" not in api.text


@pytest.mark.parametrize(
    "option",
    [{"page_size": 0}, {"session_ttl_seconds": -1.0}, {"wait_seconds": float("nan")}],
    ids=["page_size", "session_ttl_seconds", "wait_seconds"],
)
def test_options_no_inbox_works_with_are_refused(store: Store, option: dict[str, Any]) -> None:
    """A page size of 0 made every inbox page a 500; the operator is told at once."""
    (name,) = option
    with pytest.raises(ConfigurationError, match=name):
        create_app(store, VERIFIER, **option)


@pytest.mark.parametrize(
    ("action", "body", "said"),
    [
        ("approve", '{"comment": "a", "comment": "b"}', "names the key 'comment' twice"),
        ("approve", '{"arguments": {"amount": 1, "amount": 2}}', "names the key 'amount' twice"),
        ("approve", '{"arguments": {"amount": NaN}}', "holds NaN"),
        ("approve", '{"arguments": {"amount": Infinity}}', "holds Infinity"),
        ("approve", '{"arguments": {"amount": -Infinity}}', "holds -Infinity"),
        ("approve", '{"arguments": {"amount": 1e400}}', "holds the number 1e400"),
        ("approve", '{"arguments": {"amount": 18446744073709551616}}', "beyond the 64 bits"),
        ("approve", '{"arguments": [1]}', "must be one JSON object, got a JSON array"),
        ("approve", '{"arguments": 7}', "must be one JSON object, got a JSON number"),
        ("approve", '{"digest": "0000"}', "for operation digest '0000'"),
        ("approve", '{"digest": 7}', "the digest must be text"),
        ("approve", '{"reviewer": "ceo"}', "unknown fields ['reviewer']"),
        ("approve", "[]", "the body must be one JSON object"),
        ("reject", '{"reason": "  "}', "the reason must not be empty"),
        ("reject", "{}", "the reason must not be empty"),
        ("reject", '{"reason": "no", "arguments": {"amount": 1}}', "only an approval"),
        ("respond", '{"answer": "\\n"}', "the answer must not be empty"),
        ("respond", '{"answer": 7}', "the answer must be text"),
    ],
)
def test_a_refused_decision_over_the_api_records_nothing(
    store: Store, action: str, body: str, said: str
) -> None:
    """The API's body is read by the service's strict reader, the body itself
    included: each refusal is a 400 naming what was wrong, and the thread is unchanged."""
    version = store.state_at("t").version
    with inbox_client(store) as client:
        url = f"/api/reviews/{review_id(client)}/{action}"
        headers = {**bearer(), "Content-Type": "application/json"}
        refused = client.post(url, headers=headers, content=body.encode())
        assert refused.status_code == 400, refused.text
        assert said in refused.json()["error"]
        assert client.get("/api/reviews", headers=bearer()).json() != []
    assert decided(store) == []
    assert store.state_at("t").version == version


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"action": "approve", "digest": "0" * 64}, "for operation digest &#39;0000"),
        ({"action": "reject", "reason": " "}, "the reason must not be empty"),
        ({"action": "respond", "answer": ""}, "the answer must not be empty"),
        ({"action": "approve-edited", "arguments": "[1]"}, "must be one JSON object"),
        ({"action": "pay-now"}, "unknown decision &#39;pay-now&#39;"),
    ],
)
def test_a_refused_decision_through_the_form_records_nothing(
    store: Store, fields: dict[str, str], said: str
) -> None:
    """The review page's form is read by the same reader: a digest that is not the
    review's (the reviewer saw another operation), a blank reason or answer, a
    non-object edit and an unknown action are each 400, and nothing is recorded."""
    version = store.state_at("t").version
    with inbox_client(store) as client:
        review = review_id(client)
        csrf = sign_in(client, ALICE)
        form = {"review": review, "thread": "t", "csrf": csrf, **fields}
        refused = client.post("/decide", data=form, headers=OWN)
        assert refused.status_code == 400, refused.text
        assert said in refused.text
    assert decided(store) == []
    assert store.state_at("t").version == version


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    typed=st.text(st.characters(exclude_categories=("Cs",)), max_size=120),
    comment=st.sampled_from(["", HOSTILE, '" autofocus onfocus="alert(1)', "</textarea><b>x"]),
)
def test_a_refused_decision_shows_what_was_typed_back_as_text(
    store: Store, typed: str, comment: str
) -> None:
    """A refused decision is shown on the review page with the reviewer's typing put
    back, escaped, whatever it holds: the edit in its box and the comment in its field,
    no markup of theirs on the page, the refusal as an alert, and nothing recorded."""
    with inbox_client(store) as client:
        review = review_id(client)
        csrf = sign_in(client, ALICE)
        edit = "[" + typed  # never one JSON object: always refused
        form = {"review": review, "thread": "t", "csrf": csrf, "action": "approve-edited",
                "arguments": edit, "comment": comment}  # fmt: skip
        refused = client.post("/decide", data=form, headers=OWN)
    assert refused.status_code == 400, refused.text
    page = refused.text
    assert 'role="alert"' in page
    (box,) = re.findall(r'<textarea name="arguments"[^>]*>(.*?)</textarea>', page, flags=re.S)
    assert box == str(escape(edit))
    assert f'id="edit-comment" value="{escape(comment)}"' in page
    assert "<script>" not in page and "<b>x" not in page
    assert decided(store) == []


def test_the_review_page_posts_the_digest_it_shows(store: Store) -> None:
    """Every decision form of the review page carries, hidden, the digest the page
    shows; posted as it is, the approval is recorded."""
    with inbox_client(store) as client:
        review = review_id(client)
        sign_in(client, ALICE)
        page = client.get("/review", params={"id": review, "thread": "t"}).text
        (shown,) = re.findall(r"<dt>Digest</dt><dd><code[^>]*>(jcs-sha256:[0-9a-f]+)</code>", page)
        hidden = re.findall(r'name="digest" value="([^"]*)"', page)
        assert hidden == [shown] * 4
        csrf = re.findall(r'name="csrf" value="([^"]+)"', page)[0]
        form = {"action": "approve", "review": review, "thread": "t", "csrf": csrf, "digest": shown}
        assert client.post("/decide", data=form, headers=OWN).status_code == 200
    (event,) = decided(store)
    assert event.digest == shown


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"action": "answer", "answer": " "}, "the answer must not be empty"),
        ({"action": "abandon", "reason": ""}, "the reason must not be empty"),
        ({"action": "shout"}, "unknown action &#39;shout&#39;"),
    ],
)
def test_a_refused_pause_action_is_shown_on_the_pause_page(
    store: Store, fields: dict[str, str], said: str
) -> None:
    """A blank answer, a giving-up without a reason or an unknown action on a tool's
    pause is a 400 shown as an alert on the pause's own page, its forms still there, and
    nothing is recorded."""
    paused_on_tool(store, "asked")
    version = store.state_at("asked").version
    with inbox_client(store) as client:
        csrf = sign_in(client, ALICE)
        page = client.get("/pause", params={"thread": "asked", "call": "c1"}).text
        (token,) = set(re.findall(r'name="pause" value="([^"]+)"', page))
        form = {"thread": "asked", "call": "c1", "pause": token, "csrf": csrf, **fields}
        refused = client.post("/pause", data=form, headers=OWN)
    assert refused.status_code == 400, refused.text
    assert 'id="error" role="alert"' in refused.text and said in refused.text
    assert 'id="answer-form"' in refused.text
    assert store.state_at("asked").version == version


def test_a_pause_page_shows_hostile_reasons_and_data_as_text(store: Store) -> None:
    """A tool's pause whose data and ids hold markup is shown escaped, with the
    thread's messages; a call in doubt's page shows its arguments and idempotency
    key; the inbox's links to both quote the ids."""
    thread_id, call_id = "t<b>x</b>&y=1#z", 'c"1<i>/?'
    paused_on_tool(store, thread_id, call_id=call_id, data={"question": HOSTILE})
    key = in_doubt(store, "doubt")
    with inbox_client(store) as client:
        current(client)
        sign_in(client, ALICE)
        listing = client.get("/").text
        links = [
            html.unescape(h)
            for h in re.findall(r'class="open" href="([^"]+/pause\?[^"]+)"', listing)
        ]
        assert len(links) == 2
        pages = [client.get(link) for link in links]
        for page in pages:
            assert page.status_code == 200, page.text
            assert "<script>document" not in page.text and "<b>x</b>" not in page.text
            assert "unsafe-inline" not in page.headers["content-security-policy"]
        tool_page = next(p for p in pages if "Tool&#39;s pause" in p.text)
        assert "&lt;script&gt;document.title" in tool_page.text
        assert "t&lt;b&gt;x&lt;/b&gt;&amp;y=1#z" in tool_page.text
        assert "Refund the customer." in tool_page.text  # the thread's messages
        assert 'id="answer-form"' in tool_page.text and 'id="ran-form"' not in tool_page.text
        doubt_page = next(p for p in pages if "Call in doubt" in p.text)
        assert key in doubt_page.text and "acct-7" in doubt_page.text
        for form in ("ran-form", "not-run-form", "retry-form", "abandon-form"):
            assert f'id="{form}"' in doubt_page.text
        missing = client.get("/pause", params={"thread": "doubt", "call": "nope"})
        assert missing.status_code == 404 and "no pending pause" in missing.text
