"""The Python blocks of the README and of the documentation site, and every example,
run as documented."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support import run_python

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
GETTING_STARTED = ROOT / "docs" / "getting-started.md"
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
        "  invoice-17/rejected (from version 9) [rejected]",
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


def test_approval_gate_example_audits_each_decision() -> None:
    """examples/approval_gate.py pays once, on the approval, and its audit names the
    reviewer and the operation digest of each decision."""
    result = run_python(ROOT / "examples" / "approval_gate.py")
    out = result.stdout
    assert out.count("bank: 120.00 EUR to ACME Ltd, approved by alice@finance") == 1
    audit = out.split("Audit of accounts-payable\n")[1]
    decisions = re.findall(r"(\S+@finance) (approved|rejected) send_payment", audit)
    assert decisions == [("bob@finance", "rejected"), ("alice@finance", "approved")]
    assert len(re.findall(r"digest [0-9a-f]{64}", audit)) == 2
    assert re.search(r"approval [0-9a-f]{32} used by call \S+", audit)


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


def test_the_readme_is_a_short_entry_into_the_site() -> None:
    """The README stays under 200 lines and points to the providers, the command line
    and the threat model in the documentation site."""
    text = README.read_text()
    assert len(text.splitlines()) < 200
    for page in ("docs/providers.md", "docs/cli.md", "docs/operations.md"):
        assert f"]({page}" in text, page


def test_mcp_tools_example_closes_the_ticket_once_on_approval() -> None:
    """examples/mcp_tools.py: the read-only tool runs, the destructive one waits for a
    review naming its server and description, then runs once on the approval."""
    result = run_python(ROOT / "examples" / "mcp_tools.py")
    out = result.stdout
    assert "tool list_tickets: approval False" in out
    assert "review of helpdesk/close_ticket: Close a ticket for good." in out
    assert out.count("closed ticket 7 (idempotency key") == 1
    assert "pinned to helpdesk/close_ticket" in out
