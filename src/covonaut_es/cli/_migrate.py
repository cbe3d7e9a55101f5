"""``migrate --check``: read everything a store holds, upgrade it in memory as a read
would, and report what does not upgrade. It never writes, not even missing tables."""

from __future__ import annotations

import argparse
from pathlib import Path

from covonaut_es.audit import check_store, format_report
from covonaut_es.cli._command import EXIT_FAILURES, EXIT_OK, Subcommands, UsageError, add_command
from covonaut_es.cli._json import migration_report
from covonaut_es.cli._options import add_store_options, open_from
from covonaut_es.cli._output import add_json_option, print_json, terminal_progress
from covonaut_es.store import FileStateStore


def add_migrate_command(subcommands: Subcommands) -> None:
    """Declare ``migrate``."""
    parser = add_command(
        subcommands,
        "migrate",
        migrate,
        help_="check that everything in a store upgrades to this version's schemas",
        description=(
            "Read every event, snapshot and named state in a store, upgrade each in memory "
            "as a read would, and report counts per type and schema version and every "
            "record that does not upgrade. Stored data is never rewritten: upcasting "
            "happens on read, so checking is the only mode."
        ),
    )
    parser.add_argument(
        "--check",
        "--dry-run",
        dest="check",
        action="store_true",
        required=True,
        help="read and upgrade in memory only; nothing is ever written",
    )
    add_store_options(parser)
    add_json_option(parser)
    parser.add_argument(
        "--states", type=Path, metavar="DIR", help="also check a directory of named states"
    )


def migrate(args: argparse.Namespace) -> int:
    """``migrate --check``: exit 0 only if every record upgrades."""
    if args.states is not None and not args.states.is_dir():
        msg = f"--states {str(args.states)!r} is not a directory"
        raise UsageError(msg)
    # Failures name the store themselves, and main reports them as every command's.
    with open_from(args) as store, terminal_progress() as progress:  # never writes
        shown = store.url
        states = None if args.states is None else FileStateStore(args.states)
        report = check_store(store, state_files=states, progress=progress)
    if args.json:
        print_json(migration_report(report, source=shown))
    else:
        for line in format_report(report, source=shown):
            print(line)
    return EXIT_OK if report.ok else EXIT_FAILURES
