"""The reviewer inbox in a real headless Chromium, driven with Selenium.

Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them): absent, these
tests skip locally and fail in CI. The run saves screenshots of the inbox and of a
review page into ``docs/images/``, which the documentation shows, and of every page at
1280 and 400 pixels wide into the tests' temporary directories. axe-core (``make test``
installs it from ``package-lock.json`` with ``npm ci``) checks each page's accessibility.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from covonaut_es import AgentThread, Store, ToolContext, open_store
from covonaut_es.inbox import create_app
from covonaut_es.service import ThreadService
from inbox_support import HOSTILE, free_port, in_doubt, paused, paused_on_tool, resume
from support import answer, call
from test_approvals import ALICE, BOB, VERIFIER, make_agent, review_id

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ROOT = Path(__file__).resolve().parent.parent
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
WAIT_SECONDS = 15
PHONE = 400
"""The narrow viewport's width in CSS pixels: a small phone."""
LONG_PAYMENT = {
    "amount": 18450.0,
    "to": "Nordwind Logistik GmbH",
    "iban": "RU0204452560040702810412345678901",
    "memo": (
        "Invoice NW-2026-11-0042 freight Hamburg to Rotterdam, 14 pallets; reference "
        "NW20261100420000FREIGHTHAMBURGROTTERDAMCUSTOMSCLEARANCELATEDELIVERYCREDIT; "
        "incl. customs clearance and the late-delivery credit agreed on 28 November"
    ),
}
"""A payment whose IBAN (the longest kind) and memo (with a long unbroken reference) a
narrow screen must show whole."""

if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    reason = f"needs {CHROMIUM} and {CHROMEDRIVER} (Debian's chromium, chromium-driver)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: .ci/run installs them", pytrace=False)
    pytest.skip(reason, allow_module_level=True)

uvicorn = pytest.importorskip("uvicorn")
webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import (  # noqa: E402
    ElementNotInteractableException,
    NoAlertPresentException,
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path_factory.mktemp('inbox') / 'threads.db'}"
    with open_store(url) as opened:
        yield opened


@pytest.fixture(scope="module")
def inbox(store: Store) -> Iterator[str]:
    """The inbox served by uvicorn on a free loopback port; its base URL."""
    port = free_port()
    config = uvicorn.Config(
        create_app(store, VERIFIER, wait_seconds=5),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    WebDriverWait(None, WAIT_SECONDS, poll_frequency=0.05).until(lambda _: server.started)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def chromium(profile: Path) -> Any:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=str(CHROMEDRIVER))
    return webdriver.Chrome(options=options, service=service)


@pytest.fixture(scope="module")
def browsers(inbox: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """Two browsers, signed in as alice and as bob."""
    drivers = [chromium(tmp_path_factory.mktemp("profile")) for _ in range(2)]
    try:
        for driver, token in zip(drivers, (ALICE, BOB), strict=True):
            driver.get(f"{inbox}/login")
            driver.find_element(By.ID, "token").send_keys(token)
            driver.find_element(By.ID, "sign-in").click()
            until(driver, lambda d: d.find_elements(By.ID, "queue"))
        yield drivers[0], drivers[1]
    finally:
        for driver in drivers:
            driver.quit()


def until(driver: Any, condition: Callable[[Any], Any]) -> Any:
    """``condition``'s first truthy value; the live update may replace the rows at any
    moment, so an element gone stale is looked up again."""
    ignored = (StaleElementReferenceException, NoSuchElementException)
    wait = WebDriverWait(driver, WAIT_SECONDS, poll_frequency=0.05, ignored_exceptions=ignored)
    return wait.until(condition)


def in_row(
    driver: Any, thread_id: str, class_name: str, read: Callable[[Any], Any], row: str = "review"
) -> Any:
    """``read`` of the element of that class in the inbox row of ``thread_id``'s review
    (or, with ``row="pause"``, its other pause), once the row is shown."""
    row = f"//tr[@class='{row}'][.//a[normalize-space(text())='{thread_id}']]"
    return until(
        driver,
        lambda d: read(d.find_element(By.XPATH, row).find_element(By.CLASS_NAME, class_name)),
    )


def open_review(driver: Any, inbox: str, thread_id: str) -> None:
    driver.get(inbox)
    driver.get(in_row(driver, thread_id, "open", lambda link: link.get_attribute("href")))
    until(driver, lambda d: d.find_elements(By.ID, "arguments"))


def open_pause(driver: Any, inbox: str, thread_id: str) -> None:
    driver.get(inbox)
    link = in_row(driver, thread_id, "open", lambda a: a.get_attribute("href"), row="pause")
    driver.get(link)
    until(driver, lambda d: d.find_elements(By.ID, "kind"))


@pytest.fixture(scope="module")
def axe() -> str:
    """axe-core's source, from the project's node_modules (``npm ci`` installs it)."""
    if not AXE.exists():
        reason = f"needs {AXE}: run `make node-tools` (npm ci)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; make test installs it", pytrace=False)
        pytest.skip(reason)
    return AXE.read_text()


