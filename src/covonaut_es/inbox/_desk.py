"""The reviewer's desk: what the inbox reads and records, free of HTTP.

:class:`ReviewDesk` lists what waits for a person from the reviewer queue (reviews to
decide, tools' pauses to answer, calls in doubt to settle), finds one review or pause as
its thread records it, gathers a thread's history, and records what reviewers do through
the service layer (:class:`~covonaut_es.service.ThreadService`), under the
:class:`~covonaut_es.service.Reviewer` the request's authentication established. What it
recorded is left out of its listings until its queue has caught up with the save. Every
method blocks; the web layer runs them in worker threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, TypeVar

import attrs
import msgspec

from covonaut_es import _logs
from covonaut_es.domain import (
    Pause,
    PauseKind,
    Review,
    ReviewDecision,
    ReviewRules,
    ThreadState,
    ThreadTree,
    may_act_on_call,
    may_decide,
)
from covonaut_es.errors import (
    AmbiguousReviewError,
    CompressionDictionaryError,
    CovonautError,
    MissingUpcasterError,
    ReadOnlyStoreError,
    ReviewExpiredError,
    ReviewNotFoundError,
    SchemaVersionError,
    SerializationError,
    StoreUnavailableError,
    ThreadNotFoundError,
)
from covonaut_es.inbox._items import (
    Page,
    PauseView,
    PendingItem,
    ReviewItem,
    ThreadView,
)
from covonaut_es.messages import Message
from covonaut_es.projections import (
    EVERY_ITEM,
    MAX_PAGE_SIZE,
    PendingReview,
    QueueFilter,
    QueuePage,
    ReviewQueue,
)
from covonaut_es.projections._follower import QueueFollower
from covonaut_es.projections._items import QUEUE_EVENT_TYPES, QUEUE_FOLLOWER
from covonaut_es.service import (
    Reviewer,
    ReviewerVerifier,
    ReviewSubmission,
    Settlement,
    ThreadService,
    held_review,
    listed_pause_tokens,
    pause_token,
    shown_message,
)
from covonaut_es.store import AuditEntry, Store

T = TypeVar("T")

_REVIEWS = QueueFilter(kind=PauseKind.REVIEW)

RECENT_MESSAGES = 8
"""How many of a thread's last messages a review or pause page shows."""

CALLS_KEPT = 65_536
"""The pauses on calls whose reviews a desk keeps, the least recently listed forgotten
first."""


log = _logs.logger(__name__)


