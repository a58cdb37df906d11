"""The console in a real browser against a real `appliance up` (docs/console.md): the page
loads in headless Chromium with nothing refused by its Content-Security-Policy, and the
browser enforces that policy (an inline script in a page served with the console's headers
does not run).

Until the front end lands in appliance/console/static/, the appliance serves the small page
of conftest.write_console() (through the setting console_static_dir); with the real front
end, the same test checks the real page.
"""

from .conftest import csp_violations


def test_the_console_loads_with_no_csp_violation(console_appliance, page, shot):
    response = page.goto(console_appliance.console_url)
    assert response.status == 200
    assert response.headers["content-security-policy"].startswith("default-src 'none'")
    page.wait_for_load_state("load")
    heading = page.locator("h1").first
    heading.wait_for(state="visible", timeout=30_000)
    assert heading.inner_text().strip()
    if console_appliance.console_dir is not None:
        # write_console()'s page: its module script ran and imported its sibling module
        # by relative name (script-src 'self', no ?v on the import)
        page.wait_for_function(
            "document.getElementById('status').textContent === 'ready'", timeout=30_000)
    path = shot(page, "console")
    assert path.stat().st_size > 0 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert csp_violations(page) == []
    assert page.failed_responses == []
    errors = [text for kind, text in page.console_messages if kind in ("error", "pageerror")]
    assert errors == [], errors


def test_the_browser_enforces_the_console_policy(console_appliance, page, shot):
    """A page carrying the console's real headers (fetched from the appliance) with an
    inline script: Chromium refuses to run it and reports the violation. This is what keeps
    an injected `<script>` from running even if some value escaped escaping."""
    probe = console_appliance.console_url + "csp-probe.html"

    def serve(route):
        real = route.fetch(url=console_appliance.console_url)
        route.fulfill(response=real, status=200, body=(
            "<!doctype html><html><head><title>probe</title></head><body>"
            "<h1 id='h'>untouched</h1>"
            "<script>document.getElementById('h').textContent = 'inline ran';</script>"
            "<div style='color: red' id='styled'>styled</div></body></html>"),
            headers={**real.headers, "content-type": "text/html; charset=utf-8"})

    page.route(probe, serve)
    page.goto(probe)
    page.wait_for_load_state("load")
    shot(page, "csp-probe")
    assert page.inner_text("#h") == "untouched"
    assert page.evaluate("getComputedStyle(document.getElementById('styled')).color") \
        != "rgb(255, 0, 0)"
    refused = csp_violations(page)
    assert any("script-src" in v for v in refused), refused


WRITE = """async ([name, withCsrf]) => {
  const headers = {"Content-Type": "application/json"};
  const csrf = document.cookie.split("; ").find((c) => c.startsWith("appliance_csrf="));
  if (withCsrf && csrf) headers["X-CSRF-Token"] = csrf.split("=")[1];
  const r = await fetch("/v1/iam/projects", {method: "POST", headers,
                                             credentials: "same-origin",
                                             body: JSON.stringify({name})});
  return r.status;
}"""


def test_the_session_cookie_in_a_real_browser(console_appliance, page, login, shot):
    """What the browser itself does with the cookies: the page's script cannot read the
    session cookie (HttpOnly) but reads the CSRF one, and a write from the page is refused
    without the header and accepted with it."""
    page.goto(console_appliance.console_url)
    described = login(page, via="api")
    assert described["user"]["username"] == "admin"
    cookies = {c["name"]: c for c in page.context.cookies()}
    assert cookies["appliance_session"]["httpOnly"] is True
    assert cookies["appliance_session"]["sameSite"] == "Strict"
    assert cookies["appliance_csrf"]["httpOnly"] is False
    seen_by_script = page.evaluate("document.cookie")
    assert "appliance_session" not in seen_by_script
    assert "appliance_csrf=" in seen_by_script
    before = {p["name"] for p in console_appliance.admin.get("/v1/iam/projects").json}
    assert page.evaluate(WRITE, ["from-the-browser-forged", False]) == 403
    names = {p["name"] for p in console_appliance.admin.get("/v1/iam/projects").json}
    assert names == before
    assert page.evaluate(WRITE, ["from-the-browser", True]) == 201
    assert "from-the-browser" in {
        p["name"] for p in console_appliance.admin.get("/v1/iam/projects").json}
    shot(page, "logged-in")