def violations(driver: Any, axe: str) -> list[str]:
    """axe-core's critical and serious violations on the page, each as its rule, impact
    and the elements it found."""
    if not driver.execute_script("return typeof window.axe !== 'undefined';"):
        driver.execute_script(axe)
    driver.set_script_timeout(60)
    found = driver.execute_async_script(
        """const done = arguments[arguments.length - 1];
        axe.run(document, {resultTypes: ["violations"]}).then(
          (result) => done(result.violations
            .filter((v) => v.impact === "critical" || v.impact === "serious")
            .map((v) => `${v.id} (${v.impact}): ` +
                        v.nodes.map((n) => n.target.join(" ")).join(", "))),
          (error) => done([`axe failed: ${error}`]));"""
    )
    return list(found)


OVERFLOWING = """
const width = document.documentElement.clientWidth;
const found = [];
for (const element of document.querySelectorAll(arguments[0])) {
  const box = element.getBoundingClientRect();
  if (element.scrollWidth > element.clientWidth || box.left < 0 || box.right > width + 0.5) {
    found.push(`${element.id || element.className || element.tagName}: ` +
               `${element.scrollWidth} > ${element.clientWidth} or ${box.left}..${box.right}`);
  }
}
const page = document.documentElement.scrollWidth;
if (page > width) found.push(`the page: ${page} > ${width}`);
return found;
"""
"""The elements ``arguments[0]`` selects that are clipped (their content wider than
their box) or reach outside the viewport horizontally, and the page if it scrolls
sideways."""


def clipped(driver: Any, selector: str) -> list[str]:
    """What :data:`OVERFLOWING` finds, once the elements ``selector`` names are shown."""
    assert until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, selector))
    return list(driver.execute_script(OVERFLOWING, selector))


@contextmanager
def viewport(driver: Any, width: int) -> Iterator[None]:
    """The browser's viewport ``width`` CSS pixels wide, as a phone's when narrow."""
    metrics = {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 800}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    try:
        yield
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def screenshot(driver: Any, path: Path) -> None:
    """The whole page, as tall as it is, into ``path`` (PNG)."""
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    path.write_bytes(base64.b64decode(shot["data"]))


def decisions(store: Store, thread_id: str) -> list[AgentThread.ReviewDecided]:
    return [e for e in store.history(thread_id) if isinstance(e, AgentThread.ReviewDecided)]


