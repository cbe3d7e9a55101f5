"""A run request sent again (a client's retry after a lost response, a reload of a
stream cut short) runs its message once: the thread keeps the id the client gave each
message it ran (``Message.id``), and a message whose id it holds is not run again
(helper-220: the same request charged a card twice)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    HmacReviewerVerifier,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Store,
    ThreadStatus,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)
from covonaut_es.agui import create_agui_app
from covonaut_es.domain._thread import MAX_MESSAGE_ID
from covonaut_es.errors import InvalidRunInputError, ProviderServerError
from covonaut_es.messages import Message
from hostile_text import hostile_text

_OBJECT = {"type": "object"}


class Till:
    """An endpoint whose model charges the card once for each user message, and the
    charges its tool made."""

    def __init__(self, store: Store, *, system_prompt: str = "") -> None:
        self.store = store
        self.system_prompt = system_prompt
        self.charged: list[str] = []
        self.client = TestClient(
            create_agui_app(store, self.make_config, HmacReviewerVerifier(b"k" * 32))
        )

    @staticmethod
    def respond(request: ProviderRequest) -> ProviderResponse:
        last = request.messages[-1]
        if last.role is Role.USER:
            arguments = json.dumps({"for": last.content})
            return ProviderResponse(tool_calls=(ToolCall("c1", "charge", arguments),))
        return ProviderResponse(content="Charged.")

    def charge(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        self.charged.append(args["for"])
        return "ok"

    def make_config(self, thread_id: str) -> AgentConfig:
        tool = Tool("charge", "Charge the card", _OBJECT, self.charge)
        provider = ScriptedProvider(respond=self.respond)
        return AgentConfig(provider=provider, tools=[tool], system_prompt=self.system_prompt)

    def post(self, message_id: Any, text: str) -> Any:
        """A run request whose one message is the user's ``text`` under ``message_id``."""
        return self.send([{"id": message_id, "role": "user", "content": text}])

    def send(self, messages: Sequence[Any]) -> Any:
        """A run request of ``messages`` (the protocol's objects, the user's last)."""
        body = {"threadId": "t", "runId": f"run-{len(self.charged)}", "messages": list(messages)}
        # Escaped, so that a lone surrogate travels as JSON's \ud800 does.
        headers = {"content-type": "application/json"}
        return self.client.post("/", content=json.dumps(body), headers=headers)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sent=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=6))
@example(sent=["a", "a"])  # helper-220: a retry after the response was lost
@example(sent=["a", "b", "a"])  # a reload sending an earlier message last
def test_each_message_a_client_sends_runs_once_however_often_it_is_sent(
    tmp_path_factory: pytest.TempPathFactory, sent: list[str]
) -> None:
    """Requests whose last user messages carry the ids ``sent``, each sent as many
    times as it appears: each id's message is stored and charged once, in the order
    first sent, and every request ends its stream as the protocol says."""
    folder = tmp_path_factory.mktemp("till")
    with open_store(f"sqlite:///{folder / 'threads.db'}") as store:
        till = Till(store)
        for message_id in sent:
            response = till.post(message_id, f"pay for {message_id}")
            assert response.status_code == 200, response.text
            assert '"type":"RUN_FINISHED"' in response.text.replace(" ", ""), response.text
        first_sent = list(dict.fromkeys(sent))
        assert till.charged == [f"pay for {message_id}" for message_id in first_sent]
        users = [m for m in store.load("t").messages if m.role is Role.USER]
        assert [m.id for m in users] == first_sent


