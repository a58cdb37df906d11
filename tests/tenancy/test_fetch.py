"""The guarded fetcher (appliance/tenancy/fetch.py) against a real marker server on
loopback: what a project may not reach is never connected to; the platform, or the
admin's setting, reaches it; a name is resolved once and the connection goes to the
address that was checked; redirects pass the same check; size and time are bounded.

The "rebinding" resolver below is a stand-in for a DNS server whose answer changes
between two lookups (no DNS server of ours can be made to lie here); everything else is
real: sockets, Waitress, http.client."""

import pytest

from appliance.tenancy import fetch
from appliance.tenancy.addresses import PLATFORM, Reach

from .marker import Marker

PROJECT = "11111111-2222-3333-4444-555555555555"
OWN = Reach(project_id=PROJECT, own=[("10.32.0.0/24", "default")],
            denied=[("10.32.0.1/32", "the appliance's own address on network default")])
LOOPBACK_ALLOWED = Reach(project_id=PROJECT, own=[("10.32.0.0/24", "default")],
                         outside=["127.0.0.0/8"])


@pytest.fixture
def marker():
    with Marker() as m:
        m.files["/data"] = b"marker data"
        yield m


# the odd spellings (a decimal number, a short form) are names to a URL parser, which the
# system's resolver turns into 127.0.0.1: they are judged after resolution
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]",
                                  "2130706433", "127.1"])
def test_a_project_never_reaches_loopback(marker, host):
    url = marker.url("/data", host)
    with pytest.raises(fetch.Refused) as e:
        fetch.fetch_bytes(url, OWN, 1000, 5)
    assert "loopback" in e.value.reason
    assert marker.hits == []


def test_the_platform_and_the_admin_setting_reach_loopback(marker):
    assert fetch.fetch_bytes(marker.url("/data"), PLATFORM, 1000, 5) == b"marker data"
    assert fetch.fetch_bytes(marker.url("/data", "localhost"), LOOPBACK_ALLOWED, 1000,
                             5) == b"marker data"
    assert [p for p, _ in marker.hits] == ["/data", "/data"]


def test_literal_refusal_is_known_without_resolving():
    assert "loopback" in fetch.literal_refusal("http://127.0.0.1:1/x", OWN)
    assert "link-local" in fetch.literal_refusal("http://169.254.169.254/latest", OWN)
    assert "appliance's own address" in fetch.literal_refusal("http://10.32.0.1/", OWN)
    assert "outside every network" in fetch.literal_refusal("https://192.0.2.7/", OWN)
    assert "file://" in fetch.literal_refusal("file:///etc/shadow", OWN)
    assert "ftp" in fetch.literal_refusal("ftp://10.32.0.5/x", OWN)
    # a name or an own address: judged at fetch time, or allowed
    assert fetch.literal_refusal("http://images.example.test/x", OWN) is None
    assert fetch.literal_refusal("http://10.32.0.5:8080/x", OWN) is None
    assert fetch.literal_refusal("file:///srv/x", PLATFORM) is None


def test_a_name_that_resolves_to_loopback_is_refused_after_resolution(marker):
    calls = []

    def resolver(host, port):
        calls.append(host)
        return ["127.0.0.1"]
    with pytest.raises(fetch.Refused) as e:
        fetch.fetch_bytes(marker.url("/data", "innocent.example.test"), OWN, 1000, 5,
                          resolve=resolver)
    assert "innocent.example.test resolves to 127.0.0.1" in str(e.value)
    assert calls == ["innocent.example.test"] and marker.hits == []


def test_one_refused_address_refuses_the_name(marker):
    """A name that answers an allowed address and a forbidden one is refused whole: the
    connection might otherwise fall back to the forbidden one."""
    with pytest.raises(fetch.Refused):
        fetch.fetch_bytes(marker.url("/data", "mixed.example.test"), OWN, 1000, 5,
                          resolve=lambda h, p: ["10.32.0.9", "127.0.0.1"])
    assert marker.hits == []