def screenshots(tmp_path: Path) -> Path:
    """Where a test saves what the browser shows: the test's own folder, so that a run
    leaves the checkout as it was, or the folder ``COVONAUT_ES_DOCS_IMAGES`` names
    (``docs/images`` refreshes the documentation's pictures)."""
    folder = Path(os.environ.get("COVONAUT_ES_DOCS_IMAGES") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_a_new_review_appears_live_and_hostile_arguments_stay_text(
    store: Store, inbox: str, browsers: tuple[Any, Any], tmp_path: Path
) -> None:
    """Signed in, the open inbox shows a review an agent asks for without a reload; a
    <script> in its arguments is shown as text and never runs."""
    alice, _ = browsers
    alice.get(inbox)
    marker = alice.execute_script("return window.covonautMarker = 'same page';")
    make_agent(
        store, [call(("c1", "pay", json.dumps({"amount": 5, "to": HOSTILE})))], [],
        thread_id="hostile",
    ).run("pay")  # fmt: skip
    paused(store, "live", [], [])
    assert in_row(alice, "live", "tool", lambda cell: cell.text) == "pay"
    assert alice.execute_script("return window.covonautMarker;") == marker  # no reload
    hostile = in_row(alice, "hostile", "arguments", lambda cell: cell.text)
    assert json.dumps(HOSTILE) in hostile
    assert alice.title.endswith("covonaut-es") and "pwned" not in alice.title
    with pytest.raises(NoAlertPresentException):
        alice.switch_to.alert.text  # noqa: B018
    assert alice.save_screenshot(str(screenshots(tmp_path) / "inbox.png"))


def test_approve_with_edited_arguments_shows_edit_and_reviewer_in_the_history(
    store: Store, inbox: str, browsers: tuple[Any, Any], tmp_path: Path
) -> None:
    """The edit is approved; the tool runs with exactly the edit; the thread page's
    history names the edit and alice."""
    alice, _ = browsers
    runs: list[ToolContext] = []
    paused(store, "edited", [], runs)
    open_review(alice, inbox, "edited")
    assert alice.save_screenshot(str(screenshots(tmp_path) / "review.png"))
    edited = alice.find_element(By.ID, "edited-arguments")
    edited.clear()
    edited.send_keys('{"amount": 25, "to": "bob"}')
    alice.find_element(By.ID, "approve-edited").click()
    decided = until(alice, lambda d: d.find_elements(By.ID, "decision"))[0]
    assert "alice" in decided.text and '"amount": 25' in decided.text
    alice.get(f"{inbox}/thread?id=edited")
    timeline = alice.find_element(By.ID, "timeline").text
    assert "approved by alice with edited arguments" in timeline
    assert '"amount":25' in timeline
    script = [call(("c2", "pay", '{"amount": 25, "to": "bob"}')), answer("Paid 25.")]
    assert resume(store, "edited", script, runs) == "Paid 25."
    (ran,) = runs
    assert ran.approval is not None and ran.approval.arguments == {"amount": 25, "to": "bob"}


def test_respond_instead_and_the_tool_never_runs(
    store: Store, inbox: str, browsers: tuple[Any, Any]
) -> None:
    """The reviewer's answer is the call's result; the tool never runs."""
    _, bob = browsers
    runs: list[ToolContext] = []
    paused(store, "answered", [], runs)
    open_review(bob, inbox, "answered")
    bob.find_element(By.ID, "answer").send_keys("Bob was paid on Monday.")
    bob.find_element(By.ID, "respond").click()
    decided = until(bob, lambda d: d.find_elements(By.ID, "decision"))[0]
    assert "responded" in decided.text and "bob" in decided.text
    assert resume(store, "answered", [answer("No payment needed.")], runs) == "No payment needed."
    assert runs == []


def test_a_forged_cross_site_post_is_refused(
    store: Store, inbox: str, browsers: tuple[Any, Any], tmp_path: Path
) -> None:
    """A page on another loopback origin auto-submits a decision form to the inbox
    with alice's cookie: refused, and nothing is decided."""
    alice, _ = browsers
    paused(store, "forged", [], [])
    open_review(alice, inbox, "forged")
    review_id = alice.find_element(By.NAME, "review").get_attribute("value")
    csrf = alice.find_element(By.NAME, "csrf").get_attribute("value")
    (tmp_path / "index.html").write_text(
        f"""<form id="f" method="post" action="{inbox}/decide">
        <input name="action" value="approve"><input name="review" value="{review_id}">
        <input name="thread" value="forged"><input name="csrf" value="{csrf}"></form>
        <script>document.getElementById("f").submit();</script>"""
    )
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path))  # noqa: E731
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as evil:
        threading.Thread(target=evil.serve_forever, daemon=True).start()
        try:
            alice.get(f"http://127.0.0.1:{evil.server_address[1]}/index.html")
            message = until(alice, lambda d: d.find_elements(By.ID, "message"))[0]
        finally:
            evil.shutdown()
    assert "another site" in message.text
    assert decisions(store, "forged") == []


