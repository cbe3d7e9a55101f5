"""The Python blocks of the README and of the documentation site, and every example,
run as documented."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from covonaut_es import open_store
from inbox_support import free_port
from support import run_python

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
GETTING_STARTED = ROOT / "docs" / "getting-started.md"
INBOX = ROOT / "docs" / "inbox.md"
MAKEFILE = ROOT / "Makefile"
# docs/providers.md calls the vendors' APIs: tests/test_provider_docs.py runs its blocks
# against recorded answers on a local server instead.
NEEDS_AN_API = {ROOT / "docs" / "providers.md"}
DOCUMENTS = [README, *(p for p in sorted((ROOT / "docs").glob("*.md")) if p not in NEEDS_AN_API)]


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


BLOCKS = [
    pytest.param(code, id=f"{path.relative_to(ROOT)}-{number}")
    for path in DOCUMENTS
    for number, code in enumerate(python_blocks(path), 1)
]


def test_the_site_pages_have_python_blocks() -> None:
    """The pages that moved out of the README still carry their examples."""
    pages = {path.name for path in DOCUMENTS if python_blocks(path)}
    assert {"README.md", "getting-started.md", "concepts.md", "human-review.md"} <= pages
    assert {"durability.md", "audits.md", "migrations.md", "operations.md"} <= pages
    assert "embedding.md" in pages


@pytest.mark.parametrize("code", BLOCKS)
def test_documented_python_block_runs(code: str, tmp_path: Path) -> None:
    """Each ```python block of README.md and docs/*.md runs without error in a fresh
    interpreter, in an empty directory."""
    # This checkout's sources, also when PYTHONPATH is relative to another directory.
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    run_python("-c", code, cwd=tmp_path, env=env)


def test_recovery_example_prints_the_three_lines() -> None:
    """examples/recovery.py prints exactly what docs/getting-started.md says."""
    result = run_python(ROOT / "examples" / "recovery.py")
    expected = re.search(r"prints\n\n```text\n(.*?)```", GETTING_STARTED.read_text(), flags=re.S)
    assert expected is not None
    assert result.stdout == expected.group(1)


def test_tracing_example_prints_the_two_linked_traces() -> None:
    """examples/tracing.py prints exactly the span trees docs/tracing.md shows: the run
    that paused for review, and the run that resumed it, linked to it."""
    result = run_python(ROOT / "examples" / "tracing.py")
    page = (ROOT / "docs" / "tracing.md").read_text()
    expected = re.search(r"it prints\n\n```text\n(.*?)```", page, flags=re.S)
    assert expected is not None
    assert result.stdout == expected.group(1)


def test_restart_recovery_example_runs_two_processes(tmp_path: Path) -> None:
    """examples/restart_recovery.py (make demo): a second process restores from the
    SQLite file after the first exited, and prints the example's three lines."""
    db = tmp_path / "threads.db"
    result = run_python(ROOT / "examples" / "restart_recovery.py", db)
    lines = result.stdout.splitlines()
    first = re.fullmatch(
        r"\[process 1, pid (\d+)\] run until the review interrupt, then exit", lines[0]
    )
    second = re.fullmatch(
        r"\[process 2, pid (\d+)\] restore from threads.db after process 1 exited", lines[2]
    )
    assert first and second and first.group(1) != second.group(1)
    assert [lines[1], lines[3], lines[4]] == [
        "Paused: host review required",
        "Restored: preview-1",
        "Review recorded. No external action was performed.",
    ]
    assert db.exists()


def test_branching_example_prints_both_outcomes_and_the_tree() -> None:
    """examples/branching.py: two branches of one review end differently."""
    result = run_python(ROOT / "examples" / "branching.py")
    lines = result.stdout.splitlines()
    assert "Approved branch: Outcome: paid 120, approved by rita@finance" in lines
    assert any(
        line.startswith("Rejected branch: Outcome: Rejected by rita@finance") for line in lines
    )
    assert lines[-2:] == [
        "invoice-17 [approved]",
        "  invoice-17/rejected (from version 5) [rejected]",
    ]


def test_embedded_domain_app_example_runs_on_a_sqlite_file(tmp_path: Path) -> None:
    """examples/embedded_domain_app.py pauses the review, approves the claim and the
    note to the agent together, and the agent resumes from the note."""
    result = run_python(ROOT / "examples" / "embedded_domain_app.py", "expenses.db", cwd=tmp_path)
    assert result.stdout.splitlines() == [
        "Paused: manager approval needed",
        "Approved by: maria",
        "Reimbursement queued: maria approved the claim for 42.50.",
    ]
    assert (tmp_path / "expenses.db").exists()


def test_embedded_system_example_projects_and_audits(tmp_path: Path) -> None:
    """examples/embedded_system.py: the follower counts the approvals per reviewer, and
    the audit finds the threads on both sides intact, on SQLite files as in memory; on
    files, their heads anchored by each side's saves, and the verifier docs/audits.md
    prints finds them intact too."""
    totals = ["maria: 2 approved, 195.75", "li: 1 approved, 9.99"]
    in_memory = run_python(ROOT / "examples" / "embedded_system.py", cwd=tmp_path)
    assert in_memory.stdout.splitlines() == [
        *totals,
        "audit review of acme: intact, 3 events, no head anchor",
        "audit ledger: intact, 4 events, no head anchor",
    ]
    on_files = run_python(ROOT / "examples" / "embedded_system.py", str(tmp_path), cwd=tmp_path)
    assert on_files.stdout.splitlines() == [
        *totals,
        "audit review of acme: intact, 3 events, head anchored",
        "audit ledger: intact, 4 events, head anchored",
        "docs verifier, payments.db: 3 threads, all intact",
        "docs verifier, approvals.db: 1 thread, all intact",
    ]


def test_approval_gate_example_audits_each_decision() -> None:
    """examples/approval_gate.py pays once, on the approval, and its audit names the
    reviewer and the operation digest of each decision."""
    result = run_python(ROOT / "examples" / "approval_gate.py")
    out = result.stdout
    assert out.count("bank: 120.00 EUR to ACME Ltd, approved by alice@finance") == 1
    audit = out.split("Audit of accounts-payable\n")[1]
    decisions = re.findall(r"(\S+@finance) (approved|rejected) send_payment", audit)
    assert decisions == [("bob@finance", "rejected"), ("alice@finance", "approved")]
    assert len(re.findall(r"digest jcs-sha256:[0-9a-f]{64}", audit)) == 2
    assert re.search(r"approval [0-9a-f]{32} used by call \S+", audit)


def test_run_on_approval_example_runs_the_edited_call_without_a_model_call() -> None:
    """examples/run_on_approval.py: the worker runs the edited payment once, the model is
    asked only for its answer, and the audit names the decision that ran the call."""
    out = run_python(ROOT / "examples" / "run_on_approval.py").stdout
    assert "Run paused: waits for a reviewer" in out
    (paid,) = re.findall(r"bank: (\d+) to ACME Ltd, key [0-9a-f]{32}, approved by rita", out)
    assert paid == "350" and "bank: 400" not in out
    assert "Model calls after the decision: 1" in out
    assert 'Answer: Done: {"paid":350}' in out
    (review,) = re.findall(r"rita approved review ([0-9a-f]{32})", out)
    assert f"review {review} ran call p1" in out and "call p1 succeeded" in out


def test_reviewer_queue_example_approves_from_the_command_line() -> None:
    """examples/reviewer_queue.py: a separate process keeps the queue; after a reviewer
    approves bob's payment on the command line, the queue lists the other two."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "reviewer_queue.py")],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    before, after = result.stdout.split("Queue after:")
    assert [line.split()[0] for line in before.splitlines()[1:4]] == ["ann", "bob", "cleo"]
    assert "approved  rita" in before
    assert [line.split()[0] for line in after.strip().splitlines()] == ["ann", "cleo"]


def test_worker_fleet_example_answers_every_thread_once() -> None:
    """examples/worker_fleet.py: two worker processes resume six threads as their
    reviews are decided; each is answered once, each approved refund paid once, and
    both workers exit 0 on SIGTERM."""
    result = run_python(ROOT / "examples" / "worker_fleet.py")
    assert "Every thread was answered exactly once." in result.stdout
    assert "exit codes [0, 0]" in result.stdout
    assert "WORKER" in result.stdout and "refunds 1" in result.stdout


def test_streaming_example_streams_commits_then_continues_a_cut_stream() -> None:
    """examples/streaming.py: the call's pieces arrive, then its commit, then the tool;
    the answer's pieces join to the committed answer; a stream left mid-answer is
    continued to the whole answer."""
    lines = run_python(ROOT / "examples" / "streaming.py").stdout.splitlines()
    pieces = [line for line in lines if line.startswith("  [call piece")]
    assert pieces == [
        "  [call piece forecast]",
        '  [call piece {"ci]',
        '  [call piece ty": "Ly]',
        '  [call piece on"}]',
    ]
    committed = lines.index("  [committed: calls call-1 to run]")
    started = lines.index("  [tool forecast starts for Lyon, its call committed]")
    assert lines.index(pieces[-1]) < committed < started
    assert "Tomorrow in Lyon: light rain, so take an umbrella." in lines
    assert lines[-2:] == [
        "Left after: 'The day after, '",
        "Continued: The day after, Lyon should be dry and mild.",
    ]


def test_agui_example_pauses_on_two_reviews_and_resumes_only_when_signed() -> None:
    """examples/agui_server.py: the run ends with two interrupts, an unsigned resume is
    refused with 401, the signed one runs both refunds and finishes."""
    lines = run_python(ROOT / "examples" / "agui_server.py").stdout.splitlines()
    assert lines[1].startswith("  events: RUN_STARTED STATE_SNAPSHOT TEXT_MESSAGE_START")
    assert lines[1].endswith("MESSAGES_SNAPSHOT STATE_SNAPSHOT RUN_FINISHED")
    assert len([line for line in lines if line.startswith("  interrupt ")]) == 2
    assert any(line.startswith("  HTTP 401: a resume decides reviews") for line in lines)
    assert lines[-2] == (
        "  text: Done: refunded 30 EUR on A-1 (dana approved); "
        "refunded 45 EUR on B-2 (dana approved)."
    )
    assert lines[-1] == "  outcome: success"


def test_the_readme_is_a_short_entry_into_the_site() -> None:
    """The README stays under 200 lines and points to the providers, the command line
    and the threat model in the documentation site."""
    text = README.read_text()
    assert len(text.splitlines()) < 200
    for page in ("docs/providers.md", "docs/cli.md", "docs/operations.md"):
        assert f"]({page}" in text, page


def _blocks(path: Path) -> list[str]:
    """The page's fenced code blocks and, between them, its runs of non-blank lines."""
    return re.findall(r"```.*?```|(?:(?!```)[^\n]+\n?)+", path.read_text(), flags=re.S)


