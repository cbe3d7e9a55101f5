"""A payment waiting for a reviewer, to open in the browser inbox (``make demo``'s last
step).

``send_payment`` requires approval. The run pauses with a review of one payment, to an
IBAN with a long memo, and the thread is left waiting in the SQLite file. The script
then prints the two commands that open the review in the inbox: one signs a reviewer
token, the other serves the inbox over the file; both carry the same freshly made
reviewer secret, which is good for this demo only.

Run it with ``python examples/pending_review.py [path/to/threads.db]`` (``make demo``
runs it on ``demo.db``); run again on the same file, it leaves another payment waiting,
in a thread of its own (``supplier-payments-2``...).
"""

from __future__ import annotations

import itertools
import json
import secrets
import shlex
import sys
from pathlib import Path
from typing import Any

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ProviderResponse,
    ScriptedProvider,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)

THREAD = "supplier-payments"
PAYMENT = {
    "amount": "18450.00",
    "currency": "EUR",
    "iban": "DE89370400440532013000",
    "payee": "Nordwind Logistik GmbH",
    "memo": (
        "Invoice NW-2026-11-0042: freight Hamburg to Rotterdam, 14 pallets, "
        "incl. customs clearance and the late-delivery credit agreed on 28 November"
    ),
}


def send_payment(ctx: ToolContext, args: dict[str, Any]) -> Any:
    """Runs only on an approval of exactly these arguments (never in this demo)."""
    return {"paid": args["amount"], "bank_reference": ctx.idempotency_key}


def cli() -> str:
    """How to run ``covonaut-es`` with this interpreter: its console script, relative to
    the working directory when inside it, else ``python -m covonaut_es``."""
    script = Path(sys.executable).with_name("covonaut-es")
    if not script.exists():
        return f"{shlex.quote(sys.executable)} -m covonaut_es"
    try:
        script = script.relative_to(Path.cwd())
    except ValueError:
        return shlex.quote(str(script))
    return shlex.quote(str(script) if script.parent != Path() else f"./{script}")


def main() -> None:
    db = Path(sys.argv[1]) if len(sys.argv) == 2 else Path("threads.db")
    url = f"sqlite:///{db}"
    tool = Tool(
        "send_payment",
        "Send a payment by SEPA credit transfer",
        {"type": "object", "required": sorted(PAYMENT)},
        send_payment,
        requires_approval=True,
    )
    call = ToolCall("call-1", "send_payment", json.dumps(PAYMENT))
    with open_store(url) as store:
        names = itertools.chain([THREAD], (f"{THREAD}-{n}" for n in itertools.count(2)))
        thread_id = next(name for name in names if not store.exists(name))
        agent = Agent(
            AgentConfig(
                model="offline",
                provider=ScriptedProvider([ProviderResponse(tool_calls=(call,))]),
                tools=[tool],
                checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            )
        )
        agent.run("Pay Nordwind's invoice NW-2026-11-0042.")
        (review,) = agent.pending_reviews
    secret = f"COVONAUT_ES_REVIEWER_SECRET={secrets.token_urlsafe(32)}"
    print(f"A payment of {PAYMENT['amount']} {PAYMENT['currency']} waits for review")
    print(f"(review {review.review_id} of thread {thread_id}, in {db}).")
    print("Open it in the reviewer inbox: sign a token, then serve the inbox,")
    print("browse to http://127.0.0.1:8700 and sign in with the token.")
    print()
    print(f"  {secret} {cli()} token issue --reviewer you@example.com --ttl 3600")
    print(f"  {secret} {cli()} serve --store {shlex.quote(url)}")


if __name__ == "__main__":
    main()
