"""Password login throttling (issue 25): wrong passwords from one address, or for one
username, get a growing wait answered 429 with Retry-After; the wait is bounded, and a
flood for `admin` never keeps the admin out for good.

Clients connect from other loopback addresses (127.0.0.2, ...) as other hosts would: the
throttle keys on the connection's source address. The server here has small thresholds
(and a short per-user bound) so that the tests reach them quickly; the LoginThrottle
tests at the end use a stand-in clock instead of waiting.
"""

import threading
import time
import uuid

import pytest

from appliance.iam.throttle import LoginThrottle, Throttled
from tests.apiserver import TOKEN_PATH, ApiServer
from tests.conftest import ADMIN_PASSWORD
from tests.waiting import eventually

from .helpers import make_user

# a first wait of 5 s, not 1: the next request of a test must come within it even on a
# loaded machine (it is a bound the test relies on, never a time it asserts)
ADDRESS_FREE, USER_FREE, FIRST, USER_MAX = 4, 3, 5.0, 5.0
LIMITS = {"login_free_failures_address": ADDRESS_FREE,
          "login_free_failures_user": USER_FREE, "login_first_delay": FIRST,
          "login_max_delay_user": USER_MAX, "login_max_delay_address": 900.0,
          "login_failure_memory": 3600.0}


@pytest.fixture
def srv(tmp_path):
    server = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD, **LIMITS).start()
    # the admin's usual place: it logged in from 127.0.0.1 before any attack
    server.admin = server.client(server.login("admin", ADMIN_PASSWORD))
    yield server
    server.stop()


_next = iter(range(2, 250))


def address():
    """A loopback address no other test of this module used."""
    return f"127.0.{next(_next)}.1"


def login(srv, username, password, source):
    return srv.token_response(username, password, source=source)


def assert_throttled(resp):
    assert resp.status == 429, resp
    assert resp.json["error"] == "too_many_requests"
    assert set(resp.json) == {"error", "error_description"}
    assert "try again in" in resp.json["error_description"]
    assert resp.header("cache-control") == "no-store"
    retry_after = int(resp.header("retry-after"))
    assert retry_after >= 1
    return retry_after


def assert_wrong(resp):
    assert resp.status == 400, resp
    assert resp.json["error"] == "invalid_grant"


def test_one_address_guessing_many_usernames_is_throttled(srv):
    attacker, elsewhere = address(), address()
    for _ in range(ADDRESS_FREE):
        assert_wrong(login(srv, f"u{uuid.uuid4().hex[:8]}", "guess-guess", attacker))
    # the next attempt waits, whatever it sends: even the right password is not checked
    assert_throttled(login(srv, f"u{uuid.uuid4().hex[:8]}", "guess-guess", attacker))
    assert_throttled(login(srv, "admin", ADMIN_PASSWORD, attacker))
    # nothing changed for anyone else: admin logs in from elsewhere, and from home
    assert login(srv, "admin", ADMIN_PASSWORD, elsewhere).status == 200
    assert login(srv, "admin", ADMIN_PASSWORD, "127.0.0.1").status == 200
    assert srv.admin.get("/v1/iam/users").status == 200


def test_unknown_and_existing_usernames_are_throttled_alike(srv):
    """Throttling tells nothing about which users exist: the same answers, in the same
    order, for a user and for a name nobody has."""
    _, existing, password = make_user(srv.admin)
    missing = f"nobody-{uuid.uuid4().hex[:8]}"
    answers = {}
    for username in (existing, missing):
        # one attempt per address: only the per-user count grows
        statuses = [login(srv, username, "not-the-password", address())
                    for _ in range(USER_FREE + 1)]
        for resp in statuses[:USER_FREE]:
            assert_wrong(resp)
        assert_throttled(statuses[USER_FREE])
        answers[username] = [(r.status, r.json["error"]) for r in statuses]
    assert answers[existing] == answers[missing]
    # the user's wait holds for its right password too, from an address never seen
    assert_throttled(login(srv, existing, password, address()))


