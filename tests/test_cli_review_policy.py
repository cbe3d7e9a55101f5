"""The command line under review policies, run as a real process: ``token issue
--scope`` signs the scopes a policy names, and ``approve`` takes the identity from the
token as the inbox does: refused outside its scopes (recorded nowhere), in part under
four eyes, and decided by a second reviewer."""

from __future__ import annotations

import json
from pathlib import Path

from covonaut_es import AgentThread, ReviewPolicy, open_store
from test_cli_commands import covonaut
from test_inbox_review_policy import paused_on


def decisions(url: str) -> list[str]:
    kinds = (AgentThread.ReviewDecided, AgentThread.ReviewApprovedInPart)
    with open_store(url) as store:
        return [type(e).__name__ for e in store.history("t") if isinstance(e, kinds)]


def issued(reviewer: str, *scopes: str) -> str:
    options = [option for scope in scopes for option in ("--scope", scope)]
    result = covonaut("token", "issue", "--reviewer", reviewer, "--ttl", "600", *options, "--json")
    assert result.returncode == 0, result.stderr
    value = json.loads(result.stdout)
    assert value["scopes"] == list(scopes)
    return str(value["token"])


def test_approve_follows_the_policy_with_the_tokens_scopes(tmp_path: Path) -> None:
    """Without the scope: exit 2, the reason on stderr, nothing recorded; with it, the
    first approval says it is partial and the second reviewer's decides."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as store:
        review = paused_on(store, "t", ReviewPolicy(scopes=("payments",), four_eyes=True))
    refused = covonaut("approve", review, "--reviewer-token", issued("alice"), store=url)
    assert refused.returncode == 2
    assert "may not decide review" in refused.stderr and "payments" in refused.stderr
    assert decisions(url) == []
    carol = issued("carol", "payments")
    first = covonaut("approve", review, "--reviewer-token", carol, "--json", store=url)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["partial"] is True
    again = covonaut("approve", review, "--reviewer-token", carol, store=url)
    assert again.returncode == 2 and "second, different reviewer" in again.stderr
    dave = issued("dave", "payments")
    final = covonaut("approve", review, "--reviewer-token", dave, "--json", store=url)
    assert final.returncode == 0, final.stderr
    assert "partial" not in json.loads(final.stdout)
    assert decisions(url) == ["ReviewApprovedInPart", "ReviewDecided"]


def test_reviews_shows_the_tools_description_neutralized(tmp_path: Path) -> None:
    """The table's details end with the tool's text for the reviewer, and --json gives
    it whole, their control characters written as escapes either way."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    policy = ReviewPolicy(describe=lambda args: "\x1b[2J!")
    with open_store(url) as store:
        paused_on(store, "t", policy)
    listed = covonaut("reviews", store=url)
    assert listed.returncode == 0, listed.stderr
    assert "\x1b" not in listed.stdout and '"DE02 1001"} \u2014 \\x1b[2J!' in listed.stdout
    as_json = covonaut("reviews", "--json", store=url)
    assert "\x1b" not in as_json.stdout
    (item,) = json.loads(as_json.stdout)
    assert item["data"]["rules"]["description"] == "\x1b[2J!"


def test_abandon_needs_the_scope_of_every_review_the_thread_waits_on(tmp_path: Path) -> None:
    """Without the review's scope, giving its thread up exits 2 naming the scope and
    records nothing; with it, the thread is given up."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as store:
        paused_on(store, "t", ReviewPolicy(scopes=("payments",)))
        version = store.state_at("t").version
    refused = covonaut(
        "abandon", "t", "--reason", "x", "--reviewer-token", issued("alice"), store=url
    )
    assert refused.returncode == 2 and "payments" in refused.stderr, refused.stderr
    with open_store(url) as store:
        assert store.state_at("t").version == version
    carol = issued("carol", "payments")
    given_up = covonaut("abandon", "t", "--reason", "x", "--reviewer-token", carol, store=url)
    assert given_up.returncode == 0, given_up.stderr
    with open_store(url) as store:
        assert store.state_at("t").status == "abandoned"
