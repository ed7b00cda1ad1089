"""A person re-authorizes the stack from the alert in a real browser: headless Chromium
(Debian's chromium, driven by Debian's chromedriver through Selenium) takes the link from the
message the stack published to SNS on moto's server, after a mail gateway and a chat unfurler
fetched every link in it; it opens the link, presses the button, compares the code, follows the
way to the emulator's activation pages and goes through them (Continue, Confirm, Confirm). The
background poll then authorizes the stack and reports it to the topic.

Screenshots of every page go to $CMSTOKEN_TEST_ARTIFACTS/<test> when that is set, else to the
test's tmp_path (pytest keeps the last three runs'); the run's summary says where.

`make test` installs Debian's chromium and chromium-driver (`make browser`); without them the
test is skipped. Selenium is given both paths and SE_OFFLINE, so Selenium Manager never runs.
The browser talks to 127.0.0.1 only; its background networking is off (this machine's network
is closed, and a test has no business elsewhere)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.common.exceptions import WebDriverException
from selenium.webdriver import Chrome, ChromeOptions, ChromeService
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.command import Command
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.wait import WebDriverWait

from cmstoken.links.pages import HEADERS
from links_harness import ACCOUNT, REGION, OneClick, PersonPacedClock, scan, secrets_now

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# What this machine's closed network needs: no background connections to Google's hosts.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1000,900",
)
WAIT = 60.0  # seconds for any page or outcome: generous for a slow shared CI machine
ARTIFACTS = "CMSTOKEN_TEST_ARTIFACTS"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()),
        reason=f"no {CHROMIUM} or {CHROMEDRIVER}: `make browser` installs Debian's chromium "
        "and chromium-driver (`make test` does)",
    ),
]


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Chrome]:
    """Headless Chromium with a new empty profile, its console and its network logged."""
    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager, were it ever asked: no network
    options = ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    service = ChromeService(
        executable_path=str(CHROMEDRIVER), log_output=str(tmp_path / "chromedriver.log")
    )
    driver = Chrome(options=options, service=service)
    driver.set_page_load_timeout(WAIT)
    driver.set_script_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def artifacts(request: pytest.FixtureRequest, tmp_path: Path, say: Callable[[str], None]) -> Path:
    """Where the screenshots go (module docstring), said in the run's summary."""
    root = os.environ.get(ARTIFACTS)
    folder = Path(root) / request.node.name if root else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    say(f"screenshots of the pages: {folder}")
    return folder


class Person:
    """What a person does in the browser: open, look (a screenshot of each page), press,
    follow. Each step waits, up to ``WAIT``, for the page it leads to."""

    def __init__(self, browser: Chrome, folder: Path) -> None:
        self.browser = browser
        self.folder = folder
        self.wait = WebDriverWait(browser, WAIT)
        self.pages = 0

    def sees(self, title: str, name: str) -> None:
        """The page loaded is the one titled ``title``; keep a screenshot of it."""
        self.wait.until(
            navigating(lambda b: b.execute_script("return document.readyState") == "complete")
        )
        shown = self.browser.title
        self.pages += 1
        path = self.folder / f"{self.pages}-{name if shown == title else 'unexpected'}.png"
        assert self.browser.save_screenshot(str(path)), path
        assert shown == title, f"expected the page {title!r}, the browser shows {shown!r}: " + (
            self.text()
        )

    def text(self, css: str = "body") -> str:
        return self.browser.find_element(By.CSS_SELECTOR, css).text

    def press(self, label: str) -> None:
        """Press the button ``label``; wait until the page it sends replaced this one."""
        self._leave(By.XPATH, f"//button[normalize-space()='{label}']")

    def follow(self, text: str) -> None:
        """Follow the link ``text``; wait until the page it leads to replaced this one."""
        self._leave(By.LINK_TEXT, text)

    def _leave(self, by: str, what: str) -> None:
        element = self.wait.until(ec.element_to_be_clickable((by, what)))
        element.click()
        self.wait.until(navigating(ec.staleness_of(element)))


def navigating(condition: Callable[[Chrome], object]) -> Callable[[Chrome], object]:
    """``condition``, asked again while a page is being replaced. Then ChromeDriver may answer
    "unhandled inspector error" (the old document's context is gone and the new one not yet
    there; seen on a busy CI machine): that is the navigation under way, not a failure."""

    def asked(browser: Chrome) -> object:
        try:
            return condition(browser)
        except WebDriverException as error:
            if "inspector error" in (error.msg or ""):
                return False
            raise

    return asked


def logged(browser: Chrome, log: str) -> list[dict[str, Any]]:
    """The entries of the browser's ``log`` since the last call (``get_log``, typed)."""
    entries: list[dict[str, Any]] = browser.execute(Command.GET_LOG, {"type": log})["value"]
    return entries


def network(browser: Chrome) -> list[dict[str, Any]]:
    """The DevTools network events the browser logged since the last call."""
    events = [json.loads(entry["message"])["message"] for entry in logged(browser, "performance")]
    return [event for event in events if event["method"].startswith("Network.")]


def errors(browser: Chrome) -> list[str]:
    """The errors on the browser's console since the last call (CSP violations among them)."""
    return [entry["message"] for entry in logged(browser, "browser") if entry["level"] == "SEVERE"]