def test_a_flood_for_admin_does_not_keep_the_admin_out(srv):
    attacker, new_place = address(), address()
    wrong = 0
    # the attacker guesses as fast as it is let: it waits when told, then guesses again,
    # until its address's wait (10 s next) is past the per-user bound
    while wrong < ADDRESS_FREE + 1:
        resp = login(srv, "admin", "wrong-wrong-wrong", attacker)
        if resp.status == 429:
            time.sleep(assert_throttled(resp))
        else:
            assert_wrong(resp)
            wrong += 1
    assert_throttled(login(srv, "admin", ADMIN_PASSWORD, attacker))
    # where the admin logged in before, the per-user wait does not apply at all
    assert login(srv, "admin", ADMIN_PASSWORD, "127.0.0.1").status == 200

    # from a place never seen, the wait is at most the per-user bound
    def admin_gets_in():
        resp = login(srv, "admin", ADMIN_PASSWORD, new_place)
        if resp.status == 429:
            assert assert_throttled(resp) <= USER_MAX
            return None
        assert resp.status == 200, resp
        return resp

    eventually(admin_gets_in, USER_MAX * 10, "admin's login from a new address")
    # the success cleared the user's count: another new place gets in at once
    assert login(srv, "admin", ADMIN_PASSWORD, address()).status == 200


def test_successful_logins_do_not_count(srv):
    _, username, password = make_user(srv.admin)
    place = address()
    for _ in range(3 * (ADDRESS_FREE + USER_FREE)):
        assert login(srv, username, password, place).status == 200
    # failures after successes still get their free ones: nothing was counted
    for _ in range(USER_FREE):
        assert_wrong(login(srv, username, "not-the-password", place))


