"""Golden v5-links: stores written by covonaut-es 4a620ad, whose links are ``v2.``/``k2.``
(over msgspec's sorted JSON) and whose operation digests are bare hex (ADR 0048). They
verify as they are; a review they left pending is approved and runs its call; the links
sealed after are ``v3.``/``k3.``; the verifier in docs/audits.md leaves threads that
begin in the older scheme to ``verify``.

The fixtures come from ``tests/fixtures/write_golden_stores.py`` run at that commit.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    HmacReviewerVerifier,
    ProviderResponse,
    ScriptedProvider,
    Tool,
    ToolCall,
    open_store,
)
from covonaut_es.domain import ThreadStatus
from covonaut_es.store._chain import KEYED, PUBLIC, scheme_of
from test_docs_chain_verifier import verifier

GOLDEN = Path(__file__).parent / "fixtures" / "golden" / "v5-links"
MANIFEST: dict[str, Any] = json.loads((GOLDEN / "manifest.json").read_text(encoding="utf-8"))
KEYS = MANIFEST["test_only_keys"]
PENDING = "golden-review-pending"


@pytest.mark.parametrize("kind", ["plain", "keyed"])
def test_links_and_digests_of_the_release_before_verify_authorize_and_go_on(
    tmp_path: Path, kind: str
) -> None:
    """Every thread verifies with its ``v2.``/``k2.`` links; the pending review, bound
    to a bare hex digest, is approved and its call runs once; the thread goes on in
    ``v3.``/``k3.`` and verifies; the documented verifier, which checks only the newer
    scheme, vouches for none of them and says where it stopped."""
    golden = MANIFEST["stores"][kind]
    db = tmp_path / golden["file"]
    shutil.copyfile(GOLDEN / golden["file"], db)
    keyed = "chain_key" in golden["options"]
    with open_store(f"sqlite:///{db}", **golden["options"]) as store:
        for thread, expected in golden["threads"].items():
            assert scheme_of(expected["chain_head"]).generation == 2
            assert store.verify(thread).ok, (thread, store.verify(thread).findings)
        (review_id,) = golden["threads"][PENDING]["pending_reviews"]
        request = store.state_at(PENDING).reviews[0].request
        assert not request.digest.startswith("jcs-sha256:")

        ran: list[Any] = []
        pay = Tool(
            "pay",
            "Pay",
            {"type": "object"},
            lambda ctx, args: ran.append(args),
            requires_approval=True,
        )
        reviewers = HmacReviewerVerifier(KEYS["reviewer_secret"].encode(), clock=lambda: 1.8e9)
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider(
                    [
                        ProviderResponse(tool_calls=(ToolCall("p2", "pay", '{"amount": 40}'),)),
                        ProviderResponse(content="Paid 40."),
                    ]
                ),
                tools=[pay],
                checkpoint=CheckpointSettings(store=store, thread_id=PENDING),
                reviewer_verifier=reviewers,
            )
        )
        agent.approve(review_id, reviewer=reviewers.issue_token("golden-reviewer", 3600))
        assert agent.resume() == "Paid 40."
        assert ran == [{"amount": 40}]
        state = store.state_at(PENDING)
        assert state.status is ThreadStatus.FINISHED
        assert scheme_of(store.load(PENDING).chain_head) == (KEYED if keyed else PUBLIC)
        assert store.verify(PENDING).ok, store.verify(PENDING).findings

    env = {"COVONAUT_CHAIN_KEY": KEYS["chain_key"]} if keyed else {}
    printed = subprocess.run(
        [sys.executable, "-I", "-S", str(verifier(tmp_path)), str(db)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    ).stdout
    # It vouches only for links it checks: these threads begin in the older scheme.
    scheme = "k3." if keyed else "v3."
    assert printed.splitlines() == [
        f"{thread}: not checked from version 1: its link is not {scheme}"
        for thread in sorted(golden["threads"])
    ]