def test_two_reviewers_at_once_one_wins_the_other_is_told(
    store: Store, inbox: str, browsers: tuple[Any, Any]
) -> None:
    """alice and bob approve the same review at the same moment: one decision is
    recorded, and the other reviewer is told it was decided, and by whom: by the page
    their approval brings back, or, when the winner's decision reached their page
    first, by its live status, which takes the buttons away before their click."""
    alice, bob = browsers
    paused(store, "raced", [], [])
    for driver in browsers:
        open_review(driver, inbox, "raced")

    def approve(driver: Any) -> str:
        try:
            driver.find_element(By.ID, "approve").click()
        except ElementNotInteractableException:  # hidden by the live status meanwhile
            until(driver, lambda d: d.find_elements(By.ID, "decided-elsewhere-text"))
            return "told live"
        until(driver, lambda d: d.find_elements(By.ID, "decision"))
        return "told" if driver.find_elements(By.ID, "message") else "recorded"

    with ThreadPoolExecutor(2) as pool:
        outcomes = dict(zip((alice, bob), pool.map(approve, (alice, bob)), strict=True))
    assert sorted(outcomes.values()) in (["recorded", "told"], ["recorded", "told live"])
    (winner,) = [d for d, outcome in outcomes.items() if outcome == "recorded"]
    (loser,) = [d for d in outcomes if d is not winner]
    (decision,) = decisions(store, "raced")
    if outcomes[loser] == "told":
        assert "already" in loser.find_element(By.ID, "message").text
    else:
        told = loser.find_element(By.ID, "decided-elsewhere-text").text
        assert decision.reviewer in told


def test_a_tools_pause_is_answered_and_a_call_in_doubt_settled(
    store: Store, inbox: str, browsers: tuple[Any, Any]
) -> None:
    """alice answers a tool's pause whose data holds a <script> (shown as text, never
    run), bob settles a call in doubt after reading its idempotency key: each page then
    says the thread waits for a runner, the store agrees, and the inbox lists neither."""
    alice, bob = browsers
    paused_on_tool(store, "asked", data={"question": HOSTILE})
    key = in_doubt(store, "doubted")
    alice.get(inbox)
    assert in_row(alice, "asked", "kind", lambda cell: cell.text, row="pause") == "Tool's pause"
    open_pause(alice, inbox, "asked")
    assert json.dumps(HOSTILE) in alice.find_element(By.ID, "data").text
    assert "pwned" not in alice.title
    with pytest.raises(NoAlertPresentException):
        alice.switch_to.alert.text  # noqa: B018
    alice.find_element(By.ID, "answer").send_keys("Refund to account 9.")
    alice.find_element(By.ID, "send-answer").click()
    assert (
        "waits for a runner" in until(alice, lambda d: d.find_elements(By.ID, "resolved"))[0].text
    )
    assert store.state_at("asked").waiting_for == "runner"
    open_pause(bob, inbox, "doubted")
    assert bob.find_element(By.ID, "kind").text == "Call in doubt"
    assert bob.find_element(By.ID, "idempotency-key").text == key
    assert "acct-7" in bob.find_element(By.ID, "arguments").text
    bob.find_element(By.ID, "result").send_keys("Sent once: ledger entry 77.")
    bob.find_element(By.ID, "settle-ran").click()
    (resolved,) = until(bob, lambda d: d.find_elements(By.ID, "resolved"))
    assert "waits for a runner" in resolved.text
    assert store.state_at("doubted").waiting_for == "runner"
    bob.get(inbox)
    shown = until(bob, lambda d: d.find_element(By.ID, "queue")).text
    assert "asked" not in shown and "doubted" not in shown


