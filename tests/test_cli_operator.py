"""The operator's command line: what ``show``, ``reviews``, ``approve``, ``token``,
``export`` and ``--json`` tell a person or a script, run as a real process."""

from __future__ import annotations

import importlib.metadata
import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from covonaut_es import open_store
from test_cli import covonaut_es
from test_cli_commands import covonaut, review_id, url  # noqa: F401  (url is a fixture)


def test_show_labels_a_call_held_for_review_as_never_ran(url: str) -> None:  # noqa: F811
    """show lists a call waiting for approval as awaiting review, not as in doubt."""
    with open_store(url) as store:
        (held,) = store.state_at("payment").open_calls
    lines = covonaut("show", "payment", store=url).stdout.splitlines()
    fields = dict([*re.split(r"\s{2,}", line, maxsplit=1), ""][:2] for line in lines)
    assert fields["in doubt"] == ""
    assert fields["awaiting review"] == f"{held.call.id} (never ran)"


def test_token_issue_prints_a_token_approve_accepts(url: str) -> None:  # noqa: F811
    """token issue signs with $COVONAUT_ES_REVIEWER_SECRET; approve verifies the token
    as that reviewer; --json names the reviewer and an RFC 3339 UTC expiry."""
    before = datetime.now(UTC)
    issued = covonaut("token", "issue", "--reviewer", "ann", "--ttl", "600", "--json")
    assert issued.returncode == 0, issued.stderr
    value = json.loads(issued.stdout)
    assert value["reviewer"] == "ann" and value["expires_at"].endswith("Z")
    expires = datetime.fromisoformat(value["expires_at"])
    assert timedelta(seconds=599) < expires - before < timedelta(seconds=601)
    plain = covonaut("token", "issue", "--reviewer", "ann", "--ttl", "600").stdout.strip()
    decided = covonaut("approve", review_id(url), "--reviewer-token", plain, "--json", store=url)
    assert decided.returncode == 0, decided.stderr
    assert json.loads(decided.stdout)[0]["reviewer"] == "ann"


@pytest.mark.parametrize("command", [("approve",), ("reject",), ("token", "issue"), ("token",)])
def test_help_says_where_the_reviewer_secret_comes_from(command: tuple[str, ...]) -> None:
    """approve, reject and token --help name the variable and how to make a secret."""
    shown = covonaut(*command, "--help").stdout
    assert "$COVONAUT_ES_REVIEWER_SECRET" in shown and "secrets.token_urlsafe(32)" in shown


def test_token_issue_without_a_secret_says_what_to_set() -> None:
    """Without the variable, token issue exits 2 naming it."""
    result = covonaut_es("token", "issue", "--reviewer", "a", "--ttl", "9")
    assert result.returncode == 2
    assert "set $COVONAUT_ES_REVIEWER_SECRET" in result.stderr


def test_version_prints_the_package_version() -> None:
    """covonaut-es --version prints the installed package's version."""
    result = covonaut("--version")
    assert result.stdout.split() == ["covonaut-es", importlib.metadata.version("covonaut-es")]
