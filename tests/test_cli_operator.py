"""The operator's command line: what ``show``, ``reviews``, ``approve``, ``token``,
``export`` and ``--json`` tell a person or a script, run as a real process."""

from __future__ import annotations

import re

from covonaut_es import open_store
from test_cli_commands import covonaut, url  # noqa: F401  (url is a fixture)


def test_show_labels_a_call_held_for_review_as_never_ran(url: str) -> None:  # noqa: F811
    """show lists a call waiting for approval as awaiting review, not as in doubt."""
    with open_store(url) as store:
        (held,) = store.state_at("payment").open_calls
    lines = covonaut("show", "payment", store=url).stdout.splitlines()
    fields = dict([*re.split(r"\s{2,}", line, maxsplit=1), ""][:2] for line in lines)
    assert fields["in doubt"] == ""
    assert fields["awaiting review"] == f"{held.call.id} (never ran)"
