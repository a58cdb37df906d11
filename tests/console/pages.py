"""What the console's browser tests do on every page: open a route, wait for its heading,
and check that nothing went wrong in it (no page error, no CSP violation)."""

from tests.browser import csp_violations
from tests.waiting import eventually

WAIT_MS = 30_000


def open_hash(page, console_appliance, fragment):
    page.goto(console_appliance.console_url + "#" + fragment)


def heading(page, text):
    page.get_by_role("heading", level=1, name=text).wait_for(timeout=WAIT_MS)


def no_page_errors(page):
    errors = [text for kind, text in page.console_messages if kind == "pageerror"]
    assert errors == [], errors
    assert csp_violations(page) == []


def stream_live(page, seconds=30, what="the event stream to open"):
    """Until the header says the page's event stream is open."""
    eventually(lambda: page.locator("header .stream").inner_text() == "live", seconds, what)


def mark_document(page):
    """A flag in the page's window: still there later means the page was never reloaded."""
    page.evaluate("() => { window.__sameDocument = true; }")


def not_reloaded(page):
    return page.evaluate("window.__sameDocument === true")
