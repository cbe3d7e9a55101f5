"""The one check every write of a store opened read-only meets first."""

from __future__ import annotations

from covonaut_es.errors import ReadOnlyStoreError


class WriteGuard:
    """Refuses writes to a store opened read-only (``?mode=ro``).

    Args:
        url: The store's redacted URL, for messages.
        read_only: Whether the store was opened read-only.
    """

    def __init__(self, url: str, *, read_only: bool) -> None:
        self.url = url
        self.read_only = read_only

    def refuse_if_read_only(self, refused: str) -> None:
        """Refuse a write before anything is done, on a store opened read-only: every
        write (a save, a lease, a fork, a named state, a submission) asks here first.

        Raises:
            ReadOnlyStoreError: The store was opened read-only.
        """
        if self.read_only:
            msg = (
                f"{self.url} was opened read-only: {refused}, and nothing was written; "
                "open it without ?mode=ro to change it"
            )
            raise ReadOnlyStoreError(msg)
