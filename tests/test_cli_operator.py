"""The operator's command line: what ``show``, ``reviews``, ``approve``, ``token``,
``export`` and ``--json`` tell a person or a script, run as a real process."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import example, given, settings

from covonaut_es import (
    ProviderRequest,
    ProviderResponse,
    ScriptedProvider,
    Tool,
    create_cipher_key,
    open_store,
)
from covonaut_es.cli._app import build_parser
from covonaut_es.cli._json import SCHEMAS
from covonaut_es.domain import thread_aggregate_id
from covonaut_es.errors import ProviderError
from covonaut_es.runtime import Agent, AgentConfig, CheckpointSettings, HmacReviewerVerifier
from support import call, converse
from test_cli import covonaut_es
from test_cli_commands import SECRET, covonaut, review_id, token, url  # noqa: F401  (url is a fixture)
from test_cli_pauses import run_dies_in_charge
from test_reviewer_ids import unshowable_ids


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
    after = datetime.now(UTC)  # a loaded machine starts the process slowly
    assert issued.returncode == 0, issued.stderr
    value = json.loads(issued.stdout)
    assert value["reviewer"] == "ann" and value["expires_at"].endswith("Z")
    expires = datetime.fromisoformat(value["expires_at"])
    ttl = timedelta(seconds=600)
    assert before + ttl - timedelta(seconds=1) < expires < after + ttl + timedelta(seconds=1)
    plain = covonaut("token", "issue", "--reviewer", "ann", "--ttl", "600").stdout.strip()
    decided = covonaut("approve", review_id(url), "--reviewer-token", plain, "--json", store=url)
    assert decided.returncode == 0, decided.stderr
    assert json.loads(decided.stdout)["reviewer"] == "ann"


@pytest.mark.parametrize(
    "command",
    [
        ("approve",),
        ("reject",),
        ("respond",),
        ("answer",),
        ("settle",),
        ("abandon",),
        ("retry",),
        ("token", "issue"),
        ("token",),
    ],
)
def test_help_says_where_the_reviewer_secret_comes_from(command: tuple[str, ...]) -> None:
    """The --help of every command a person runs, and of token, names the variable and
    how to make a secret."""
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


def pay_for(store_url: str, thread_id: str, arguments: dict[str, Any]) -> None:
    """Run a thread whose model calls ``pay`` (which needs approval) with ``arguments``."""
    pay = Tool("pay", "Pay", {"type": "object"}, lambda c, a: "paid", requires_approval=True)
    with open_store(store_url) as store:
        Agent(
            AgentConfig(
                provider=ScriptedProvider([call(("p1", "pay", json.dumps(arguments)))]),
                tools=[pay],
                reviewer_verifier=HmacReviewerVerifier(SECRET.encode()),
                checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            )
        ).run("pay")


def test_reviews_shows_arguments_and_kind_within_100_columns(url: str) -> None:  # noqa: F811
    """reviews shows each review's arguments (shortened to fit 100 columns); KIND tells
    a review from a plain interrupt, which has no review id to approve."""
    pay_for(url, "large", {"amount": 900, "memo": "x" * 300})
    lines = covonaut("reviews", store=url).stdout.splitlines()
    rows = {row["THREAD"]: row for row in table(lines)}
    assert list(rows["payment"]) == ["THREAD", "KIND", "REVIEW", "TOOL", "DETAILS"]
    assert (rows["payment"]["KIND"], rows["payment"]["DETAILS"]) == ("review", '{"amount":7}')
    assert rows["large"]["DETAILS"].startswith('{"amount":900,')
    assert rows["large"]["DETAILS"].endswith("\u2026")
    assert (rows["paused"]["KIND"], rows["paused"]["REVIEW"]) == ("interrupt", "")
    assert rows["paused"]["DETAILS"] == "human review required"
    assert all(len(line) <= 100 for line in lines)


def table(lines: list[str]) -> list[dict[str, str]]:
    """The rows of an aligned table, cut where its header's columns start."""
    starts = [m.start() for m in re.finditer(r"\S+", lines[0])]
    ends = [*starts[1:], None]
    return [
        {lines[0][s:e].strip(): line[s:e].strip() for s, e in zip(starts, ends, strict=True)}
        for line in lines[1:]
    ]


