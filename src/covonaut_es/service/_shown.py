"""What a person outside the operator's team is told of an error."""

from __future__ import annotations

from covonaut_es.errors import StoreFileReplacedError, ThreadBusyError
from covonaut_es.store import Store


def shown_message(exc: Exception, store: Store) -> str:
    """``exc``'s message without ``store``'s location (its file, host or database) nor
    the process that holds a busy thread (its pid and host), which are the operator's
    business, not a reviewer's or a chat user's."""
    if isinstance(exc, StoreFileReplacedError):  # its message names the file
        return "the store's file was replaced while this server ran: it must be restarted"
    url = store.url
    text = str(exc)
    if isinstance(exc, ThreadBusyError) and exc.holder:
        text = text.replace(exc.holder, "another runner")
    # "store URL" first: the URL alone would make it "store the store".
    return text.replace(f"store {url}", "the store").replace(url, "the store")
