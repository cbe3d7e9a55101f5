"""The AG-UI endpoint under review policies: a resume whose decisions one of the
reviewer's scopes does not cover is refused whole, and under four eyes a first resume
records approvals in part, runs nothing, and ends waiting on the same interrupts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ag_ui.core as agui
import attrs
import pytest

from covonaut_es import AgentConfig, AgentThread, ReviewPolicy, Tool
from test_agui import Shop, approvals, assert_refused_and_nothing_recorded, paused, user_says


class PolicedShop(Shop):
    """The shop, its refunds under ``policy``."""

    def __init__(self, tmp_path: Path, policy: Any) -> None:
        self.policy = policy
        super().__init__(tmp_path)

    def make_config(self, thread_id: str) -> AgentConfig:
        config = super().make_config(thread_id)
        (refund,) = config.tools
        assert isinstance(refund, Tool)
        tool = Tool(refund.name, refund.description, refund.parameters, refund.func,
                    requires_approval=True, review=self.policy)  # fmt: skip
        return attrs.evolve(config, tools=[tool])

    def scoped(self, reviewer: str, *scopes: str) -> str:
        return self.verifier.issue_token(reviewer, ttl_seconds=600, scopes=scopes)


def by_amount(args: dict[str, Any]) -> ReviewPolicy:
    return ReviewPolicy(scopes=("refunds:large",) if args["amount"] > 40 else ("refunds",))


def test_a_resume_with_one_decision_outside_the_scopes_records_none(tmp_path: Path) -> None:
    """The reviewer may decide the small refund, not the large one: the resume is
    refused with the typed error's name, and neither decision is recorded."""
    shop = PolicedShop(tmp_path, by_amount)
    interrupts = paused(shop)
    body = {**user_says("chat-1", "Refund my two orders."), "resume": approvals(interrupts)}
    version = shop.version("chat-1")
    response = shop.post(body, shop.scoped("carol", "refunds"))
    assert_refused_and_nothing_recorded(shop, response, version)
    assert "ReviewerNotPermittedError" in response.text
    events = shop.run(body, shop.scoped("erin", "refunds", "refunds:large"))
    assert isinstance(events[-1], agui.RunFinishedEvent)
    assert sorted(r["order"] for r in shop.refunded) == ["A-1", "B-2"]


def test_under_four_eyes_the_first_resume_waits_and_the_second_runs(tmp_path: Path) -> None:
    """The first reviewer's resume records two approvals in part, runs nothing and
    finishes waiting on the same interrupts; a second reviewer's resume runs both."""
    shop = PolicedShop(tmp_path, ReviewPolicy(four_eyes=True))
    interrupts = paused(shop)
    body = {**user_says("chat-1", "Refund my two orders."), "resume": approvals(interrupts)}
    first = shop.run(body, shop.scoped("alice"))
    finished = first[-1]
    assert isinstance(finished, agui.RunFinishedEvent)
    assert isinstance(finished.outcome, agui.RunFinishedInterruptOutcome)
    assert {i.id for i in finished.outcome.interrupts} == {i.id for i in interrupts}
    assert shop.refunded == []
    in_part = [e for e in shop.store.history("chat-1")
               if isinstance(e, AgentThread.ReviewApprovedInPart)]  # fmt: skip
    assert len(in_part) == 2
    again = shop.run(body, shop.scoped("alice"))
    assert isinstance(again[-1], agui.RunErrorEvent)
    second = shop.run(body, shop.scoped("bob"))
    assert isinstance(second[-1], agui.RunFinishedEvent)
    assert sorted(r["order"] for r in shop.refunded) == ["A-1", "B-2"]


@pytest.mark.parametrize("digest", ["as shown", "a guess"])
def test_a_reviewer_outside_the_scopes_learns_nothing_from_a_digest(
    tmp_path: Path, digest: str
) -> None:
    """A reviewer whose scopes do not cover a review is refused for the scopes whatever
    digest the resume carries, as on every other surface: the endpoint compared digests
    first, so a refused guess told such a reviewer which operation the review was not
    about (helper-199)."""
    shop = PolicedShop(tmp_path, by_amount)
    interrupts = paused(shop)
    entries = approvals(interrupts)
    if digest == "a guess":  # on the large refund's, which the reviewer may not decide
        (large,) = [
            e for e, i in zip(entries, interrupts, strict=True) if i.tool_call_id == "call-B-2"
        ]
        large["payload"]["digest"] = "jcs-sha256:" + "0" * 64
    body = {**user_says("chat-1", "Refund my two orders."), "resume": entries}
    version = shop.version("chat-1")
    response = shop.post(body, shop.scoped("carol", "refunds"))
    assert_refused_and_nothing_recorded(shop, response, version)
    assert "ReviewerNotPermittedError" in response.text