def test_every_page_at_1280_and_400_pixels_has_no_serious_accessibility_violation(
    store: Store, inbox: str, browsers: tuple[Any, Any], axe: str, tmp_path: Path
) -> None:
    """The queue, a review with a long IBAN and memo, a tool's pause, a call in doubt,
    a thread, the sign-in page and an error page: axe-core finds no critical or serious
    violation on any of them, wide or at 400 pixels."""
    alice, _ = browsers
    make_agent(
        store, [call(("c1", "pay", json.dumps(LONG_PAYMENT)))], [], thread_id="wide-and-narrow"
    ).run("Pay Nordwind.")
    paused_on_tool(store, "asked-a11y", data={"question": "Which account?"})
    in_doubt(store, "doubted-a11y")
    open_review(alice, inbox, "wide-and-narrow")
    review = alice.current_url
    open_pause(alice, inbox, "asked-a11y")
    asked = alice.current_url
    open_pause(alice, inbox, "doubted-a11y")
    doubted = alice.current_url
    pages = {
        "queue": inbox,
        "review": review,
        "pause": asked,
        "in-doubt": doubted,
        "thread": f"{inbox}/thread?id=wide-and-narrow",
        "sign-in": f"{inbox}/login",
        "not-found": f"{inbox}/review?id=no-such-review",
    }
    found = {}
    for width in (1280, PHONE):
        with viewport(alice, width):
            for name, url in pages.items():
                alice.get(url)
                until(alice, lambda d: d.find_elements(By.TAG_NAME, "main"))
                found[f"{name} at {width}"] = violations(alice, axe)
                screenshot(alice, tmp_path / f"{name}-{width}.png")
    assert found == {page: [] for page in found}


def test_at_400_pixels_nothing_of_the_operation_is_clipped_and_the_queue_links_show(
    store: Store, inbox: str, browsers: tuple[Any, Any], tmp_path: Path
) -> None:
    """On a 400 pixel wide phone, the review page shows the tool, every argument (the
    whole IBAN and memo) and the digest inside their boxes and the viewport, each of the
    queue's rows shows its link to open it, and an approval with edited arguments shows
    the edit and its digest whole."""
    alice, _ = browsers
    make_agent(store, [call(("c1", "pay", json.dumps(LONG_PAYMENT)))], [], thread_id="phone").run(
        "Pay Nordwind."
    )
    open_review(alice, inbox, "phone")
    review = alice.current_url
    with viewport(alice, PHONE):
        alice.get(review)
        assert alice.execute_script("return document.documentElement.clientWidth;") == PHONE
        assert clipped(alice, "h1 .tool, #tool, #arguments, #digest") == []
        shown = alice.find_element(By.ID, "arguments").text
        assert LONG_PAYMENT["iban"] in shown
        assert LONG_PAYMENT["memo"] in shown.replace("\n", " ")
        box = alice.find_element(By.ID, "arguments")
        assert int(box.get_attribute("scrollHeight")) <= int(box.get_attribute("clientHeight"))
        screenshot(alice, tmp_path / "review-400.png")
        alice.get(inbox)
        assert clipped(alice, "tr.review .tool, tr.review pre.arguments, tr.review a.open") == []
        screenshot(alice, tmp_path / "queue-400.png")
        alice.get(review)
        edit = json.dumps({**LONG_PAYMENT, "memo": LONG_PAYMENT["memo"] + " (checked)"})
        alice.execute_script(
            "document.getElementById('edited-arguments').value = arguments[0];", edit
        )
        alice.find_element(By.ID, "approve-edited").click()
        assert clipped(alice, "#edited, #decision .digest, #arguments, #digest") == []
        assert "(checked)" in alice.find_element(By.ID, "edited").text
        screenshot(alice, tmp_path / "decided-400.png")
    alice.get(review)
    screenshot(alice, tmp_path / "decided-1280.png")


