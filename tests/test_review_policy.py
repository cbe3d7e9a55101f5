"""Who may decide what: a tool's review policy (decisions, editable arguments, the text
for the reviewer, scopes, limits, four eyes) recorded with each review, and the one check
every decision passes, through the agent and the service layer."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import logging
import re
import tempfile
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from covonaut_es import (
    Agent,
    AgentThread,
    HmacReviewerVerifier,
    ReviewerNotPermittedError,
    ReviewerNotVerifiedError,
    ReviewPolicy,
    StaleReviewError,
    Store,
    ThreadStatus,
    Tool,
    ToolContext,
    open_store,
)
from covonaut_es.cli import main
from covonaut_es.domain import Decision, ReviewLimit, ReviewRules
from covonaut_es.domain._reviews import ALL_DECISIONS
from covonaut_es.errors import (
    DecisionNotAllowedError,
    InvalidDecisionError,
    ReviewPendingError,
    ThreadNotFoundError,
)
from covonaut_es.inbox import create_app as create_inbox_app
from covonaut_es.service import Reviewer, Settlement, ThreadService, review_submission
from support import answer, call
from test_approvals import PAY_SCHEMA, SECRET, VERIFIER, make_agent, review_id

PAY_5000 = '{"amount": 5000, "to": "DE02 1001"}'
PAYMENTS = VERIFIER.issue_token("carol", 3600, scopes=["payments"])
PAYMENTS_TOO = VERIFIER.issue_token("dave", 3600, scopes=["payments"])
LARGE = VERIFIER.issue_token("erin", 3600, scopes=["payments", "payments:large"])
NO_SCOPE = VERIFIER.issue_token("alice", 3600)


def describe(args: dict[str, Any]) -> str:
    return f"Send {args['amount']} EUR to {args['to']}"


def pay(runs: list[ToolContext], review: Any) -> Tool:
    def run(ctx: ToolContext, args: dict[str, Any]) -> Any:
        runs.append(ctx)
        return {"paid": args["amount"]}

    return Tool("pay", "Send a payment", PAY_SCHEMA, run, requires_approval=True, review=review)


def paused_with(
    store: Store, review: Any, runs: list[ToolContext], script: Any = (), thread_id: str = "t"
) -> Agent:
    script = [call(("c1", "pay", PAY_5000)), *script]
    agent = make_agent(store, script, runs, tool=pay(runs, review), thread_id=thread_id)
    assert agent.run("Pay the invoice.") == ""
    return agent


def decisions_recorded(store: Store, thread_id: str = "t") -> list[Any]:
    kinds = (AgentThread.ReviewDecided, AgentThread.ReviewApprovedInPart)
    return [e for e in store.history(thread_id) if isinstance(e, kinds)]


POLICY = ReviewPolicy(
    decisions={"approved", "rejected"},
    editable=("amount",),
    describe=describe,
    scopes=("payments",),
    limits=(ReviewLimit("amount", 1000, ("payments:large",)),),
)


def test_the_request_records_the_rules_and_the_description_built_from_the_arguments(
    store: Store,
) -> None:
    """The review request (the interrupt's data) carries what the policy allows and the
    tool's text for the reviewer."""
    agent = paused_with(store, POLICY, [])
    (review,) = agent.state.reviews
    assert review.request.rules == ReviewRules(
        decisions=(Decision.APPROVED, Decision.REJECTED),
        editable=("amount",),
        description="Send 5000 EUR to DE02 1001",
        scopes=("payments",),
        limits=(ReviewLimit("amount", 1000, ("payments:large",)),),
    )
    assert agent.interrupted is not None
    assert agent.interrupted.data["rules"]["description"] == "Send 5000 EUR to DE02 1001"


def test_a_reviewer_without_the_scope_is_refused_and_nothing_is_recorded(store: Store) -> None:
    """A verified reviewer whose token grants none of the scopes gets a typed refusal
    that names the scopes; the thread records nothing."""
    agent = paused_with(store, POLICY, [])
    before = len(store.history("t"))
    with pytest.raises(ReviewerNotPermittedError, match="payments"):
        agent.reject(review_id(agent), reviewer=NO_SCOPE, reason="no")
    assert len(store.history("t")) == before


def test_decisions_and_edits_outside_the_policy_are_refused(store: Store) -> None:
    """A response the policy does not allow, and an edit of the IBAN, are refused
    (InvalidDecisionError's subclass); an edit of the amount within the limit passes."""
    runs: list[ToolContext] = []
    script = [call(("c2", "pay", '{"amount": 900, "to": "DE02 1001"}')), answer("Paid.")]
    agent = paused_with(store, POLICY, runs, script)
    rid = review_id(agent)
    with pytest.raises(DecisionNotAllowedError, match="allows only approved, rejected"):
        agent.respond(rid, reviewer=PAYMENTS, answer="paid already")
    with pytest.raises(DecisionNotAllowedError, match="forbids editing to"):
        agent.approve(rid, reviewer=LARGE, arguments={"amount": 5000, "to": "XX99"})
    with pytest.raises(InvalidDecisionError):
        agent.approve(rid, reviewer=LARGE, arguments={"amount": 5000})  # removes `to`
    assert decisions_recorded(store) == []
    agent.approve(rid, reviewer=PAYMENTS, arguments={"amount": 900, "to": "DE02 1001"})
    assert agent.resume() == "Paid." and [r.tool_call_id for r in runs] == ["c2"]


def test_a_limit_needs_its_scope_for_the_approved_amount(store: Store) -> None:
    """Above the limit, only a reviewer with the limit's scope approves; rejecting needs
    the review's scope only."""
    agent = paused_with(store, POLICY, [])
    rid = review_id(agent)
    with pytest.raises(ReviewerNotPermittedError, match="'amount' above 1000"):
        agent.approve(rid, reviewer=PAYMENTS)
    assert decisions_recorded(store) == []
    decision = agent.approve(rid, reviewer=LARGE)
    assert (decision.reviewer, decision.decision) == ("erin", Decision.APPROVED)


def test_four_eyes_approves_only_with_a_second_different_reviewer(store: Store) -> None:
    """The first approval is recorded in part and runs nothing; the same reviewer cannot
    approve twice; the second reviewer's approval authorizes exactly one run."""
    runs: list[ToolContext] = []
    script = [call(("c2", "pay", PAY_5000)), answer("Paid.")]
    policy = ReviewPolicy(scopes=("payments",), four_eyes=True)
    agent = paused_with(store, policy, runs, script)
    rid = review_id(agent)
    first = agent.approve(rid, reviewer=PAYMENTS, comment="looks right")
    assert first.partial and first.reviewer == "carol"
    (review,) = agent.state.reviews
    assert review.pending and review.approvals == (first,)
    with pytest.raises(ReviewPendingError):  # it still waits for the second reviewer
        agent.resume()
    assert runs == []
    with pytest.raises(ReviewerNotPermittedError, match="second, different reviewer"):
        agent.approve(rid, reviewer=PAYMENTS)
    second = agent.approve(rid, reviewer=PAYMENTS_TOO)
    assert not second.partial and second.reviewer == "dave"
    assert agent.resume() == "Paid." and len(runs) == 1
    assert runs[0].approval == second
    summaries = [entry.summary for entry in store.replay("t")]
    assert any("approved in part by carol" in s for s in summaries)
    assert store.verify("t").ok


def test_under_four_eyes_a_rejection_by_the_second_reviewer_rejects(store: Store) -> None:
    """After an approval in part, the second reviewer's rejection decides the review."""
    agent = paused_with(store, ReviewPolicy(four_eyes=True), [])
    rid = review_id(agent)
    agent.approve(rid, reviewer=PAYMENTS)
    decided = agent.reject(rid, reviewer=PAYMENTS_TOO, reason="wrong IBAN")
    assert decided.decision is Decision.REJECTED
    assert agent.pending_reviews == ()


def test_the_second_approval_must_cover_the_first_reviewers_edit(store: Store) -> None:
    """Under four eyes the second reviewer approves the operation the first approved
    (with its edit) or nothing is recorded."""
    runs: list[ToolContext] = []
    edit = {"amount": 900, "to": "DE02 1001"}
    script = [call(("c2", "pay", '{"amount": 900, "to": "DE02 1001"}')), answer("Paid.")]
    agent = paused_with(store, ReviewPolicy(four_eyes=True), runs, script)
    rid = review_id(agent)
    agent.approve(rid, reviewer=PAYMENTS, arguments=edit)
    with pytest.raises(DecisionNotAllowedError, match="same operation"):
        agent.approve(rid, reviewer=PAYMENTS_TOO)
    final = agent.approve(rid, reviewer=PAYMENTS_TOO, arguments=edit)
    assert final.arguments == edit and agent.resume() == "Paid." and len(runs) == 1


def test_a_policy_function_chooses_per_call_and_fails_closed(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A policy function sees the call's arguments; one that raises leaves only a
    rejection possible, and says so to the reviewer."""

    def by_amount(args: dict[str, Any]) -> ReviewPolicy:
        return ReviewPolicy(scopes=("payments:large",) if args["amount"] > 1000 else ())

    agent = paused_with(store, by_amount, [])
    (review,) = agent.state.reviews
    assert review.request.rules is not None
    assert review.request.rules.scopes == ("payments:large",)

    def broken(args: dict[str, Any]) -> ReviewPolicy:
        raise KeyError("iban")

    with caplog.at_level(logging.ERROR, logger="covonaut_es"):
        failing = paused_with(store, broken, [], thread_id="u")
    assert "review policy of tool 'pay' failed" in caplog.text
    rid = review_id(failing)
    with pytest.raises(DecisionNotAllowedError, match="allows only rejected"):
        failing.approve(rid, reviewer=LARGE)
    assert failing.reject(rid, reviewer=NO_SCOPE, reason="policy broken").reviewer == "alice"


def test_a_tool_without_a_policy_records_no_rules_and_decides_as_before(store: Store) -> None:
    """No policy: the request has no rules and any verified reviewer decides anything."""
    agent = paused_with(store, None, [])
    (review,) = agent.state.reviews
    assert review.request.rules is None
    assert "rules" not in (agent.interrupted.data if agent.interrupted else {})
    assert agent.respond(review_id(agent), reviewer=NO_SCOPE, answer="done by hand").reviewer


def test_review_policy_refuses_what_it_cannot_mean() -> None:
    """A policy is checked when made: no decision at all, a bare string, a limit
    without scopes or without a finite maximum is refused."""
    with pytest.raises(ValueError, match="expired is no decision a reviewer makes"):
        ReviewPolicy(decisions=[Decision.EXPIRED])
    with pytest.raises(ValueError, match="at least one decision"):
        ReviewPolicy(decisions=())
    with pytest.raises(TypeError, match="not the string"):
        ReviewPolicy(editable="amount")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="at least one scope"):
        ReviewPolicy(limits=(ReviewLimit("amount", 10, ()),))
    with pytest.raises(ValueError, match="finite number"):
        ReviewPolicy(limits=(ReviewLimit("amount", float("nan"), ("payments:large",)),))


def test_hmac_tokens_carry_scopes_and_tokens_without_them_read_as_before() -> None:
    """identify gives the scopes a token was issued with; a token without scopes is
    byte-for-byte the format it was, and verify still gives the id."""
    verifier = HmacReviewerVerifier(SECRET, clock=lambda: 100.0)
    scoped = verifier.issue_token("carol", 60, scopes=["payments", "payments"])
    assert verifier.identify(scoped) == Reviewer("carol", ("payments",))
    plain = verifier.issue_token("bob", 60)
    assert verifier.identify(plain) == Reviewer("bob", ())
    assert verifier.verify(plain) == "bob"
    claims = base64.urlsafe_b64decode(plain.split(".")[0] + "==")
    assert json.loads(claims) == {"sub": "bob", "exp": 160.0}
    with pytest.raises(ValueError, match="collection of non-empty strings"):
        verifier.issue_token("carol", 60, scopes="payments")


def test_the_service_records_a_decision_under_the_verified_scopes(store: Store) -> None:
    """ThreadService.decide checks the reviewer's scopes from the verifier, not from the
    caller: a Reviewer made without scopes is refused where the token's would pass."""
    paused_with(store, POLICY, [])
    service = ThreadService(store, verifier=VERIFIER)
    (rid,) = (r.request.review_id for r in store.state_at("t").reviews)
    reject = review_submission("reject", text="not this month")
    with pytest.raises(ReviewerNotPermittedError):
        service.decide(rid, reject, reviewer=Reviewer("carol"))
    carol = service.reviewer(PAYMENTS)
    assert carol.scopes == ("payments",)
    assert service.decide(rid, reject, reviewer=carol).decision is Decision.REJECTED
    assert store.state_at("t").status is ThreadStatus.INTERRUPTED


# The invariant, generated ----------------------------------------------------------------

SCOPES = ("payments", "payments:large", "audit")


@st.composite
def policies(draw: st.DrawFn) -> ReviewPolicy:
    decisions = draw(st.sets(st.sampled_from(ALL_DECISIONS), min_size=1))
    editable = draw(st.none() | st.lists(st.sampled_from(["amount", "to"]), unique=True))
    limits = draw(
        st.lists(
            st.builds(
                ReviewLimit,
                st.just("amount"),
                st.sampled_from([10, 1000, 10_000]),
                st.lists(st.sampled_from(SCOPES), min_size=1, unique=True).map(tuple),
            ),
            max_size=2,
        )
    )
    return ReviewPolicy(
        decisions=decisions,
        editable=editable,
        scopes=draw(st.lists(st.sampled_from(SCOPES), unique=True)),
        limits=limits,
        four_eyes=draw(st.booleans()),
    )


@st.composite
def four_eyes_policies(draw: st.DrawFn) -> ReviewPolicy:
    return attrs.evolve(draw(policies()), four_eyes=True)


ATTEMPT = st.tuples(
    st.sampled_from(["ann", "ben"]),  # who: few names, so that a reviewer comes back
    st.lists(st.sampled_from(SCOPES), unique=True),  # the scopes their token grants
    st.sampled_from(["approve", "approve", "approve", "reject", "respond"]),
    # Edits: as requested, or a few that collide often, so that a second approval meets
    # a first one's edit; now and then any subset of the arguments.
    st.sampled_from([None, None, {"amount": 5, "to": "DE02 1001"}, {"amount": 50_000,
                     "to": "DE02 1001"}, {"amount": 5000, "to": "XX"}])
    | st.fixed_dictionaries({}, optional={"amount": st.sampled_from([5, 500, 50_000]),
                                          "to": st.sampled_from(["DE02 1001", "XX"])}),
)  # fmt: skip


def allowed(
    policy: ReviewPolicy, who: str, scopes: list[str], action: str, edit: Any, review: Any
) -> bool:
    """What the policy says, written from the policy's own words: the model the one
    check must agree with."""
    if policy.scopes and not set(policy.scopes) & set(scopes):
        return False
    decision = {"approve": "approved", "reject": "rejected", "respond": "responded"}[action]
    if decision not in policy.decisions:
        return False
    if action != "approve":
        return True
    requested = review.request.arguments
    if edit is not None and policy.editable is not None:
        kept = [k for k in ("amount", "to") if k not in policy.editable]
        if any(edit.get(k) != requested.get(k) for k in kept):
            return False
    amount = (requested if edit is None else edit).get("amount")
    for limit in policy.limits:
        if amount is not None and amount > limit.maximum and not set(limit.scopes) & set(scopes):
            return False
    return all(a.reviewer != who for a in review.approvals)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(policy=policies() | four_eyes_policies(), attempts=st.lists(ATTEMPT, min_size=1, max_size=5))
def test_no_decision_outside_policy_or_scope_is_recorded_and_four_eyes_needs_two(
    policy: ReviewPolicy, attempts: list[Any]
) -> None:
    """Whatever the policy, the reviewers' scopes, the decisions, edits and their order:
    a refused decision records nothing, each recorded decision was within the policy and
    the reviewer's scopes, and under four eyes no approval stands with fewer than two
    distinct reviewers behind it."""
    with open_store("memory://") as store:
        paused_with(store, policy, [])
        service = ThreadService(store, verifier=VERIFIER)
        (review,) = store.state_at("t").reviews
        rid = review.request.review_id
        for who, scopes, action, edit in attempts:
            reviewer = service.reviewer(VERIFIER.issue_token(who, 60, scopes=scopes))
            text = "" if action == "approve" else "because"
            edit = edit if action == "approve" else None
            submission = review_submission(action, text=text, arguments=edit)
            before = len(store.history("t"))
            current = store.state_at("t").reviews[0]
            try:
                service.decide(rid, submission, reviewer=reviewer)
            except (InvalidDecisionError, ReviewerNotPermittedError, StaleReviewError):
                assert len(store.history("t")) == before  # recorded nowhere
                continue
            assert allowed(policy, who, scopes, action, edit, current)
        final = store.state_at("t").reviews[0]
        if final.approved:
            approvers = {a.reviewer for a in final.approvals}
            assert final.decision is not None
            approvers.add(final.decision.reviewer)
            assert len(approvers) >= (2 if policy.four_eyes else 1)
            assert final.decision.digest == (
                final.approvals[0].digest if final.approvals else final.decision.digest
            )


def test_a_kept_argument_written_as_the_same_number_is_no_edit(store: Store) -> None:
    """5000 and 5000.0 are one number in RFC 8785 JSON, so one operation (one digest,
    ADR 0048): approving with a kept argument so written is no edit, and the approval
    covers the arguments as requested; a changed number is an edit, and refused."""
    agent = paused_with(store, ReviewPolicy(editable=("to",)), [])
    with pytest.raises(DecisionNotAllowedError, match="forbids editing amount"):
        changed = {"amount": 5000.5, "to": "DE02 1001"}
        agent.approve(review_id(agent), reviewer=NO_SCOPE, arguments=changed)
    (request,) = agent.pending_reviews
    as_float = {"amount": 5000.0, "to": "DE02 1001"}
    decision = agent.approve(review_id(agent), reviewer=NO_SCOPE, arguments=as_float)
    assert (decision.arguments, decision.digest) == (None, request.digest)
    assert len(decisions_recorded(store)) == 1


@pytest.mark.parametrize(
    ("claim", "value", "scopes"),
    [
        ("scope", "payments payments:large", ("payments", "payments:large")),
        ("roles", ["payments"], ("payments",)),
        ("scope", None, ()),
    ],
)
def test_identity_provider_tokens_give_their_scopes_claim(
    claim: str, value: Any, scopes: tuple[str, ...]
) -> None:
    """JwtReviewerVerifier.identify reads the scopes from the configured claim: OAuth's
    space-separated string or a list; a token without it grants none."""
    import jwt

    from covonaut_es.runtime import JwtReviewerVerifier

    key = b"k" * 32
    verifier = JwtReviewerVerifier("https://id.test/", "inbox", key=key, scopes_claim=claim,
                                   clock=lambda: 1000.0)  # fmt: skip
    claims: dict[str, Any] = {"iss": "https://id.test/", "aud": "inbox", "sub": "carol",
                              "iat": 990, "exp": 2000}  # fmt: skip
    if value is not None:
        claims[claim] = value
    token = jwt.encode(claims, key, algorithm="HS256")
    assert verifier.identify(token) == Reviewer("carol", scopes)
    assert verifier.verify(token) == "carol"


@pytest.mark.parametrize("value", [7, ["payments", 3], [""], {"a": 1}])
def test_a_scopes_claim_that_is_no_list_of_names_does_not_verify(value: Any) -> None:
    """A scopes claim of another shape is refused, naming the claim, never guessed at."""
    import jwt

    from covonaut_es.runtime import JwtReviewerVerifier

    key = b"k" * 32
    verifier = JwtReviewerVerifier("https://id.test/", "inbox", key=key, clock=lambda: 1000.0)
    claims = {"iss": "https://id.test/", "aud": "inbox", "sub": "carol", "iat": 990,
              "exp": 2000, "scope": value}  # fmt: skip
    with pytest.raises(ReviewerNotVerifiedError, match="'scope' claim"):
        verifier.identify(jwt.encode(claims, key, algorithm="HS256"))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    attempts=st.lists(
        st.tuples(
            st.sampled_from(["ann", "ben"]),
            st.sampled_from([None, {"amount": 5, "to": "DE02 1001"}, {"amount": 7, "to": "XX"}]),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_four_eyes_never_approves_with_fewer_than_two_distinct_reviewers(
    attempts: list[Any],
) -> None:
    """Under four eyes, whatever approvals (as requested or edited) two reviewers send
    in whatever order: an approval stands only with two distinct reviewers behind it,
    both for the operation it covers; a refused approval records nothing."""
    with open_store("memory://") as store:
        paused_with(store, ReviewPolicy(four_eyes=True), [])
        service = ThreadService(store, verifier=VERIFIER)
        rid = store.state_at("t").reviews[0].request.review_id
        for who, edit in attempts:
            before = len(store.history("t"))
            reviewer = service.reviewer(VERIFIER.issue_token(who, 60))
            try:
                service.decide(rid, review_submission("approve", arguments=edit), reviewer=reviewer)
            except (InvalidDecisionError, ReviewerNotPermittedError, StaleReviewError):
                assert len(store.history("t")) == before
        review = store.state_at("t").reviews[0]
        if review.approved:
            assert review.decision is not None
            (first,) = review.approvals
            assert first.reviewer != review.decision.reviewer
            assert first.digest == review.decision.digest


class _DiedInTool(BaseException):
    """Stands for the runner's process dying inside the tool, after the approval's spend."""


def _in_doubt_after_approval(store: Store, thread_id: str) -> None:
    """``thread_id``: a payment under the policy's scopes, approved (its approval runs
    the call), whose runner died inside the tool: the call is in doubt."""

    def dies(ctx: ToolContext, args: dict[str, Any]) -> Any:
        raise _DiedInTool

    tool = Tool(
        "pay", "Send a payment", PAY_SCHEMA, dies,
        requires_approval=True, run_on_approval=True, review=ReviewPolicy(scopes=["payments"]),
    )  # fmt: skip
    agent = make_agent(store, [call(("c1", "pay", PAY_5000))], [], tool=tool, thread_id=thread_id)
    agent.run("Pay the invoice.")
    agent.approve(review_id(agent), reviewer=PAYMENTS)
    with pytest.raises(_DiedInTool):
        agent.resume()


_CALL_COMMANDS = {
    "retry": lambda service, reviewer: service.request_retry("t", "c1", reviewer=reviewer),
    "settle as run": lambda service, reviewer: service.settle(
        "t", "c1", Settlement.ran_with("paid"), reviewer=reviewer
    ),
    "settle as not run": lambda service, reviewer: service.settle(
        "t", "c1", Settlement.not_run("no charge found"), reviewer=reviewer
    ),
    "give up": lambda service, reviewer: service.abandon("t", "customer left", reviewer=reviewer),
    "give up, paused in doubt": lambda service, reviewer: service.abandon(
        "t", "customer left", reviewer=reviewer
    ),
}


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(command=st.sampled_from(sorted(_CALL_COMMANDS)), scoped=st.booleans())
def test_only_a_reviewer_in_scope_may_retry_or_settle_a_reviewed_call(
    command: str, scoped: bool
) -> None:
    """A call held back under a review's scopes, approved, and in doubt since its runner
    died (paused for a person or not yet): a reviewer holding none of the scopes can
    neither run it again, nor settle it, nor give its thread up, which would end it
    (``ReviewerNotPermittedError``, nothing recorded), where one in scope can; the
    application itself (no reviewer) still may."""
    with open_store("memory://") as store:
        _in_doubt_after_approval(store, "t")
        service = ThreadService(store, verifier=VERIFIER)
        reviewer = service.reviewer(PAYMENTS if scoped else NO_SCOPE)
        if command.endswith("paused in doubt"):
            service.pause_calls_in_doubt("t", "its runner died")
        before = store.head_version("t")
        if scoped:
            _CALL_COMMANDS[command](service, reviewer)
            assert store.head_version("t") == (before or 0) + 1
        else:
            with pytest.raises(
                ReviewerNotPermittedError, match=_REFUSAL[command.startswith("give up")]
            ):
                _CALL_COMMANDS[command](service, reviewer)
            assert store.head_version("t") == before
            service.settle("t", "c1", Settlement.not_run())  # the application's own


_REFUSAL = {
    False: "may not act on call 'c1'",
    True: "cannot be given up by reviewer '[a-z]+': it waits on a call they may not act on",
}
"""How a command on a reviewed call is refused, and how giving its thread up is (which
names no call: the person did not name it, ADR 0152)."""


HEX_SECRET = "5e" * 32  # text, as $COVONAUT_ES_REVIEWER_SECRET holds it, for the CLI too
HEX_VERIFIER = HmacReviewerVerifier(HEX_SECRET.encode())
APPROVERS = ("erin", "frank")  # hold every scope: their approval always stands


def _dying_pay(policy: ReviewPolicy) -> Tool:
    """``pay`` under ``policy``, run on approval, whose runner dies inside it."""

    def dies(ctx: ToolContext, args: dict[str, Any]) -> Any:
        raise _DiedInTool

    return Tool(
        "pay", "Send a payment", PAY_SCHEMA, dies,
        requires_approval=True, run_on_approval=True, review=policy,
    )  # fmt: skip


def _in_doubt_under(
    store: Store, policy: ReviewPolicy, amount: int, edit: int | None, thread_id: str = "t"
) -> None:
    """Thread ``thread_id``: a payment of ``amount`` under ``policy``, approved (by two
    reviewers under four eyes), with the amount edited to ``edit`` if not None, whose
    runner died inside the tool: the call is in doubt."""
    arguments = json.dumps({"amount": amount, "to": "DE02 1001"})
    agent = make_agent(
        store,
        [call(("c1", "pay", arguments))],
        [],
        tool=_dying_pay(policy),
        reviewer_verifier=HEX_VERIFIER,
        thread_id=thread_id,
    )
    agent.run("Pay the invoice.")
    approved = None if edit is None else {"amount": edit, "to": "DE02 1001"}
    for name in APPROVERS[: 2 if policy.four_eyes else 1]:
        everything = HEX_VERIFIER.issue_token(name, 600, scopes=["payments", "payments:large"])
        agent.approve(review_id(agent), reviewer=everything, arguments=approved)
    with pytest.raises(_DiedInTool):
        agent.resume()


def _forked_and_asked_again(store: Store, policy: ReviewPolicy) -> None:
    """Thread ``t``: a fork of ``p``, whose call is in doubt there, which the
    application asks to run the call again: the fork asks a review of its own (a fork
    does not run on its parent's approval), which a reviewer holding ``payments`` alone
    rejects, leaving the call in doubt in the fork."""
    store.fork("p", new_thread_id="t")
    agent = make_agent(
        store, [], [], tool=_dying_pay(policy), reviewer_verifier=HEX_VERIFIER, thread_id="t"
    )
    agent.settle("c1", retry=True)
    if not agent.pending_reviews:  # else asked already, when the retry was recorded
        assert agent.resume() == ""
    low = HEX_VERIFIER.issue_token("dan", 600, scopes=["payments"])
    agent.reject(review_id(agent), reviewer=low, reason="not sure it went through")
    assert [p.call.id for p in store.load("t").in_doubt] == ["c1"]


def _by_service(store: Store, command: str, token: str) -> bool:
    service = ThreadService(store, verifier=HEX_VERIFIER)
    reviewer = service.reviewer(token)
    try:
        if command == "retry":
            service.request_retry("t", "c1", reviewer=reviewer)
        elif command == "give up":
            service.abandon("t", "customer left", reviewer=reviewer)
        else:
            ran = command == "settle as run"
            settlement = Settlement.ran_with("paid") if ran else Settlement.not_run()
            service.settle("t", "c1", settlement, reviewer=reviewer)
    except ReviewerNotPermittedError:
        return False
    return True


def _by_cli(store: Store, command: str, token: str) -> bool:
    args = {
        "retry": ("settle", "t", "c1", "--retry"),
        "settle as run": ("settle", "t", "c1", "--result", "paid"),
        "settle as not run": ("settle", "t", "c1", "--not-run"),
        "give up": ("abandon", "t", "--reason", "customer left"),
    }[command]
    out, err = io.StringIO(), io.StringIO()
    with (
        pytest.MonkeyPatch.context() as env,
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        env.setenv("COVONAUT_ES_REVIEWER_SECRET", HEX_SECRET)
        status = main([*args, "--reviewer-token", token, "--store", store.url])
    refused = re.search(_REFUSAL[command.startswith("give up")], err.getvalue())
    assert status == 0 or refused, err.getvalue()
    return status == 0


def _by_inbox(store: Store, command: str, token: str) -> bool:
    path, body = {
        "retry": ("/api/pauses/t/c1/retry", {}),
        "settle as run": ("/api/pauses/t/c1/settle", {"ran": True, "result": "paid"}),
        "settle as not run": ("/api/pauses/t/c1/settle", {"ran": False}),
        "give up": ("/api/threads/t/abandon", {"reason": "customer left"}),
    }[command]
    app = create_inbox_app(store, HEX_VERIFIER)
    with TestClient(app, base_url="http://inbox.test") as client:
        response = client.post(path, json=body, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code in (200, 403), response.text
    return response.status_code == 200


_SURFACES = {"service": _by_service, "cli": _by_cli, "inbox": _by_inbox}


@attrs.frozen
class _ReviewedCall:
    """A payment under a policy (its scopes, four eyes, a limit above 1000 that needs
    ``payments:large``), approved with its amount perhaps edited, then in doubt; in a
    fork whose own review of the call someone without the limit's scope rejected, or
    not; and the scopes of the person who then acts on it."""

    scoped: bool
    four_eyes: bool
    limited: bool
    amount: int
    edit: int | None
    held: frozenset[str]
    forked: bool

    def set_up(self, store: Store) -> str:
        """Thread ``t`` holding the call ``c1`` in doubt; the acting person's token."""
        limits = (ReviewLimit("amount", 1000, ("payments:large",)),) if self.limited else ()
        scopes = ("payments",) if self.scoped else ()
        policy = ReviewPolicy(scopes=scopes, four_eyes=self.four_eyes, limits=limits)
        if self.forked:
            _in_doubt_under(store, policy, self.amount, self.edit, thread_id="p")
            _forked_and_asked_again(store, policy)
        else:
            _in_doubt_under(store, policy, self.amount, self.edit)
        return HEX_VERIFIER.issue_token("carol", 600, scopes=sorted(self.held))

    @property
    def may_settle(self) -> bool:
        """Whether the person could have approved alone what the approval covered: a
        scope of the review, and of the limit the approved amount exceeds."""
        approved = self.amount if self.edit is None else self.edit
        return (not self.scoped or "payments" in self.held) and (
            not self.limited or approved <= 1000 or "payments:large" in self.held
        )


_REVIEWED_CALLS = st.builds(
    _ReviewedCall,
    scoped=st.booleans(),
    four_eyes=st.booleans(),
    limited=st.booleans(),
    amount=st.sampled_from((500, 5000)),
    edit=st.sampled_from((None, 500, 5000)),
    held=st.frozensets(st.sampled_from(("payments", "payments:large"))),
    forked=st.booleans(),
)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    surface=st.sampled_from(sorted(_SURFACES)),
    command=st.sampled_from(("retry", "settle as run", "settle as not run", "give up")),
    case=_REVIEWED_CALLS,
)
def test_acting_on_a_reviewed_call_needs_what_its_approval_needed(
    surface: str, command: str, case: _ReviewedCall
) -> None:
    """A call approved under a policy, then in doubt (:class:`_ReviewedCall`): on every
    surface, a person's retry, settlement or giving up of its thread is accepted exactly
    when they could have approved alone what the approval covered (a scope of the
    review, and of the limit the approved amount exceeds), and a retry not under four
    eyes, which one person's word would undo; else nothing is recorded (ADR 0107). The
    same in a fork whose own review of the call was rejected by someone without the
    limit's scope: the parent's approval still binds (helper-135)."""
    may = case.may_settle and not (command == "retry" and case.four_eyes)
    with tempfile.TemporaryDirectory() as tmp, open_store(f"sqlite:///{tmp}/t.db") as store:
        token = case.set_up(store)
        before = store.head_version("t")
        assert _SURFACES[surface](store, command, token) is may
        assert (store.head_version("t") != before) is may


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_REVIEWED_CALLS)
def test_the_inbox_lists_a_call_in_doubt_exactly_to_whom_may_act_on_it(
    case: _ReviewedCall,
) -> None:
    """The same calls in doubt, paused for a person: a reviewer's inbox lists the pause,
    and shows its page, exactly when they may settle it, by the rule the commands
    enforce; it listed the pause to anyone holding the governing review's scope, who
    was then refused at every command."""
    with tempfile.TemporaryDirectory() as tmp, open_store(f"sqlite:///{tmp}/t.db") as store:
        token = case.set_up(store)
        ThreadService(store).pause_calls_in_doubt("t", "its runner died")
        app = create_inbox_app(store, HEX_VERIFIER)
        with TestClient(app, base_url="http://inbox.test") as client:
            desk = app.state.inbox.desk
            desk.queue.wait_until_current(store)
            listed = client.get("/api/pauses", headers={"Authorization": f"Bearer {token}"})
            try:  # a pause hidden from them reads as one no thread has
                page = desk.pause("t", "c1", reviewer=desk.service.reviewer(token))
            except ThreadNotFoundError:
                page = None
        assert listed.status_code == 200, listed.text
        shown = [(p["thread_id"], p["tool_call_id"]) for p in listed.json()]
        assert (("t", "c1") in shown) is case.may_settle
        assert (page is not None) is case.may_settle
        assert _by_service(store, "settle as not run", token) is case.may_settle
