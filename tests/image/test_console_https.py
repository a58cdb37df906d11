"""The web console served by the booted image (docs/console.md, "Served by the image"):
headless Chromium (tests/browser.py) opens https://127.0.0.1:<forwarded 443>/console/ on
the session's one boot (`box`), logs in as admin through the form, and sees the overview
with the image's version and an event that arrives live through nginx.

The browser trusts exactly the appliance's certificate: the one whose fingerprint the
console's banner showed (Box.fingerprint, checked again here), pinned by its public key
with Chromium's --ignore-certificate-errors-spki-list (the certificate names the guest, not
127.0.0.1, so an ordinary CA trust would still fail on the name; pinning the key is the
narrower trust, and `ignore_https_errors` would accept any certificate at all)."""

import base64
import hashlib
import uuid

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from tests.browser import CSP_PROBE, csp_violations, launch, watched_page
from tests.browser import shot  # noqa: F401 (the fixture)
from tests.console.helpers import parse_set_cookie
from tests.console.pages import stream_live
from tests.image.guest import PASSWORD, served_fingerprint

# on the shared boot: slow like the other tests of `box` (a quick run, -m "not slow",
# builds and boots nothing)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

WAIT_MS = 120_000           # a TCG guest answers slowly; every wait is bounded anyway
STATIC = "/opt/appliance/venv/lib/python3*/site-packages/appliance/console/static"


def spki_pin(pem):
    """base64(sha256(SubjectPublicKeyInfo)): the form Chromium's
    --ignore-certificate-errors-spki-list takes."""
    cert = x509.load_pem_x509_certificate(pem.encode())
    der = cert.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


@pytest.fixture(scope="module")
def https_browser(box, playwright_driver):
    """Chromium trusting the key of the certificate the banner named, and no other (a
    browser of its own, on the run's one Playwright driver: tests/conftest.py)."""
    digest, pem = served_fingerprint(box.vm.port(443))
    assert digest.upper() == box.fingerprint.removeprefix("SHA256:").replace(":", ""), \
        "the certificate served is not the one the banner showed"
    chromium = launch(playwright_driver,
                      [f"--ignore-certificate-errors-spki-list={spki_pin(pem)}"])
    yield chromium
    chromium.close()


def test_the_image_packages_the_console(box):
    """The wheel carries the front end (pyproject's package data): the image's venv has it."""
    listed = box.ssh(f"ls {STATIC}/index.html {STATIC}/js/main.js {STATIC}/vendor/preact.mjs",
                     check=False)
    assert listed.returncode == 0, f"the console's files are not in the image: {listed.stderr}"


def test_log_in_over_https_and_see_the_overview_live(box, https_browser, shot):  # noqa: F811
    base = f"https://127.0.0.1:{box.vm.port(443)}"
    health = box.client.get("/v1/health").json
    context = https_browser.new_context(viewport={"width": 1366, "height": 768})
    context.add_init_script(CSP_PROBE)
    try:
        page = watched_page(context)
        page.set_default_timeout(WAIT_MS)
        page.goto(base + "/console/#/login")
        page.locator('input[name="username"]').fill("admin")
        page.locator('input[name="password"]').fill(PASSWORD)
        shot(page, "login")
        with page.expect_response(lambda r: r.url.endswith("/console/session")
                                  and r.request.method == "POST") as answered:
            page.get_by_role("button", name="Log in").click()
        login = answered.value
        assert login.status == 200, login.text()
        # behind nginx (X-Forwarded-Proto: https) the API marks both cookies Secure
        cookies = {name: attrs for name, _, attrs in
                   (parse_set_cookie(h["value"]) for h in login.headers_array()
                    if h["name"].lower() == "set-cookie")}
        assert cookies.keys() == {"appliance_session", "appliance_csrf"}, cookies
        assert all(attrs.get("secure") is True for attrs in cookies.values()), cookies
        # before the login the page asked for a session and got the expected 401
        page.failed_responses.clear()
        session = {c["name"]: c for c in context.cookies()}["appliance_session"]
        assert session["secure"] and session["httpOnly"] and session["sameSite"] == "Strict"

        page.get_by_role("heading", level=1, name="Overview").wait_for()
        version = page.locator("#version")
        version.wait_for()
        assert version.inner_text() == health["version"]
        stream_live(page, 120, "the event stream to open through nginx")
        shot(page, "overview")

        # the event comes through nginx's proxy while the stream stays open: an event
        # stream that nginx buffered would not reach the page until its buffer filled
        name = "https-live-" + uuid.uuid4().hex[:8]
        created = box.admin().post("/v1/iam/projects", {"name": name})
        assert created.status == 201, created.json
        page.locator("ol.events", has_text=name).wait_for()
        shot(page, "overview-live-event")

        errors = [text for kind, text in page.console_messages if kind == "pageerror"]
        assert errors == [], errors
        assert csp_violations(page) == []
        assert page.failed_responses == [], page.failed_responses   # since the login
    finally:
        context.close()

