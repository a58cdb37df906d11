"""The console's cookies behind the image's nginx (docs/console.md): `appliance up`'s
Waitress takes X-Forwarded-Proto from its trusted proxy on 127.0.0.1 only, so the cookies
are Secure when nginx says the browser came over HTTPS, and a client elsewhere cannot
pretend to be that proxy (the header is dropped; it would only make its cookies Secure, but
the rule is the proxy's word alone)."""

from tests.console.helpers import SESSION, Browser


class Source:
    """Browser() needs host and port; `source` is the client's loopback address."""

    def __init__(self, appliance):
        self.host, self.port = "127.0.0.1", appliance.api_port


def login_from(appliance, source):
    browser = Browser(Source(appliance), headers={"X-Forwarded-Proto": "https"})
    browser.source = source
    resp = browser.request("POST", SESSION, {"username": "admin",
                                             "password": appliance.admin_password})
    assert resp.status == 200, resp
    return browser.last_cookies


def test_cookies_are_secure_when_the_trusted_proxy_says_https(console_appliance):
    cookies = login_from(console_appliance, "127.0.0.1")
    for name in ("appliance_session", "appliance_csrf"):
        assert cookies[name][1].get("secure") is True, (name, cookies)


def test_another_client_s_forwarded_proto_is_ignored(console_appliance):
    cookies = login_from(console_appliance, "127.0.0.2")
    for name in ("appliance_session", "appliance_csrf"):
        assert "secure" not in cookies[name][1], (name, cookies)