def test_a_refused_decision_stays_on_the_review_page_and_a_decision_offers_the_next(
    store: Store, inbox: str, browsers: tuple[Any, Any], axe: str
) -> None:
    """Edited arguments that are no JSON are refused on the review page itself, with
    what was typed kept and nothing recorded; the approval that follows shows the
    decision and a link to the next review; both pages pass axe-core."""
    _, bob = browsers
    paused(store, "typed", [], [])
    paused(store, "typed-next", [], [])
    open_review(bob, inbox, "typed")
    edited = bob.find_element(By.ID, "edited-arguments")
    edited.clear()
    edited.send_keys('{"amount": 25, "to": ')
    bob.find_element(By.ID, "approve-edited").click()
    (error,) = until(bob, lambda d: d.find_elements(By.ID, "error"))
    assert error.get_attribute("role") == "alert" and "nothing was recorded" in error.text.lower()
    assert bob.find_element(By.ID, "edited-arguments").get_attribute("value") == (
        '{"amount": 25, "to": '
    )
    assert bob.find_elements(By.ID, "arguments") and decisions(store, "typed") == []
    assert violations(bob, axe) == []
    bob.find_element(By.ID, "approve").click()
    until(bob, lambda d: d.find_elements(By.ID, "decision"))
    assert not bob.find_elements(By.ID, "error")
    assert len(decisions(store, "typed")) == 1
    assert violations(bob, axe) == []
    bob.find_element(By.ID, "next-review").click()
    until(bob, lambda d: d.find_elements(By.ID, "arguments"))
    assert "/review?" in bob.current_url and not bob.find_elements(By.ID, "decision")


def test_reject_stands_apart_looks_unlike_approve_and_respond_and_asks_first(
    store: Store, inbox: str, browsers: tuple[Any, Any]
) -> None:
    """The review page shows the operation and the messages before the actions; approve,
    respond and reject look different; rejecting, in its own section after the others,
    asks for confirmation: dismissed, nothing is recorded; confirmed, the rejection is."""
    alice, _ = browsers
    paused(store, "rejected-apart", [], [])
    open_review(alice, inbox, "rejected-apart")
    order = alice.execute_script(
        """const at = (selector) => [...document.querySelectorAll("main > *")]
             .findIndex((e) => e.matches(selector) || e.querySelector(selector));
           return ["#arguments", ".messages", "#approve", "#reject"].map(at);"""
    )
    assert order == sorted(order) and len(set(order)) == 4
    colours = {
        button: alice.execute_script(
            "return getComputedStyle(document.getElementById(arguments[0])).backgroundColor;",
            button,
        )
        for button in ("approve", "respond", "reject")
    }
    assert len(set(colours.values())) == 3, colours
    alice.find_element(By.ID, "reason").send_keys("Not this supplier.")
    alice.find_element(By.ID, "reject").click()
    until(alice, lambda d: d.switch_to.alert).dismiss()
    assert decisions(store, "rejected-apart") == []
    alice.find_element(By.ID, "reject").click()
    until(alice, lambda d: d.switch_to.alert).accept()
    decided = until(alice, lambda d: d.find_elements(By.ID, "decision"))[0]
    assert "rejected" in decided.text
    assert [d.decision for d in decisions(store, "rejected-apart")] == ["rejected"]