class ReviewDesk:
    """Reads the queue and the store, and records what verified reviewers do.

    What the desk records is left out of its listings until its queue has caught up
    with the store's log as it stood right after the save: the server that recorded a
    change never lists the item as pending afterwards, however far its queue lags.

    Args:
        store: The store the pauses' threads live in.
        queue: The reviewer queue of that store, followed by the caller.
        verifier: Establishes the reviewer of every request from its credential.
    """

    def __init__(self, store: Store, queue: ReviewQueue, verifier: ReviewerVerifier) -> None:
        self.store = store
        self.queue = queue
        self.verifier = verifier
        self.service = ThreadService(store, verifier=verifier, reviews=queue)
        # (thread id, item id, or None for every item of the thread) -> log position
        self._recorded: dict[tuple[str, str | None], int] = {}
        self._lock = threading.Lock()
        self._follower: QueueFollower | None = None
        # (thread id, call id, paused at) -> the reviews naming the call
        self._naming: OrderedDict[tuple[str, str, datetime], tuple[Review, ...]] = OrderedDict()

    def follow_with(self, follower: QueueFollower) -> None:
        """Check ``follower``, the one keeping the queue current, before every listing:
        while its runner is stopped on an error (a database session ended, the store's
        file replaced, a damaged page), every listing raises that it stopped instead of
        showing a queue that no longer changes, and :meth:`following` says so."""
        self._follower = follower

    def following(self) -> Exception | None:
        """What stopped the runner keeping the queue current, while it is stopped on an
        error (see :meth:`QueueFollower.stopped`)."""
        return None if self._follower is None else self._follower.stopped()

    def _check_following(self) -> None:
        stopped = self.following()
        if stopped is not None:
            assert self._follower is not None  # only a follower tells of a stop
            msg = (
                f"the reviewer queue stopped following the store "
                f"({shown_message(stopped, self.store)}), so what it lists would no longer "
                f"change; it starts following again every {self._follower.restart_seconds:g} s: "
                "try again shortly"
            )
            raise StoreUnavailableError(msg) from stopped

    # Reading ------------------------------------------------------------------------

    def reviewer(self, credential: Any) -> Reviewer:
        """The reviewer ``credential`` verifies as (one verification).

        Raises:
            ReviewerNotVerifiedError: It does not verify.
        """
        return self.service.reviewer(credential)

    def position(self) -> int:
        """The queue's log position: it changes whenever the queue may have."""
        self._check_following()
        return self.queue.position()

    def listing(
        self,
        reviewer: Reviewer | None = None,
        *,
        after: str | None = None,
        limit: int = MAX_PAGE_SIZE,
        only: QueueFilter = EVERY_ITEM,
        newest_first: bool = False,
    ) -> QueuePage:
        """One page of the pauses the queue holds (read by key from its index, after the
        cursor ``after``), less those this desk recorded a change to that the queue has
        not caught up with yet; with ``reviewer``, less the reviews their scopes do not
        let them decide.

        Raises:
            InvalidPageRequestError: The cursor or the limit is not one the queue serves.
        """
        self._check_following()
        waiting = self._waiting()  # before the page: the page is at least as new
        states: dict[str, ThreadState | None] = {}  # read once per listing

        def shown(item: PendingReview) -> bool:
            if (item.thread_id, item.item_id) in waiting or (item.thread_id, None) in waiting:
                return False
            if reviewer is None:
                return True
            if item.review_id:
                return item.listed_to(reviewer.scopes)
            # A call in doubt or a tool's pause shows its call: listed to whom may act on it.
            naming = self._call_reviews(item, states)
            return naming is not None and may_act_on_call(naming, reviewer.scopes)

        page = self.queue.page(
            after=after, limit=limit, only=only, newest_first=newest_first, where=shown
        )
        if reviewer is None:
            return page
        items = tuple(self._parent_shown(item, reviewer, states) for item in page.items)
        return msgspec.structs.replace(page, items=items)

    def _parent_shown(
        self, item: PendingReview, reviewer: Reviewer, states: dict[str, ThreadState | None]
    ) -> PendingReview:
        """``item`` naming no thread ``reviewer`` may not see (:func:`may_see`), as the
        fork's page names none: the thread a fork inherited it from is left out, and an
        inherited review's request data, which names the thread it was asked in (a
        parent, or further up), names the fork instead, the thread it waits in."""
        if item.branch_parent is None:
            return item
        hidden = self._hidden_from(reviewer, states)
        parent = None if hidden(item.branch_parent) else item.branch_parent
        data = item.data
        if isinstance(data, dict) and _names_another(data, item.thread_id, hidden):
            data = {**data, "thread_id": item.thread_id}
        return msgspec.structs.replace(item, branch_parent=parent, data=data)

    def _hidden_from(
        self, reviewer: Reviewer, states: dict[str, ThreadState | None]
    ) -> Callable[[str], bool]:
        """Whether ``reviewer`` may not see a thread (:func:`may_see`; one that does not
        read is hidden), each thread read once into ``states``, the threads a listing or
        a page has read."""

        def hidden(thread_id: str) -> bool:
            if thread_id not in states:
                states[thread_id] = self._readable(thread_id)
            state = states[thread_id]
            return state is None or not may_see(state, reviewer)

        return hidden

    def _call_reviews(
        self, item: PendingReview, states: dict[str, ThreadState | None]
    ) -> tuple[Review, ...] | None:
        """The reviews naming the call a pause is on (:meth:`ThreadState.reviews_naming`),
        or None when its thread does not read. Kept per pause, since no review of its
        call is asked or decided while it waits: a listing that counts every item loads
        each thread once, not at every request. ``states``: the threads this listing
        has read."""
        key = (item.thread_id, item.item_id, item.requested_at)
        with self._lock:
            if key in self._naming:
                self._naming.move_to_end(key)
                return self._naming[key]
        if item.thread_id not in states:
            states[item.thread_id] = self._readable(item.thread_id)
        state = states[item.thread_id]
        if state is None:
            return None
        naming = state.reviews_naming(item.tool_call_id)
        with self._lock:
            self._naming[key] = naming
            if len(self._naming) > CALLS_KEPT:
                self._naming.popitem(last=False)
        return naming

    def _readable(self, thread_id: str) -> ThreadState | None:
        """The thread's state, or None when it does not read (damaged): its pauses are
        then listed to no reviewer whose scopes must be checked against it."""
        try:
            return self.store.state_at(thread_id)
        except CovonautError:
            return None

    def pending(
        self, reviewer: Reviewer | None = None, *, only: QueueFilter = EVERY_ITEM
    ) -> Iterator[PendingReview]:
        """As :meth:`listing`, every page in turn, oldest first, read as it is iterated."""
        after: str | None = None
        while True:
            page = self.listing(reviewer, after=after, only=only)
            yield from page.items
            if page.next_cursor is None:
                return
            after = page.next_cursor

    def _waiting(self) -> set[tuple[str, str | None]]:
        """The items recorded here that the queue has not caught up with; forgets the
        others."""
        with self._lock:
            if not self._recorded:
                return set()
            recorded = dict(self._recorded)
        position = self.queue.position()
        waiting = {key for key, at in recorded.items() if at > position}
        # The queue tracks its own events only: past the last of them, it is current.
        if waiting and not self.store.log.has_events_after(
            position, *QUEUE_EVENT_TYPES, follower=QUEUE_FOLLOWER
        ):
            waiting = set()
        with self._lock:
            for key, at in recorded.items():
                if key not in waiting and self._recorded.get(key) == at:
                    del self._recorded[key]
        return waiting

    def reviews(
        self, reviewer: Reviewer, *, after: str | None = None, limit: int = MAX_PAGE_SIZE
    ) -> tuple[tuple[ReviewItem, ...], str | None]:
        """One page of the pending review requests ``reviewer`` may decide, oldest
        first, and the cursor of the next page (None on the last)."""
        page = self.listing(reviewer, after=after, limit=limit, only=_REVIEWS)
        return tuple(ReviewItem.pending(i) for i in page.items), page.next_cursor

    def pauses(
        self, reviewer: Reviewer, *, after: str | None = None, limit: int = MAX_PAGE_SIZE
    ) -> tuple[tuple[PendingItem, ...], str | None]:
        """One page of the pauses waiting for a person, of every kind, oldest first
        (reviews only if ``reviewer`` may decide them), each with its token as its
        thread records it now (one load per thread of the page), and the cursor of the
        next page (None on the last)."""
        page = self.listing(reviewer, after=after, limit=limit)
        tokens = listed_pause_tokens(self.store, page.items)
        items = tuple(
            attrs.evolve(PendingItem.queued(i), pause=t)
            for i, t in zip(page.items, tokens, strict=True)
        )
        return items, page.next_cursor

    def page(
        self, reviewer: Reviewer, *, thread: str = "", tool: str = "", kind: str = "",
        newest_first: bool = False, number: int = 1, size: int = 50,
    ) -> Page:  # fmt: skip
        """One numbered page of the pending pauses ``reviewer`` may act on, filtered by
        thread, tool and kind in the view's query (only the page's items are converted;
        the count of all matching items reads their keys)."""
        only = QueueFilter(
            thread_id=thread or None, tool_name=tool or None, kind=PauseKind(kind) if kind else None
        )
        number = max(1, number)
        start = (number - 1) * size
        shown: list[PendingItem] = []
        total = 0
        after: str | None = None
        while True:
            listed = self.listing(reviewer, after=after, only=only, newest_first=newest_first)
            for item in listed.items:
                if start <= total < start + size:
                    shown.append(PendingItem.queued(item))
                total += 1
            if listed.next_cursor is None:
                return Page(tuple(shown), total, number, size)
            after = listed.next_cursor

    def review(
        self, review_id: str, thread_id: str | None = None, *, reviewer: Reviewer
    ) -> ReviewItem:
        """The review with that id, as its thread records it now, if ``reviewer`` may
        decide it: one outside their scopes is shown them no more than it is listed.

        Raises:
            ReviewNotFoundError: No such review (in that thread) that they may see: the
                same error, whether the review, or the thread named, exists or not.
            AmbiguousReviewError: Pending in several threads and none named, for a
                review they may decide.
        """
        where = "" if thread_id is None else f" in thread {thread_id!r}"
        hidden = ReviewNotFoundError(
            f"no review {review_id!r}{where} that reviewer {reviewer.id!r} may decide"
        )
        try:
            found = self.service.find_review(review_id, thread_id=thread_id)
        except AmbiguousReviewError as exc:  # which threads hold it, told only to whom may see it
            held = held_review(self.store, review_id, exc)
            if held is None or not _allows(held.request.rules, reviewer):
                raise hidden from None
            raise
        except (ReviewNotFoundError, ThreadNotFoundError):
            raise hidden from None
        except SerializationError as exc:  # its rows name the review
            if self._listed(review_id, thread_id, reviewer):  # they know of it already
                raise
            log.warning("review %r: its thread does not read: %s", review_id, exc)
            raise hidden from None
        if not _allows(found.review.request.rules, reviewer):
            raise hidden
        pending = found.review.decision is None
        if pending and found.review.request.deadline and self._expire_due(found.thread_id):
            found = self.service.find_review(review_id, thread_id=found.thread_id)
        only = QueueFilter(thread_id=found.thread_id, kind=PauseKind.REVIEW)
        in_thread = self.queue.page(only=only).items
        queued = next((item for item in in_thread if item.review_id == review_id), None)
        return self._inherited_shown(ReviewItem.recorded(found, queued), reviewer)

    def _inherited_shown(self, item: ReviewItem, reviewer: Reviewer) -> ReviewItem:
        """``item`` naming no thread ``reviewer`` may not see, as :meth:`_parent_shown`
        does for a listing: a decision or approval a fork inherited names the thread it
        was recorded in (a parent, or further up), and names the fork instead, the thread
        it is shown in; the fork's parent is left out."""
        hidden = self._hidden_from(reviewer, {})

        def shown(decision: ReviewDecision) -> ReviewDecision:
            if decision.thread_id == item.thread_id or not hidden(decision.thread_id):
                return decision
            return msgspec.structs.replace(decision, thread_id=item.thread_id)

        parent = item.branch_parent
        return attrs.evolve(
            item,
            decision=None if item.decision is None else shown(item.decision),
            approvals=tuple(shown(approval) for approval in item.approvals),
            branch_parent=None if parent is None or hidden(parent) else parent,
        )

    def messages(self, thread_id: str, *, reviewer: Reviewer) -> tuple[Message, ...] | None:
        """The thread's last messages, for context; None when they are hidden from
        ``reviewer`` (:func:`may_see`)."""
        return _recent_messages(self.store.state_at(thread_id), reviewer)

    def pause(self, thread_id: str, tool_call_id: str, *, reviewer: Reviewer) -> PauseView | None:
        """The pending pause on that call, as the thread records it now; None when the
        thread has none (it resumed, or never paused there) and ``reviewer`` may see it.

        Raises:
            ThreadNotFoundError: No such thread, or one that does not read; or the call
                is governed by a review outside ``reviewer``'s scopes
                (:func:`_may_see_call`), or the thread has no pause on it and they may
                not see the thread (:func:`may_see`): the same error, so that they learn
                of neither the thread nor the review.
        """
        hidden = _no_pause(thread_id, tool_call_id, reviewer)
        state = self._shown_state(thread_id, hidden, reviewer)
        if not _may_see_call(state, tool_call_id, reviewer):
            raise hidden
        on_call = _pauses_shown(state, tool_call_id, reviewer)
        if not on_call:
            if not may_see(state, reviewer):
                raise hidden
            return None
        # A call held for review that is also a tool's pause is answered here first.
        pause = next((p for p in on_call if p.kind is not PauseKind.REVIEW), on_call[0])
        call = next((c for c in state.open_calls if c.call.id == tool_call_id), None)
        view = PauseView(
            thread_id=thread_id,
            status=str(state.status),
            pause=pause,
            call=call if pause.kind is PauseKind.IN_DOUBT else None,
            messages=_recent_messages(state, reviewer),
            token=pause_token(state.messages, pause),
            actionable=pause in state.awaiting_person,
        )
        return view

    def thread(self, thread_id: str, *, reviewer: Reviewer) -> ThreadView:
        """The thread page's content, if ``reviewer`` may decide every review the
        thread asked for: its timeline shows each review's operation, and one outside
        their scopes is shown them no more than it is listed.

        Raises:
            ThreadNotFoundError: No such thread that they may see.
        """
        hidden = ThreadNotFoundError(
            f"no thread {thread_id!r} that reviewer {reviewer.id!r} may see"
        )
        state = self._shown_state(thread_id, hidden, reviewer)
        if not may_see(state, reviewer):
            raise hidden
        root = self.store.path_to_root(thread_id)[-1]
        tree = self.store.tree(root)
        unseen = frozenset(  # the thread itself they may see: loaded once, above
            t for t in _threads_of(tree) if t != thread_id and not self._may_see(t, reviewer)
        )
        return ThreadView(
            thread_id=thread_id,
            status=str(state.status),
            timeline=tuple(_unnamed(e, unseen) for e in self.store.replay(thread_id)),
            checkpoints=state.checkpoints,
            tree=tree,
            audit=self.store.verify(thread_id),
            hidden=unseen,
        )

    def _listed(self, review_id: str, thread_id: str | None, reviewer: Reviewer) -> bool:
        """Whether ``reviewer``'s queue lists the review (in ``thread_id``, when
        named)."""
        threads = (
            (thread_id,) if thread_id else self.queue.threads_with_review(review_id, self.store)
        )
        return any(
            item.review_id == review_id
            for thread in threads or ()
            for item in self.listing(reviewer, only=QueueFilter(thread_id=thread)).items
        )

    def _shown_state(
        self, thread_id: str, hidden: ThreadNotFoundError, reviewer: Reviewer
    ) -> ThreadState:
        """The thread's state, for a page that shows it to ``reviewer``; ``hidden`` for a
        thread that does not exist, or that does not read and whose pauses their queue
        does not list (its refusal names its rows, the operator's to read in the log),
        so that neither tells them it exists.

        Raises:
            ThreadNotFoundError: ``hidden``.
            SerializationError: The thread does not read, and their queue lists a pause
                of it, or a later version wrote it (which says nothing of a review).
        """
        try:
            if self.store.exists(thread_id):
                return self.store.state_at(thread_id)
        except (SchemaVersionError, MissingUpcasterError, CompressionDictionaryError):
            raise
        except SerializationError as exc:
            if self.listing(reviewer, only=QueueFilter(thread_id=thread_id), limit=1).items:
                raise  # they are shown its pause: told why it does not open
            log.warning("thread %r does not read: %s", thread_id, exc)
        raise hidden

    def _may_see(self, thread_id: str, reviewer: Reviewer) -> bool:
        """Whether ``reviewer`` may see the thread (:func:`may_see`): not if it does not
        read."""
        state = self._readable(thread_id)
        return state is not None and may_see(state, reviewer)

    def reachable(self) -> bool:
        """Whether the store answers a read of its log's end within a few seconds
        (:meth:`~covonaut_es.Store.ping`)."""
        try:
            self.store.ping()
        except Exception:
            return False
        return True

    # Recording ----------------------------------------------------------------------

    def decide(
        self,
        review_id: str,
        submission: ReviewSubmission,
        *,
        reviewer: Reviewer,
        thread_id: str | None = None,
    ) -> ReviewDecision:
        """Record a reviewer's decision (see :meth:`ThreadService.decide
        <covonaut_es.service.ThreadService.decide>`, whose errors it raises). A decision
        too late records the review's expiry, if no worker has yet."""
        try:
            decision = self.service.decide(
                review_id, submission, reviewer=reviewer, thread_id=thread_id
            )
        except ReviewExpiredError:
            self._expire_due(self.service.find_review(review_id, thread_id=thread_id).thread_id)
            raise
        self._remember(decision.thread_id, review_id)
        return decision

    def answer(
        self,
        thread_id: str,
        tool_call_id: str,
        text: object,
        *,
        reviewer: Reviewer,
        pause: object = None,
    ) -> None:
        """Record a person's answer to a tool's pause (:meth:`ThreadService.answer
        <covonaut_es.service.ThreadService.answer>`): the pause ``pause`` names, if
        given."""
        service = self.service
        self._check_shown(thread_id, tool_call_id, PauseKind.INTERRUPT, reviewer)
        self._recording(
            thread_id,
            tool_call_id,
            lambda: service.answer(thread_id, tool_call_id, text, reviewer=reviewer, pause=pause),
        )

    def settle(
        self,
        thread_id: str,
        tool_call_id: str,
        settlement: Settlement,
        *,
        reviewer: Reviewer,
        pause: object = None,
    ) -> None:
        """Record what a person found of a call in doubt (:meth:`ThreadService.settle
        <covonaut_es.service.ThreadService.settle>`)."""
        self._check_shown(thread_id, tool_call_id, PauseKind.IN_DOUBT, reviewer)
        self._recording(
            thread_id,
            tool_call_id,
            lambda: self.service.settle(
                thread_id, tool_call_id, settlement, reviewer=reviewer, pause=pause
            ),
        )

    def request_retry(
        self, thread_id: str, tool_call_id: str, *, reviewer: Reviewer, pause: object = None
    ) -> None:
        """Ask for a call in doubt to run again (:meth:`ThreadService.request_retry
        <covonaut_es.service.ThreadService.request_retry>`)."""
        self._check_shown(thread_id, tool_call_id, PauseKind.IN_DOUBT, reviewer)
        self._recording(
            thread_id,
            tool_call_id,
            lambda: self.service.request_retry(
                thread_id, tool_call_id, reviewer=reviewer, pause=pause
            ),
        )

    def abandon(
        self, thread_id: str, reason: object, *, reviewer: Reviewer, pause: object = None
    ) -> None:
        """Give a thread up (:meth:`ThreadService.abandon
        <covonaut_es.service.ThreadService.abandon>`): every pause of it leaves the list.
        A person says why, and gives up only a thread whose reviews they may decide.

        Raises:
            InvalidDecisionError: The reason is no text, too long, or blank.
            ReviewerNotPermittedError: The thread waits on a review outside their scopes.
        """
        self._recording(
            thread_id,
            None,
            lambda: self.service.abandon(thread_id, reason, reviewer=reviewer, pause=pause),
        )

    def _recording(self, thread_id: str, item_id: str | None, command: Callable[[], T]) -> T:
        result = command()
        self._remember(thread_id, item_id)
        return result

    def _check_shown(
        self, thread_id: str, tool_call_id: str, kind: PauseKind, reviewer: Reviewer
    ) -> None:
        """Refuse a command acting on a pause of ``kind`` on a call, in a thread
        ``reviewer`` may not see, unless such a pause awaits a person there: as
        :meth:`pause` reads it, as a thread no one made. The service's refusal would
        name the thread's open calls, or tell its state (given up, the call settled). A
        call a review outside their scopes governs is left to the service, whose
        refusal says they are not permitted (ADR 0152).

        Raises:
            ThreadNotFoundError: As :meth:`pause` raises it.
        """
        hidden = _no_pause(thread_id, tool_call_id, reviewer)
        state = self._shown_state(thread_id, hidden, reviewer)
        if may_see(state, reviewer) or not _may_see_call(state, tool_call_id, reviewer):
            return
        if not any(p.kind is kind for p in _pauses_shown(state, tool_call_id, reviewer)):
            raise hidden

    def _expire_due(self, thread_id: str) -> bool:
        """Record the expiry of the thread's reviews past their deadline, as a worker's
        sweep would (the inbox applies deadlines too); whether any expired. A store
        opened read-only is left to the workers."""
        try:
            expired = self.service.expire_reviews(thread_id)
        except ReadOnlyStoreError:
            return False
        for decision in expired:
            self._remember(thread_id, decision.review_id)
        return bool(expired)

    def _remember(self, thread_id: str, item_id: str | None) -> None:
        """Leave the item (None: every item of the thread) out of the listings until the
        queue has caught up with the log as it stands now, right after the save."""
        position = self.store.last_log_position()
        with self._lock:
            key = (thread_id, item_id)
            self._recorded[key] = max(position, self._recorded.get(key, 0))