def test_reviews_json_carries_full_values(url: str) -> None:  # noqa: F811
    """reviews --json has the whole digest and arguments, and the kind of each item."""
    pay_for(url, "large", {"amount": 900, "memo": "x" * 300})
    listed = {
        r["thread_id"]: r for r in json.loads(covonaut("reviews", "--json", store=url).stdout)
    }
    with open_store(url) as store:
        (review,) = store.state_at("large").reviews
    assert (
        listed["large"]["digest"] == review.request.digest
        and len(review.request.digest) == len("jcs-sha256:") + 64
    )
    assert listed["large"]["arguments"] == {"amount": 900, "memo": "x" * 300}
    assert (listed["paused"]["kind"], listed["paused"]["review_id"]) == ("interrupt", None)


def test_threads_counts_what_reviews_lists(url: str) -> None:  # noqa: F811
    """threads' pending_reviews of each thread is the number of items reviews lists."""
    listed = json.loads(covonaut("reviews", "--json", store=url).stdout)
    counted = {
        r["thread_id"]: r["pending_reviews"]
        for r in json.loads(covonaut("threads", "--json", store=url).stdout)
    }
    assert counted == {t: sum(r["thread_id"] == t for r in listed) for t in counted}
    assert counted["paused"] == 1


def test_approve_with_thread_decides_a_forks_inherited_review(url: str) -> None:  # noqa: F811
    """approve --thread FORK decides the review the fork inherited, on the fork only;
    without --thread the command asks which thread is meant."""
    review = review_id(url)
    assert covonaut("fork", "payment", "--as", "retry", store=url).returncode == 0
    unsure = covonaut("approve", review, "--reviewer-token", token("ann"), store=url)
    assert unsure.returncode == 2 and "pass --thread" in unsure.stderr
    assert "payment, retry" in unsure.stderr
    decided = covonaut(
        "approve", review, "--thread", "retry", "--reviewer-token", token("ann"), store=url
    )
    assert decided.returncode == 0, decided.stderr
    with open_store(url) as store:
        assert [r.pending for r in store.state_at("retry").reviews] == [False]
        assert [r.pending for r in store.state_at("payment").reviews] == [True]


def test_an_exported_fork_imports_alone(url: str, tmp_path: Path) -> None:  # noqa: F811
    """export of a fork of a fork carries its ancestors' events up to each branch; it
    imports into an empty store, verifies, and reads as in the source."""
    assert covonaut("fork", "finished", "--at", "5", "--as", "retry", store=url).returncode == 0
    assert covonaut("fork", "retry", "--at", "4", "--as", "again", store=url).returncode == 0
    exported = covonaut("export", "again", store=url)
    assert exported.returncode == 0, exported.stderr
    other = f"sqlite:///{tmp_path / 'other.db'}"
    imported = covonaut("import", store=other, stdin=exported.stdout)
    assert imported.returncode == 0, imported.stderr
    with open_store(url) as source, open_store(other) as target:
        assert target.verify("again").ok
        assert target.state_at("again") == source.state_at("again")
    alone = covonaut("export", "again", "--without-ancestors", store=url).stdout
    refused = covonaut("import", store=f"sqlite:///{tmp_path / 'third.db'}", stdin=alone)
    assert refused.returncode == 2 and "export the fork with its ancestors" in refused.stderr


def test_errors_on_an_encrypted_store_name_the_thread(tmp_path: Path) -> None:
    """A record that does not decrypt is reported under the thread's id, not its
    stream's UUID, by a command naming the thread and by one listing threads."""
    secret_url = f"sqlite:///{tmp_path / 'secret.db'}"
    key = create_cipher_key()
    with open_store(secret_url, cipher_key=key) as store:
        converse(store, "a")
    with sqlite3.connect(tmp_path / "secret.db") as conn:
        conn.execute("UPDATE stored_events SET state = x'00' WHERE originator_version = 3")
    options = ["--store", secret_url, "--cipher-key-env", "K"]
    result = covonaut_es("show", "a", *options, env={"K": key})
    assert result.returncode == 2
    assert "of thread 'a' at version 3" in result.stderr
    assert str(thread_aggregate_id("a")) not in result.stderr
    listed = covonaut_es("threads", *options, env={"K": key})
    assert listed.returncode == 2 and "of thread 'a' at version 3" in listed.stderr