def test_a_person_reauthorizes_in_a_browser_after_scanners_fetched_the_link(
    one_click: OneClick,
    person_paced: PersonPacedClock,
    browser: Chrome,
    artifacts: Path,
) -> None:
    stack, url = one_click.stack, one_click.url
    assert one_click.invoker.invoke("links", {"action": "remind"}) == {
        "done": "not_bootstrapped: sent"
    }
    (notice,) = one_click.notices()
    assert notice["kind"] == "never-bootstrapped"
    link = notice["link"]

    # a mail security gateway and a chat unfurler fetch every link in the message: GET, HEAD
    before = secrets_now(stack)
    (message,) = one_click.published()
    assert scan(one_click, message) == [link]
    assert secrets_now(stack) == before

    # the link's page: the stack it is about, and one button
    person = Person(browser, artifacts)
    browser.get(one_click.local(link))
    person.sees("Re-authorize the service token stack", "link")
    page = person.text()
    assert all(fact in page for fact in ("cmstoken-prod", ACCOUNT, REGION))
    # the page's own style applies: the CSP that came with it allows exactly that (its hash)
    button = browser.find_element(By.CSS_SELECTOR, "form button")
    assert button.value_of_css_property("background-color") == "rgba(11, 87, 208, 1)"
    person.press("Start the re-authorization")

    # the code page: the code, and the way on to the identity provider
    person.sees("Approve the re-authorization", "code")
    shown = person.text("p.code")
    pending = stack.refresh_document().pending
    assert pending is not None
    assert shown == pending.user_code
    posts = [e for e in url.events if e["requestContext"]["http"]["method"] == "POST"]
    assert len(posts) == 1  # the browser's own POST, from the page, passed the origin checks
    assert posts[0]["headers"]["origin"] == url.origin
    assert posts[0]["headers"]["sec-fetch-site"] == "same-origin"
    assert errors(browser) == []  # the pages' own style and form break none of their rules
    assert_csp_enforced(browser)
    ours = network(browser)
    go = browser.find_element(By.LINK_TEXT, "Continue to the identity provider")
    assert go.get_attribute("href") == pending.verification_uri_complete
    person.follow("Continue to the identity provider")

    # the identity provider's pages, as a person goes through them: the code is filled in
    person.sees("Device Activation", "activation")
    assert browser.find_element(By.NAME, "user_code").get_attribute("value") == shown
    theirs = network(browser)
    person.press("Continue")
    person.sees("Device Confirmation", "confirmation")
    assert person.text("strong") == shown  # the code the emulator shows is the page's
    person.press("Confirm")
    person.sees("Welcome", "consent")
    person.press("Confirm")
    person.sees("Congratulations, you're all set!", "approved")

    # the headers reached the browser; the link did not reach the identity provider
    assert_security_headers(ours, url.base_url + "/l/")
    assert_no_referrer(theirs, pending.verification_uri_complete)

    # the background poll finishes without the browser, and says so to the topic
    one_click.endpoint.drain(timeout=WAIT)
    outcome = one_click.notices(wait=WAIT)
    assert [n["kind"] for n in outcome] == ["authorized"]
    document = stack.refresh_document()
    assert document.credential is not None
    assert document.pending is None
    assert stack.published_token_works()

    # the link is void now
    browser.get(one_click.local(link))
    person.wait.until(lambda b: "no longer needed" in b.find_element(By.TAG_NAME, "body").text)
    assert browser.save_screenshot(str(artifacts / f"{person.pages + 1}-void.png"))


def assert_csp_enforced(browser: Chrome) -> None:
    """A style the page's CSP does not name is refused, and the browser says why."""
    violated = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "document.addEventListener('securitypolicyviolation',"
        " e => done(e.violatedDirective + ' ' + e.disposition), {once: true});"
        "const style = document.createElement('style');"
        "style.textContent = 'h1{color:rgb(255, 0, 0)}';"
        "document.head.append(style);"
    )
    assert violated == "style-src-elem enforce"
    heading = browser.find_element(By.TAG_NAME, "h1")
    assert heading.value_of_css_property("color") != "rgba(255, 0, 0, 1)"
    (error,) = errors(browser)
    assert "violates the following Content Security Policy directive" in error


def assert_security_headers(events: list[dict[str, Any]], prefix: str) -> None:
    """Every answer under ``prefix`` reached the browser with the pages' security headers."""
    answers = [
        {name.lower(): value for name, value in e["params"]["response"]["headers"].items()}
        for e in events
        if e["method"] == "Network.responseReceived"
        and e["params"]["response"]["url"].startswith(prefix)
    ]
    assert len(answers) == 2  # the link's page and the code page
    for headers in answers:
        for name, value in HEADERS.items():
            assert headers.get(name.lower()) == value, name


def assert_no_referrer(events: list[dict[str, Any]], address: str) -> None:
    """The request for the identity provider's page carried no Referer (the link is in it)."""
    (request,) = [
        e["params"]["request"]
        for e in events
        if e["method"] == "Network.requestWillBeSent" and e["params"]["request"]["url"] == address
    ]
    assert "referer" not in {name.lower() for name in request["headers"]}