def test_the_connection_goes_to_the_checked_address_not_a_later_answer():
    """DNS rebinding: the name answers 127.0.0.2 (allowed here) when checked and
    127.0.0.3 (not allowed) afterwards. The fetcher asks once and connects to .2; the
    name still travels in the Host header."""
    allowed = Reach(project_id=PROJECT, outside=["127.0.0.2/32"])
    answers = iter([["127.0.0.2"], ["127.0.0.3"], ["127.0.0.3"]])
    with Marker("127.0.0.2") as good, Marker("127.0.0.3") as evil:
        good.files["/data"] = b"good"
        evil.files["/data"] = b"evil"
        # both on the same port number is not possible to arrange; the name's port is .2's
        url = f"http://rebind.example.test:{good.port}/data"
        body = fetch.fetch_bytes(url, allowed, 1000, 5, resolve=lambda h, p: next(answers))
        assert body == b"good"
        assert good.hits == [("/data", f"rebind.example.test:{good.port}")]
        assert evil.hits == []
        assert next(answers) == ["127.0.0.3"]       # exactly one answer was used


def test_a_redirect_to_a_forbidden_place_is_refused(marker):
    """An allowed server (here: loopback port allowed by a narrow setting) redirects to
    another loopback address that is not allowed: the second hop is refused before it
    connects."""
    with Marker("127.0.0.4") as target:
        target.files["/secret"] = b"secret"
        allowed = Reach(project_id=PROJECT, outside=["127.0.0.1/32"])
        url = marker.url("/redirect?to=" + target.url("/secret"))
        with pytest.raises(fetch.Refused) as e:
            fetch.fetch_bytes(url, allowed, 1000, 5)
        assert "127.0.0.4" in e.value.reason
        assert target.hits == [] and [p for p, _ in marker.hits] == ["/redirect"]
        # the platform follows it
        assert fetch.fetch_bytes(url, PLATFORM, 1000, 5) == b"secret"


def test_redirects_to_other_schemes_and_endless_redirects_are_refused(marker):
    to_file = marker.url("/redirect?to=file:///etc/passwd")
    with pytest.raises(fetch.Refused, match="only to http or https"):
        fetch.fetch_bytes(to_file, PLATFORM, 1000, 5)
    marker.hits.clear()
    with pytest.raises(fetch.FetchError, match="redirects"):
        fetch.fetch_bytes(marker.url("/redirect?to=/redirect?to=/redirect?to=/data"),
                          PLATFORM, 1000, 5, max_redirects=2)
    assert [p for p, _ in marker.hits] == ["/redirect"] * 3


def test_size_is_bounded(marker):
    marker.files["/big"] = b"x" * 5000
    with pytest.raises(fetch.FetchError, match="limit of 1000 bytes"):
        fetch.fetch_bytes(marker.url("/big"), PLATFORM, 1000, 5)
    # without a Content-Length, the body is cut at the limit as it is read
    with pytest.raises(fetch.FetchError, match="limit of 3 bytes"):
        fetch.fetch_bytes(marker.url("/slow"), PLATFORM, 3, 30)


def test_time_is_bounded_over_the_whole_fetch(marker):
    """/slow trickles 200 bytes over about 10 s; a fetch allowed one second stops."""
    with pytest.raises(fetch.FetchError, match="time limit"):
        fetch.fetch_bytes(marker.url("/slow"), PLATFORM, 0, 1, timeout=30)


def test_http_errors_and_unreachable_hosts_are_fetch_errors(marker):
    with pytest.raises(fetch.FetchError, match="HTTP 404"):
        fetch.fetch_bytes(marker.url("/missing"), PLATFORM, 1000, 5)
    with pytest.raises(fetch.FetchError, match="cannot connect"):
        fetch.fetch_bytes("http://127.0.0.1:9/x", PLATFORM, 1000, 5)


def test_file_urls_only_for_the_platform(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"local")
    assert fetch.fetch_bytes(path.as_uri(), PLATFORM, 100, 5) == b"local"
    with pytest.raises(fetch.Refused, match="platform only"):
        fetch.fetch_bytes(path.as_uri(), LOOPBACK_ALLOWED, 100, 5)