def test_every_command_prints_json_of_its_documented_shape(url: str, tmp_path: Path) -> None:  # noqa: F811
    """Each printing command's --json output validates against its schema in SCHEMAS,
    whose times are RFC 3339 UTC ending in Z; every schema is exercised."""
    review = review_id(url)
    with open_store(url) as store:
        run_dies_in_charge(store, "charge-doubt")  # a call in doubt, to settle
        with pytest.raises(ProviderError):  # a failed run, to retry
            Agent(
                AgentConfig(
                    provider=ScriptedProvider(respond=model_is_down),
                    checkpoint=CheckpointSettings(store=store, thread_id="failed"),
                )
            ).run("Hello.")
    exported = covonaut("export", "finished", store=url).stdout
    other = f"sqlite:///{tmp_path / 'other.db'}"
    runs = {
        "threads": ("threads",),
        "show": ("show", "payment"),
        "history": ("history", "payment"),
        "replay": ("replay", "finished", "--verify"),
        "reviews": ("reviews",),
        "fork": ("fork", "payment", "--as", "retry"),
        "tree": ("tree", "payment"),
        "approve": ("approve", review, "--thread", "payment", "--reviewer-token", token("a")),
        "reject": (
            "reject",
            review,
            "--thread",
            "retry",
            "--reviewer-token",
            token("b"),
            "--reason",
            "no",
        ),
        "answer": ("answer", "paused", "r1", "--answer", "ok", "--reviewer-token", token("c")),
        "settle": (
            "settle",
            "charge-doubt",
            "c1",
            "--not-run",
            "--reviewer-token",
            token("d"),
        ),
        "retry": ("retry", "failed", "--reviewer-token", token("e")),
        "abandon": ("abandon", "paused", "--reason", "done", "--reviewer-token", token("f")),
        "migrate": ("migrate", "--check"),
        "token issue": ("token", "issue", "--reviewer", "ann", "--ttl", "60"),
        "workers": ("workers",),
    }
    for command, args in runs.items():
        result = covonaut(*args, "--json", store=url)
        assert result.returncode == 0, (command, result.stderr)
        jsonschema.validate(json.loads(result.stdout), SCHEMAS[command])
    imported = covonaut("import", "--json", store=other, stdin=exported)
    jsonschema.validate(json.loads(imported.stdout), SCHEMAS["import"])
    assert set(SCHEMAS) == {*runs, "import"}


def model_is_down(request: ProviderRequest) -> ProviderResponse:
    msg = "the model is down"
    raise RuntimeError(msg)


def test_export_refuses_json_saying_it_writes_json_lines(url: str) -> None:  # noqa: F811
    """export --json is a usage error, not an option silently ignored."""
    result = covonaut("export", "finished", "--json", store=url)
    assert result.returncode == 2 and "JSON Lines already" in result.stderr
    assert result.stdout == ""


def test_history_and_replay_use_the_same_keys_and_times(url: str) -> None:  # noqa: F811
    """history --json and replay --json name an event's fields alike, times ending in Z."""
    history = json.loads(covonaut("history", "finished", "--json", store=url).stdout)
    replayed = json.loads(covonaut("replay", "finished", "--json", store=url).stdout)["events"]
    assert history == [{k: e[k] for k in history[0]} for e in replayed]
    assert all(e["recorded_at"].endswith("Z") for e in history)


def test_docs_cli_page_shows_every_schema_and_command() -> None:
    """docs/cli.md shows each command's JSON Schema exactly as SCHEMAS holds it, and has
    a section for every command the parser declares."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()
    shown = re.findall(r"<!-- schema: ([a-z ]+) -->\n\n```json\n(.*?)```", page, flags=re.S)
    assert {name: json.loads(block) for name, block in shown} == SCHEMAS
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    headings = set(re.findall(r"^## `([a-z]+)", page, flags=re.M))
    assert headings == set(commands)


def test_reviews_of_an_empty_queue_prints_the_header(tmp_path: Path) -> None:
    """reviews with nothing waiting prints the table's header only, and [] with --json."""
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    with open_store(empty) as store:
        converse(store, "a")
    table = covonaut("reviews", store=empty)
    assert table.returncode == 0, table.stderr
    assert table.stdout.split() == ["THREAD", "KIND", "REVIEW", "TOOL", "DETAILS"]
    assert json.loads(covonaut("reviews", "--json", store=empty).stdout) == []