@pytest.mark.parametrize(
    "path", [README, *sorted((ROOT / "docs").glob("*.md"))], ids=lambda path: path.name
)
def test_no_paragraph_begins_in_the_middle_of_a_sentence(path: Path) -> None:
    """A paragraph that begins in lower case or with punctuation continues the sentence
    a code block, table or heading before it interrupted, never a paragraph of prose:
    docs/providers.md had a paragraph begin with a stray "status 529)." (helper-190)."""
    previous = ""
    for block in _blocks(path):
        if re.match(r"[a-z),.;:]", block):
            assert previous.lstrip().startswith(("```", "|", "#")), block[:80]
        previous = block


def make_variable(name: str) -> str:
    """The default the Makefile gives ``name`` (``NAME ?= value``)."""
    match = re.search(rf"^{name}\s*\?=\s*(\S+)$", MAKEFILE.read_text(), flags=re.M)
    assert match is not None, name
    return match.group(1)


def test_make_demo_leaves_a_review_and_its_printed_commands_open_it_in_the_inbox(
    tmp_path: Path,
) -> None:
    """make demo's last step leaves a review pending in its store and prints two
    commands: the first, run verbatim, signs a token; the second, run verbatim (on a
    free port), serves an inbox that lists the review to the token's reviewer."""
    db = make_variable("DEMO_DB")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("COVONAUT_ES_REVIEWER_SECRET", None)
    result = run_python(ROOT / make_variable("DEMO_REVIEW"), db, cwd=tmp_path, env=env)
    with open_store(f"sqlite:///{tmp_path / db}") as store:
        (waiting,) = [t for t in store.thread_ids() if store.state_at(t).waiting_for]
    issue, serve = [
        line.strip() for line in result.stdout.splitlines() if " covonaut" in line.lower()
    ]
    assert shlex.split(issue)[-6:-4] == ["token", "issue"]
    assert shlex.split(serve)[-3:] == ["serve", "--store", f"sqlite:///{db}"]
    signed = subprocess.run(
        issue, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert signed.returncode == 0, signed.stderr
    port = free_port()
    process = subprocess.Popen(
        f"{serve} --port {port}", shell=True, cwd=tmp_path, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        auth = {"Authorization": f"Bearer {signed.stdout.strip()}"}
        deadline = time.monotonic() + 60
        while True:
            try:
                listed = httpx.get(f"http://127.0.0.1:{port}/api/reviews", headers=auth)
                break
            except httpx.TransportError:
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        assert listed.status_code == 200, listed.text
        (review,) = listed.json()
        assert (review["thread_id"], review["tool_name"]) == (waiting, "send_payment")
    finally:
        os.killpg(process.pid, signal.SIGINT)  # the shell's group: the shell and serve
        try:
            _, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
    assert "Finished server process" in stderr  # serve stopped cleanly on Ctrl-C


def test_the_readme_installs_the_inbox_and_the_docs_serve_the_demos_store() -> None:
    """The README's install line names the inbox extra, and the inbox page's "serve
    it" example serves the store make demo leaves."""
    install = next(line for line in README.read_text().splitlines() if "Install in" in line)
    assert "pip install 'covonaut-es[inbox]'" in install
    serve_it = INBOX.read_text().split("## Serve it", 1)[1]
    example = re.search(r"```sh\n(.*?)```", serve_it, flags=re.S)
    assert example is not None
    (store,) = re.findall(r"covonaut-es serve --store (\S+)", example.group(1))
    assert store == f"sqlite:///{make_variable('DEMO_DB')}"


def test_mcp_tools_example_closes_the_ticket_once_on_approval() -> None:
    """examples/mcp_tools.py: the read-only tool runs, the destructive one waits for a
    review naming its server and description, then runs once on the approval."""
    result = run_python(ROOT / "examples" / "mcp_tools.py")
    out = result.stdout
    assert "tool list_tickets: approval False" in out
    assert "review of helpdesk/close_ticket: Close a ticket for good." in out
    assert out.count("closed ticket 7 (idempotency key") == 1
    assert "pinned to helpdesk/close_ticket" in out


def test_typed_output_example_sends_a_refusal_back_and_restores_the_value() -> None:
    """examples/typed_output.py: a refused answer goes back with the reason, the valid
    one is the typed output, and a restored agent gives the same value back."""
    lines = run_python(ROOT / "examples" / "typed_output.py").stdout.splitlines()
    assert "Invalid enum value 'asap' - at `$.priority`" in lines[0]
    assert lines[1:4] == [
        "Output: Triage(priority='urgent', team='billing', summary='Charged twice for one order')",
        "Route to: billing with priority urgent",
        "Restored output equal: True",
    ]
    assert lines[4].startswith("Audit: answered with the typed value")


FILE_EXAMPLES = {
    "pending_review.py": (),  # its default, threads.db in the working directory
    "restart_recovery.py": ("threads.db",),
    "embedded_domain_app.py": ("expenses.db",),
    "embedded_system.py": ("stores",),
}
"""The examples that keep what they write in a file their arguments (or default) name."""


@pytest.mark.parametrize("script", FILE_EXAMPLES)
def test_an_example_run_again_on_the_file_it_left_runs_again(script: str, tmp_path: Path) -> None:
    """A new user runs an example a second time, on the file the first run left (the
    demo's last step again, for a fresh reviewer secret): it ran into its own thread
    and ended in a traceback (helper-242); each run now starts where it should."""
    if script == "embedded_system.py":
        (tmp_path / "stores").mkdir()
    for _ in range(2):
        result = run_python(ROOT / "examples" / script, *FILE_EXAMPLES[script], cwd=tmp_path)
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