def test_a_burst_of_parallel_guesses_gets_no_more_than_the_free_ones(srv):
    """Each attempt is counted when it starts: parallel guesses cannot all slip in
    while the first ones are still being checked."""
    attacker = address()
    barrier = threading.Barrier(12)
    statuses = []

    def guess():
        barrier.wait()
        statuses.append(login(srv, f"u{uuid.uuid4().hex[:8]}", "guess-guess", attacker).status)

    threads = [threading.Thread(target=guess) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(set(statuses)) == [400, 429], statuses
    assert statuses.count(400) <= ADDRESS_FREE


def test_the_429_is_in_the_openapi_document(srv):
    responses = srv.client().get("/v1/openapi.json").json["paths"][
        "/v1/iam/clients/{client}/actions/get_token/invoke"]["post"]["responses"]
    assert "Retry-After" in responses["429"]["headers"]
    assert responses["429"]["content"]["application/json"]["schema"]["$ref"] == \
        "#/components/schemas/OAuthError"
    document = srv.client().get("/v1/openapi.json").json
    assert "too_many_requests" in document["components"]["schemas"]["OAuthError"][
        "properties"]["error"]["enum"]


def test_the_production_defaults_stay_bounded():
    """The settings a real appliance starts with: a per-user wait of a minute at most,
    an address's of a quarter of an hour."""
    from appliance import config
    settings = config.load(environ={}, overrides={})
    assert settings["login_max_delay_user"] <= 60
    assert settings["login_max_delay_address"] <= 900
    assert settings["login_free_failures_user"] >= 3


# ---- the throttle itself, on a stand-in clock ------------------------------------------

class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def throttle(clock, **limits):
    return LoginThrottle({**LIMITS, "login_first_delay": 1.0, "login_max_delay_user": 60.0,
                          **limits}, clock=clock)


def fail(t, username, place):
    t.begin(username, place)        # counted; never `succeeded`


def wait_of(t, username, place):
    try:
        t.begin(username, place)
    except Throttled as e:
        return e.retry_after
    t.succeeded(username, place)
    return 0


def test_the_wait_doubles_up_to_its_bound():
    clock = Clock()
    t = throttle(clock, login_free_failures_user=100)
    waits = []
    for _ in range(ADDRESS_FREE + 30):
        clock.now += 10_000 if not waits else 0
        try:
            fail(t, "someone", "10.0.0.1")
            waits.append(0)
        except Throttled as e:
            waits.append(e.retry_after)
            clock.now += e.retry_after        # the attacker waits as told, then fails
    grown = [w for w in waits if w]
    assert waits[:ADDRESS_FREE] == [0] * ADDRESS_FREE
    assert grown[:5] == [1, 2, 4, 8, 16]
    assert max(grown) == 900 and grown == sorted(grown)


def test_the_per_user_wait_is_bounded_and_forgotten_after_a_quiet_while():
    clock = Clock()
    t = throttle(clock)
    for i in range(40):             # from many addresses, waiting as told
        try:
            fail(t, "admin", f"10.1.0.{i}")
        except Throttled as e:
            assert e.retry_after <= 60
            clock.now += e.retry_after
    clock.now += 60
    fail(t, "admin", "10.1.1.1")
    assert 0 < wait_of(t, "admin", "10.2.0.1") <= 60
    clock.now += 3600
    assert wait_of(t, "admin", "10.2.0.2") == 0


def test_a_success_clears_the_users_count_but_not_the_addresses():
    clock = Clock()
    t = throttle(clock, login_free_failures_address=3, login_free_failures_user=2)
    fail(t, "ada", "10.0.0.1")
    fail(t, "bob", "10.0.0.1")
    assert wait_of(t, "ada", "10.0.0.1") == 0       # ada's right password: a success
    # ada's count is gone; the address's two failures remain, one more and it waits
    fail(t, "carl", "10.0.0.1")
    assert wait_of(t, "dora", "10.0.0.1") >= 1
    assert wait_of(t, "ada", "10.0.0.2") == 0


# ---- behind the image's nginx: the client address from X-Forwarded-For -----------------

PROXY_ADJUSTMENTS = ("trusted_proxy", "trusted_proxy_headers", "trusted_proxy_count",
                     "clear_untrusted_proxy_headers")


class ProxiedServer(ApiServer):
    """ApiServer with the production server's proxy adjustments (waitress_settings)."""

    def start(self):
        from appliance.api.server_errors import body_limit, json_errors
        from appliance.app import create_app
        from appliance.bootstrap import bootstrap
        from appliance.server import waitress_settings
        from tests.wsgiserver import LoopbackServer
        bootstrap(self.settings)
        self.app, self.api = create_app(self.settings)
        production = waitress_settings(self.settings)
        self.loop = LoopbackServer(self.app, port=self.settings["api_port"], threads=4,
                                   max_request_body_size=body_limit(self.settings),
                                   **{k: production[k] for k in PROXY_ADJUSTMENTS})
        json_errors(self.loop.server)
        self.loop.start()
        self.port = self.loop.port
        return self


def forwarded_login(srv, source, forwarded_for):
    body = {"grant_type": "password", "username": f"u{uuid.uuid4().hex[:8]}",
            "password": "guess-guess"}
    return srv.client(source=source).post(TOKEN_PATH, body,
                                          headers={"X-Forwarded-For": forwarded_for})


def test_behind_nginx_the_forwarded_address_is_the_key(tmp_path):
    srv = ProxiedServer(str(tmp_path / "state"), ADMIN_PASSWORD, **LIMITS).start()
    try:
        # nginx (on 127.0.0.1) appends the client's address: its last entry counts
        for _ in range(ADDRESS_FREE):
            assert_wrong(forwarded_login(srv, "127.0.0.1", "10.9.9.9, 198.51.100.7"))
        assert_throttled(forwarded_login(srv, "127.0.0.1", "198.51.100.7"))
        # another client behind the same nginx is not held back
        assert_wrong(forwarded_login(srv, "127.0.0.1", "198.51.100.8"))
        # a client that is not the proxy cannot choose its address with the header
        attacker = address()
        for i in range(ADDRESS_FREE):
            assert_wrong(forwarded_login(srv, attacker, f"203.0.113.{i}"))
        assert_throttled(forwarded_login(srv, attacker, "203.0.113.200"))
    finally:
        srv.stop()