_ACTIONS = st.lists(
    st.one_of(
        st.tuples(
            st.just("new"),
            st.sampled_from(["a", "b", "msg-0", "msg-1", "msg-2", "msg-3", "msg-4", "msg-5"]),
            st.sampled_from(["yes", "pay"]),  # texts repeat, as "yes" does in a chat
        ),
        st.tuples(st.sampled_from(["retry", "reload", "reload alone"]), st.integers(0, 5)),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=_ACTIONS, system_prompt=st.sampled_from(["", "Be brief."]))
@example(actions=[("new", "a", "yes"), ("new", "msg-0", "pay")], system_prompt="")
@example(actions=[("new", "msg-0", "yes"), ("new", "msg-1", "yes")], system_prompt="Be brief.")
@example(actions=[("new", "a", "yes"), ("reload", 0), ("new", "msg-0", "yes")], system_prompt="")
@example(actions=[("new", "msg-2", "yes"), ("new", "b", "pay"), ("reload", 1)], system_prompt="")
def test_a_new_message_runs_whatever_its_id_and_one_sent_again_never_does(
    tmp_path_factory: pytest.TempPathFactory,
    actions: list[tuple[Any, ...]],
    system_prompt: str,
) -> None:
    """A client keeps the thread as each response's snapshot gives it (every message
    named ``msg-N`` by its position) and sends new messages after it, under ids of its
    own, some of that very form, some repeating the text of one before; sends a request
    again whole (a retry after a lost response); or sends one of the thread's user
    messages again under the id the snapshot gave it, after the history before it or
    alone (a reload). Each new message is charged once and keeps its id (a client id of
    the endpoint's form was read as a message sent before, and dropped unrun); nothing
    sent again is charged again."""
    folder = tmp_path_factory.mktemp("ids")
    with open_store(f"sqlite:///{folder / 'threads.db'}") as store:
        till = Till(store, system_prompt=system_prompt)
        sent: list[tuple[str, str]] = []  # (the client's id, the text) of each new message
        requests: list[list[Any]] = []  # the messages of each request sent
        thread: list[Any] = []  # the client's messages: the last snapshot's
        for action, *values in actions:
            if action == "new":
                message_id, text = values
                if message_id in {sent_id for sent_id, _ in sent}:
                    continue  # a client names each of its messages once
                sent.append((message_id, text))
                messages = [*thread, {"id": message_id, "role": "user", "content": text}]
            elif action == "retry":
                if not requests:
                    continue
                messages = requests[values[0] % len(requests)]
            else:
                users = [n for n, m in enumerate(thread) if m["role"] == "user"]
                if not users:
                    continue
                last = users[values[0] % len(users)]
                first = last if action == "reload alone" else 0
                messages = thread[first : last + 1]
            requests.append(messages)
            response = till.send(messages)
            assert response.status_code == 200, response.text
            assert '"type":"RUN_FINISHED"' in response.text.replace(" ", ""), response.text
            thread = _snapshot(response.text)
        assert till.charged == [text for _, text in sent]
        if sent:
            users = [m for m in store.load("t").messages if m.role is Role.USER]
            assert [(m.id, m.content) for m in users] == sent


def _snapshot(stream: str) -> list[Any]:
    """The messages of the stream's last ``MESSAGES_SNAPSHOT``, as a client keeps them."""
    snapshots = [
        json.loads(line.removeprefix("data:"))
        for line in stream.splitlines()
        if line.startswith("data:") and '"MESSAGES_SNAPSHOT"' in line.replace(" ", "")
    ]
    return list(snapshots[-1]["messages"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message_id=hostile_text(max_size=8) | st.text(min_size=250, max_size=300))
def test_a_message_id_is_kept_as_sent_or_refused_with_nothing_recorded(
    tmp_path_factory: pytest.TempPathFactory, message_id: str
) -> None:
    """Whatever id a client gives its message: text of 1 to 256 printable characters is
    run and kept exactly; any other is refused (400; 422 for a lone surrogate, no
    text) before anything is recorded, and never echoed."""
    folder = tmp_path_factory.mktemp("ids")
    with open_store(f"sqlite:///{folder / 'threads.db'}") as store:
        till = Till(store)
        response = till.post(message_id, "pay")
        if 0 < len(message_id) <= MAX_MESSAGE_ID and message_id.isprintable():
            assert response.status_code == 200, response.text
            (user,) = [m for m in store.load("t").messages if m.role is Role.USER]
            assert user.id == message_id and till.charged == ["pay"]
        else:
            assert response.status_code in (400, 422), response.text  # 422: not text
            assert not store.exists("t") and till.charged == []
            if len(message_id) > 3:
                assert message_id not in response.text


def test_a_run_given_a_message_id_the_thread_holds_is_refused_with_nothing_recorded() -> None:
    """The library's own runs: ``run(text, message_id=)`` keeps the id with the message,
    and the same id given again is refused before anything is recorded."""
    with open_store("memory://") as store:
        provider = ScriptedProvider([ProviderResponse(content="hello")] * 2)
        settings_ = CheckpointSettings(store=store, thread_id="t")
        agent = Agent(AgentConfig(provider=provider, checkpoint=settings_))
        assert agent.run("hi", message_id="m-1") == "hello"
        version = store.load("t").version
        with pytest.raises(InvalidRunInputError, match="holds a message of id 'm-1'"):
            agent.run("hi again", message_id="m-1")
        assert store.load("t").version == version
        assert store.replay_state("t") == store.state_at("t")


def test_a_message_without_an_id_is_encoded_as_before() -> None:
    """A message given no id is encoded byte for byte as before ``Message.id``, so
    nothing stored changes, and a stored message reads with none."""
    before = b'{"role":"user","content":"hi"}'
    assert msgspec.json.encode(Message(Role.USER, "hi")) == before
    assert msgspec.json.decode(before, type=Message) == Message(Role.USER, "hi", id=None)


def test_a_request_whose_run_failed_runs_again_when_sent_again(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The provider fails the first run; the client sends the same request again, as
    it would after any error: the thread goes on from its message, once stored, and
    answers (it was read as a retry of a message already run, and reported success
    with no answer: helper-224)."""
    asked = [0]

    def respond(request: ProviderRequest) -> ProviderResponse:
        asked[0] += 1
        if asked[0] == 1:
            raise ProviderServerError("the provider answered 503")
        return ProviderResponse(content="Here is your answer.")

    folder = tmp_path_factory.mktemp("failed")
    with open_store(f"sqlite:///{folder / 'threads.db'}") as store:
        send = _sender(store, AgentConfig(provider=ScriptedProvider(respond=respond)), "hello")
        assert '"RUN_ERROR"' in send().text.replace(" ", "")
        assert "Here is your answer." in send().text
        thread = store.load("t")
        assert thread.status is ThreadStatus.FINISHED and asked[0] == 2
        assert [m.id for m in thread.messages if m.role is Role.USER] == ["u-1"]


class _Count(msgspec.Struct):
    n: int


def test_a_request_whose_run_failed_after_a_correction_runs_again_when_sent_again(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The model's typed answer is refused, which adds the correction as a user message
    of the run's own (no id), then the provider fails: the client's request sent again
    goes on from the thread, once (it was taken for an older message than the run's, and
    nothing ran, with the run reported finished; helper-230)."""
    asked = [0]

    def respond(request: ProviderRequest) -> ProviderResponse:
        asked[0] += 1
        if asked[0] == 2:
            raise ProviderServerError("the provider answered 503")
        return ProviderResponse(content="not a count" if asked[0] == 1 else '{"n": 1}')

    folder = tmp_path_factory.mktemp("corrected")
    with open_store(f"sqlite:///{folder / 'threads.db'}") as store:
        config = AgentConfig(provider=ScriptedProvider(respond=respond), output_type=_Count)
        send = _sender(store, config, "count")
        assert '"RUN_ERROR"' in send().text.replace(" ", "")
        assert store.load("t").status is ThreadStatus.ERROR
        send()
        thread = store.load("t")
        assert thread.status is ThreadStatus.FINISHED and asked[0] == 3
        assert [m.id for m in thread.messages if m.role is Role.USER] == ["u-1", None]


def _sender(store: Store, config: AgentConfig, text: str) -> Callable[[], Any]:
    """Sends, each time it is called, the one request of user message ``u-1`` of
    ``text`` to an endpoint running every thread with ``config``."""
    client = TestClient(create_agui_app(store, lambda t: config, HmacReviewerVerifier(b"k" * 32)))
    messages = [{"id": "u-1", "role": "user", "content": text}]
    return lambda: client.post("/", json={"threadId": "t", "runId": "r", "messages": messages})
