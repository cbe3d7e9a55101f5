"""A notice sender process for the kill tests: ``python notice_sender.py STORE HOOK N``.

It sends the store's pending review notices to the webhook ``HOOK``; with N > 0 it
kills itself (SIGKILL, nothing runs after) right after the N-th notice was delivered
and before its position is recorded. It prints how many it sent.
"""

from __future__ import annotations

import os
import signal
import sys

from covonaut_es import open_store
from covonaut_es.providers import RetryPolicy
from covonaut_es.workers import NoticeSender, ReviewNotice, WebhookNotifier
from webhook_receiver import SECRET


def main() -> None:
    store_url, hook, kill_after = sys.argv[1], sys.argv[2], int(sys.argv[3])
    webhook = WebhookNotifier(hook, SECRET, retry=RetryPolicy(initial_delay=0.01))
    delivered = 0

    def notify(notice: ReviewNotice) -> None:
        nonlocal delivered
        webhook(notice)
        delivered += 1
        if delivered == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    with open_store(store_url) as store:
        print(NoticeSender(store, notify).send_pending())


if __name__ == "__main__":
    main()