@pytest.mark.parametrize("ttl", ["0", "-5", "nan", "inf", "1e12"])
def test_token_issue_refuses_a_ttl_that_is_no_lifetime(ttl: str) -> None:
    """--ttl must be a positive number of seconds up to a year and a day: exit 2."""
    result = covonaut("token", "issue", "--reviewer", "ann", "--ttl", ttl)
    assert result.returncode == 2 and "--ttl" in result.stderr
    assert "a token's lifetime is above 0" in result.stderr


def test_token_issue_prints_the_scopes_the_token_holds() -> None:
    """A scope given twice is held once, and --json prints the scopes the token holds:
    it printed each --scope as given, the repeat too (helper-162)."""
    scopes = ("--scope", "pay", "--scope", "ship", "--scope", "pay")
    issued = covonaut("token", "issue", "--reviewer", "ann", "--ttl", "60", *scopes, "--json")
    assert issued.returncode == 0, issued.stderr
    value = json.loads(issued.stdout)
    assert value["scopes"] == ["pay", "ship"]
    held = HmacReviewerVerifier(SECRET).identify(value["token"]).scopes
    assert held == ("pay", "ship")


def test_token_issue_refuses_a_blank_scope_saying_so() -> None:
    """An empty --scope is a usage error naming the scopes, and no token is printed."""
    result = covonaut("token", "issue", "--reviewer", "ann", "--ttl", "60", "--scope", "")
    assert result.returncode == 2 and result.stdout == ""
    assert "--scope" in result.stderr and "a scope has 1 to 200 characters" in result.stderr


def carried_by_argv(text: str) -> bool:
    """Whether a command line can hold ``text``: no NUL, and no surrogate but those a
    byte that is no UTF-8 decodes to."""
    try:
        return b"\x00" not in os.fsencode(text)
    except UnicodeEncodeError:
        return False


@settings(max_examples=4, deadline=None)
@example(scope="s\udcff")
@example(scope="pay\x1b[2J")
@example(scope="-\x7f")
@given(scope=unshowable_ids().filter(carried_by_argv))
def test_token_issue_refuses_a_scope_no_reviewer_id_could_be(scope: str) -> None:
    """Property: --scope follows --reviewer's rule: a byte that is no UTF-8, a control,
    a blank or a padded scope exits 2 in one line naming the scope, and no token is
    printed. A byte that is no UTF-8 was a UnicodeEncodeError traceback, exit 1, and a
    blank or control scope was signed (helper-158). The scope is given as
    ``--scope=VALUE``, the form that carries one beginning with ``-``."""
    result = covonaut("token", "issue", "--reviewer", "ann", "--ttl", "60", f"--scope={scope}")
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr.count("\n") == 1 and "--scope values: " in result.stderr
    assert "scope" in result.stderr.partition("--scope values: ")[2]


def test_token_issue_takes_a_secret_whose_bytes_are_no_utf8() -> None:
    """The secret is the variable's bytes, UTF-8 or not: a byte that is no UTF-8 (which
    Python's environment gives as a lone surrogate) failed with a UnicodeEncodeError
    traceback (helper-112); its token verifies under the same bytes."""
    secret = b"abcdefghijklmnopqrstuvwxyz0123456789\xff"
    env = {"COVONAUT_ES_REVIEWER_SECRET": os.fsdecode(secret)}
    result = covonaut_es("token", "issue", "--reviewer", "ann", "--ttl", "60", env=env)
    assert result.returncode == 0, result.stderr
    assert HmacReviewerVerifier(secret).verify(result.stdout.strip()) == "ann"


def test_token_issue_refuses_a_short_secret_saying_how_to_make_one() -> None:
    """A secret under 32 bytes is a usage error that shows how to make a good one."""
    env = {"COVONAUT_ES_REVIEWER_SECRET": "too short"}
    result = covonaut_es("token", "issue", "--reviewer", "ann", "--ttl", "60", env=env)
    assert result.returncode == 2
    assert "holds 9 bytes" in result.stderr and "secrets.token_urlsafe(32)" in result.stderr