def _unnamed(entry: AuditEntry, hidden: frozenset[str]) -> AuditEntry:
    """``entry`` of a thread's history, naming none of the ``hidden`` threads: a fork's
    history opens with its ancestors' first events and its own ``Forked``, whose
    summaries begin by naming the thread they started or the parent it came from."""
    for thread in hidden:
        for named, unnamed in (
            (f"thread {thread!r} started", "A thread you may not see started"),
            (f"forked from {thread!r} at", "forked from a thread you may not see at"),
        ):
            if entry.summary.startswith(named):
                rest = entry.summary[len(named) :]
                return msgspec.structs.replace(entry, summary=unnamed + rest)
    return entry


def _threads_of(tree: ThreadTree) -> Iterator[str]:
    """Every thread of ``tree``, each before its forks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node.thread_id
        stack.extend(reversed(node.children))


def _no_pause(thread_id: str, tool_call_id: str, reviewer: Reviewer) -> ThreadNotFoundError:
    """What a reviewer is told of a call whose pause they may not see, or that has none
    in a thread they may not see: what a thread no one made would tell."""
    return ThreadNotFoundError(
        f"no pause on call {tool_call_id!r} of thread {thread_id!r} that reviewer "
        f"{reviewer.id!r} may see"
    )


def _names_another(data: dict[str, Any], thread_id: str, hidden: Callable[[str], bool]) -> bool:
    """Whether a review's request ``data`` names, as the thread it was asked in, a
    thread other than ``thread_id`` that is ``hidden``."""
    asked_in = data.get("thread_id")
    return isinstance(asked_in, str) and asked_in != thread_id and hidden(asked_in)


def _pauses_shown(state: ThreadState, tool_call_id: str, reviewer: Reviewer) -> list[Pause]:
    """The pauses on the call that ``reviewer`` is shown: every one in a thread they may
    see; in another, those still awaiting a person (a pause dealt with would tell what
    came of the thread since, which may be a review's doing they may not see)."""
    shown = state.pauses if may_see(state, reviewer) else state.awaiting_person
    return [p for p in shown if p.interrupt.tool_call_id == tool_call_id]


def may_see(state: ThreadState, reviewer: Reviewer) -> bool:
    """Whether ``reviewer`` may see the thread's messages and timeline: they may decide
    every review it asked for. The messages show each review's operation, and one
    outside their scopes is shown them no more than it is listed."""
    return all(_allows(review.request.rules, reviewer) for review in state.reviews)


def _allows(rules: ReviewRules | None, reviewer: Reviewer) -> bool:
    """Whether a review's ``rules`` (None: a review without a policy, or no review) let
    ``reviewer`` decide it, and so see what it asks about."""
    return rules is None or may_decide(rules, reviewer.scopes)


def _may_see_call(state: ThreadState, tool_call_id: str, reviewer: Reviewer) -> bool:
    """Whether ``reviewer`` may see a pause on the call, which shows its operation: they
    may act on it (:func:`~covonaut_es.domain.may_act_on_call`, the rule
    :func:`~covonaut_es.domain.check_may_act_on_call` enforces); a call no review names
    is anyone's."""
    return may_act_on_call(state.reviews_naming(tool_call_id), reviewer.scopes)


def _recent_messages(state: ThreadState, reviewer: Reviewer) -> tuple[Message, ...] | None:
    """The thread's last messages, or None when :func:`may_see` hides them."""
    return tuple(state.messages[-RECENT_MESSAGES:]) if may_see(state, reviewer) else None
