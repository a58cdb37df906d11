"""The web console's session as the authenticator reads it: the access token in an HttpOnly
cookie instead of the Authorization header, and the double-submit CSRF check that such a
cookie needs (docs/console.md, "Server side"; docs/security.md, "Web console").

Why a check at all: a browser attaches cookies by itself, so a request carrying the session
cookie may have been made by another site's page. Such a page cannot read our cookies, so a
write must echo the CSRF cookie in a header, which only our own page can do (SameSite=Strict
already keeps the cookies off cross-site requests; this is the second lock). A bearer token
is never attached by a browser by itself, so bearer clients are untouched.
"""

import hmac

from appliance.api.errors import Forbidden

SESSION_COOKIE = "appliance_session"
CSRF_COOKIE = "appliance_csrf"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset(("GET", "HEAD", "OPTIONS"))
CSRF_REFUSED = f"the {CSRF_HEADER} header must echo the {CSRF_COOKIE} cookie"


def read_cookies(environ):
    """{name: value} of the Cookie header; the first of a name given twice wins (a browser
    sends the cookie of the longest path first). Lenient on purpose: one malformed pair
    (another application's cookie on this host) must not hide the others."""
    found = {}
    for pair in environ.get("HTTP_COOKIE", "").split(";"):
        name, sep, value = pair.strip().partition("=")
        if sep and name and name not in found:
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            found[name] = value
    return found


def is_unsafe(environ):
    """Whether the request may change something: its own method, or for nginx's
    auth_request sub-request (a GET) the method of the request it stands for."""
    methods = (environ.get("REQUEST_METHOD", "GET"), environ.get("HTTP_X_ORIGINAL_METHOD"))
    return any(m is not None and m.upper() not in SAFE_METHODS for m in methods)


def check_csrf(environ, cookies):
    """Refuse (403) a write authenticated by the session cookie unless the X-CSRF-Token
    header equals the CSRF cookie (compared in constant time)."""
    if not is_unsafe(environ):
        return
    expected = cookies.get(CSRF_COOKIE, "").encode("latin-1")
    given = environ.get("HTTP_X_CSRF_TOKEN", "").encode("latin-1")
    if not expected or not hmac.compare_digest(expected, given):
        raise Forbidden(CSRF_REFUSED)
