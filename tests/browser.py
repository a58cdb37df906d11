"""Headless Chromium for the tests and benches that drive the web console (docs/console.md):
the console's browser tests against `appliance up` (tests/console/), the same login against
the booted image over HTTPS (tests/image/test_console_https.py) and the console's bench
(tests/bench/bench_console.py) all launch the browser the same way and save screenshots
the same way, so it is written once here.

Debian's chromium, driven by Playwright's Python package (its node driver is bundled);
`playwright install` is never run and no browser is ever downloaded. A conftest imports
the fixtures it wants (`from tests.browser import browser, shot`)."""

import os
import re
import shutil

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ARTIFACTS = "APPLIANCE_TEST_ARTIFACTS"


def launch(playwright, extra_args=()):
    """Debian's Chromium, headless, with a fresh temporary profile of Playwright's own
    (removed when it closes)."""
    if not os.access(CHROMIUM, os.X_OK):
        raise RuntimeError(f"{CHROMIUM} is missing: `make setup` as root installs Debian's "
                           "chromium and chromium-driver")
    return playwright.chromium.launch(executable_path=CHROMIUM,
                                      args=CHROMIUM_ARGS + list(extra_args), headless=True)


@pytest.fixture(scope="session")
def browser(playwright_driver):
    """Headless Chromium (Debian's). Each test gets its own context, so no cookie passes
    from one test to the next."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: `make setup` as root installs Debian's "
                    "chromium and chromium-driver")
    chromium = launch(playwright_driver)
    yield chromium
    chromium.close()


# collects CSP violations as the page sees them (an init script runs outside the page's
# CSP); the console log reports them too, which watch() keeps
CSP_PROBE = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(e.violatedDirective + " " + (e.blockedURI || "inline"));
});
"""


def watched_page(context):
    """A new page of `context` whose console messages are kept in `page.console_messages`
    ([(type, text)], page errors as "pageerror") and whose answers >= 400 in
    `page.failed_responses` ([(status, url)]); `csp_violations(page)` tells what its CSP
    refused. The context needs CSP_PROBE as an init script (new_context does not add it)."""
    opened = context.new_page()
    opened.console_messages = []
    opened.on("console", lambda m: opened.console_messages.append((m.type, m.text)))
    opened.on("pageerror", lambda e: opened.console_messages.append(("pageerror", str(e))))
    opened.failed_responses = []
    opened.on("response", lambda r: r.status >= 400 and opened.failed_responses.append(
        (r.status, r.url)))
    return opened


def csp_violations(page):
    """What the page's Content-Security-Policy refused: the page's own reports and the
    console's 'Refused to ...' errors."""
    reported = page.evaluate("window.__cspViolations || []")
    logged = [text for kind, text in page.console_messages
              if "Content Security Policy" in text]
    return reported + logged


def safe_name(name):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")[:120]


@pytest.fixture
def shot(request, tmp_path):
    """shot(page, name) -> the PNG's path: a full-page screenshot under the test's output
    folder (<tmp_path>/screenshots/), copied to $APPLIANCE_TEST_ARTIFACTS/<test>/ when that
    variable is set, so that a person can look at the pages a test visited."""
    folder = tmp_path / "screenshots"

    def take(page, name):
        folder.mkdir(exist_ok=True)
        path = folder / f"{safe_name(name)}.png"
        page.screenshot(path=str(path), full_page=True)
        artifacts = os.environ.get(ARTIFACTS)
        if artifacts:
            target = os.path.join(artifacts, safe_name(request.node.nodeid))
            os.makedirs(target, exist_ok=True)
            shutil.copy(path, target)
        return path
    return take