def test_an_open_review_page_learns_of_another_reviewers_decision(
    store: Store, inbox: str, browsers: tuple[Any, Any], axe: str, tmp_path: Path
) -> None:
    """alice has a review open; bob approves it through the agent's API, not this page:
    without a submit or a reload, alice's page says who decided what in its live region,
    leaves no approve button enabled and offers the next review; it passes axe-core at
    1280 and 400 pixels in that state."""
    alice, _ = browsers
    agent = paused(store, "decided-elsewhere", [], [])
    paused(store, "decided-elsewhere-next", [], [])
    open_review(alice, inbox, "decided-elsewhere")
    marker = alice.execute_script("return window.covonautMarker = 'same page';")
    agent.approve(review_id(agent), reviewer=BOB, comment="paid by phone")
    (notice,) = until(alice, lambda d: d.find_elements(By.ID, "decided-elsewhere"))
    assert "This review was decided by bob (approved)" in notice.text
    assert alice.find_element(By.ID, "live-status").get_attribute("aria-live") == "polite"
    assert alice.execute_script("return window.covonautMarker;") == marker  # no reload
    for button in ("approve", "approve-edited", "respond", "reject"):
        shown = alice.find_element(By.ID, button)
        assert not shown.is_enabled() and not shown.is_displayed()
    assert "decided-elsewhere-next" in alice.find_element(By.ID, "next-review-live").text
    assert len(alice.find_elements(By.ID, "next-review")) == 0
    found = {}
    for width in (1280, PHONE):
        with viewport(alice, width):
            found[width] = violations(alice, axe)
            screenshot(alice, tmp_path / f"decided-elsewhere-{width}.png")
    assert found == {1280: [], PHONE: []}
    alice.find_element(By.ID, "next-review-live").click()
    until(alice, lambda d: d.find_elements(By.ID, "arguments"))
    assert "decided-elsewhere-next" in alice.find_element(By.TAG_NAME, "main").text


def test_an_open_pause_page_learns_the_thread_was_given_up(
    store: Store, inbox: str, browsers: tuple[Any, Any]
) -> None:
    """bob has a tool's pause open; alice gives the thread up elsewhere: bob's page says
    so without a reload and leaves none of its forms enabled."""
    _, bob = browsers
    paused_on_tool(store, "given-up-live", data={"question": "Which account?"})
    open_pause(bob, inbox, "given-up-live")
    service = ThreadService(store, verifier=VERIFIER)
    service.abandon("given-up-live", "duplicate request", reviewer=service.reviewer(ALICE))
    (notice,) = until(bob, lambda d: d.find_elements(By.ID, "decided-elsewhere"))
    assert "given up" in notice.text
    for button in ("send-answer", "abandon"):
        shown = bob.find_element(By.ID, button)
        assert not shown.is_enabled() and not shown.is_displayed()


def test_a_review_under_a_policy_shows_its_text_and_only_its_actions_wide_and_narrow(
    store: Store, inbox: str, browsers: tuple[Any, Any], axe: str, tmp_path: Path
) -> None:
    """A review under four eyes with a long description: the text is shown whole at 400
    pixels, only the allowed forms are offered, and axe-core finds no critical or
    serious violation before and after the first approval, which the page shows as in
    part while the reviewer who gave it is no longer offered to approve."""
    from covonaut_es import ReviewPolicy
    from test_review_policy import pay

    alice, _ = browsers
    policy = ReviewPolicy(
        decisions={"approved", "rejected"},
        editable=("amount",),
        describe=lambda args: f"Invoice 2026-118 for {args['to']}: " + "pay on receipt " * 12,
        four_eyes=True,
    )
    tool = pay([], policy)
    payment = json.dumps({"amount": 40, "to": LONG_PAYMENT["iban"]})
    make_agent(store, [call(("c1", "pay", payment))], [], thread_id="policed", tool=tool).run(
        "Pay the invoice."
    )
    open_review(alice, inbox, "policed")
    review = alice.current_url
    found = {}
    for width in (1280, PHONE):
        with viewport(alice, width):
            alice.get(review)
            forms = {f.get_attribute("id") for f in alice.find_elements(By.TAG_NAME, "form")}
            assert {"approve-form", "edit-form", "reject-form"} <= forms
            assert "respond-form" not in forms
            assert clipped(alice, "#review-description, #four-eyes") == []
            found[f"review at {width}"] = violations(alice, axe)
            screenshot(alice, tmp_path / f"policy-review-{width}.png")
    alice.find_element(By.ID, "approve").click()
    until(alice, lambda d: "Approved in part by" in d.find_element(By.ID, "four-eyes").text)
    assert not alice.find_elements(By.ID, "approve-form")
    with viewport(alice, PHONE):
        alice.get(review)
        found["approved in part at 400"] = violations(alice, axe)
        screenshot(alice, tmp_path / "policy-in-part-400.png")
    assert found == {page: [] for page in found}
