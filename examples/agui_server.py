"""An AG-UI endpoint for a chat front end, whose resumes are verified decisions.

A refund agent needs a reviewer's approval for every refund. Its thread is served by
``covonaut_es.agui.create_agui_app``: a chat front end (CopilotKit, or any AG-UI client)
POSTs a ``RunAgentInput`` and reads the run as AG-UI events over server-sent events. The
run pauses on two refunds at once and ends with two AG-UI interrupts, whose ids are the
review ids; the front end resumes with one decision for each, bound to the digest the
interrupt carries and signed by the reviewer's token.

``python examples/agui_server.py`` plays that exchange in-process with Starlette's test
client (no network, no model credentials: a scripted function plays the model) and
prints what the front end receives. ``python examples/agui_server.py --serve`` serves
the endpoint on http://127.0.0.1:8123/ (uvicorn, from the ``inbox`` extra) and prints a
reviewer token to resume with.
"""

from __future__ import annotations

import itertools
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import ag_ui.core as agui
import pydantic
from starlette.testclient import TestClient

from covonaut_es import (
    AgentConfig,
    HmacReviewerVerifier,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)
from covonaut_es.agui import create_agui_app

ORDERS = {"A-1": 30, "B-2": 45}
EVENTS: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(agui.Event)


def model(request: ProviderRequest) -> ProviderResponse:
    """Refund both orders at once; call each approved refund again; then report."""
    messages = request.messages
    if messages[-1].role is Role.USER:
        calls = tuple(
            ToolCall(f"refund-{order}", "refund", json.dumps({"order": order, "amount": amount}))
            for order, amount in ORDERS.items()
        )
        return ProviderResponse(content="I'll refund both orders.", tool_calls=calls)
    asked = max(i for i, m in enumerate(messages) if m.role is Role.ASSISTANT)
    calls_by_id = {call.id: call for call in messages[asked].tool_calls}
    results = [m for m in messages[asked + 1 :] if m.role is Role.TOOL]
    again = tuple(
        ToolCall(f"{r.tool_call_id}-run", "refund", calls_by_id[r.tool_call_id].arguments)
        for r in results
        if r.content.startswith("Approved") and r.tool_call_id in calls_by_id
    )
    if again:
        return ProviderResponse(tool_calls=again)
    return ProviderResponse(content="Done: " + "; ".join(r.content for r in results) + ".")


def refund(ctx: ToolContext, args: dict[str, Any]) -> str:
    assert ctx.approval is not None  # the runtime runs it on an approval only
    return f"refunded {args['amount']} EUR on {args['order']} ({ctx.approval.reviewer} approved)"


def make_config(thread_id: str) -> AgentConfig:
    schema = {
        "type": "object",
        "properties": {"order": {"type": "string"}, "amount": {"type": "number"}},
        "required": ["order", "amount"],
    }
    tool = Tool("refund", "Refund an order", schema, refund, requires_approval=True)
    return AgentConfig(provider=ScriptedProvider(respond=model), tools=[tool])


def events(response: Any) -> list[Any]:
    """The AG-UI events of a response, read with the protocol's own types."""
    frames = [f.removeprefix("data: ") for f in response.text.split("\n\n") if f.strip()]
    return [EVENTS.validate_json(frame) for frame in frames]


def show(received: list[Any]) -> None:
    """The events' types (a run of one type once, with its count), then the text."""
    types = [e.type.value for e in received if e.type is not agui.EventType.STATE_DELTA]
    runs = [(name, len(list(group))) for name, group in itertools.groupby(types)]
    print("  events:", " ".join(name if n == 1 else f"{name}x{n}" for name, n in runs))
    text = "".join(e.delta for e in received if isinstance(e, agui.TextMessageContentEvent))
    print("  text:", text)


def demo(store_path: Path) -> None:
    verifier = HmacReviewerVerifier(b"the reviewers' secret, 32 bytes or more")
    app = create_agui_app(open_store(f"sqlite:///{store_path}"), make_config, verifier)
    client = TestClient(app)
    ask = {
        "threadId": "support-42",
        "runId": "run-1",
        "messages": [{"id": "u-1", "role": "user", "content": "Refund my two orders."}],
    }
    print("1. The user asks; the run pauses on two reviews:")
    first = events(client.post("/", json=ask))
    show(first)
    interrupts = first[-1].outcome.interrupts
    for interrupt in interrupts:
        print(f"  interrupt {interrupt.id} for call {interrupt.tool_call_id}")

    print("2. A resume without a reviewer's token is refused, nothing recorded:")
    resume = [
        {
            "interruptId": interrupt.id,
            "status": "resolved",
            "payload": {"approved": True, "digest": interrupt.metadata["covonaut"]["digest"]},
        }
        for interrupt in interrupts
    ]
    refused = client.post("/", json={**ask, "runId": "run-2", "resume": resume})
    print(f"  HTTP {refused.status_code}: {refused.json()['error']}")

    print("3. The reviewer approves both, with their token:")
    token = verifier.issue_token("dana", ttl_seconds=600)
    resumed = client.post(
        "/",
        json={**ask, "runId": "run-3", "resume": resume},
        headers={"Authorization": f"Bearer {token}"},
    )
    finished = events(resumed)
    show(finished)
    print("  outcome:", finished[-1].outcome.type)


def serve() -> None:
    import uvicorn  # the inbox extra's server

    verifier = HmacReviewerVerifier(b"the reviewers' secret, 32 bytes or more")
    store = open_store(f"sqlite:///{Path(tempfile.gettempdir()) / 'agui-example.db'}")
    print("reviewer token:", verifier.issue_token("dana", ttl_seconds=3600))
    uvicorn.run(create_agui_app(store, make_config, verifier), host="127.0.0.1", port=8123)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        with tempfile.TemporaryDirectory() as directory:
            demo(Path(directory) / "threads.db")
