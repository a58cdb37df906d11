"""Must-shows of changes against a real nginx: a killed backend, a config nginx rejects,
a reload under load (wrk), several LBs on one instance, removal, an agent restart, and
auth_request (docs/lb-dataplane.md)."""

import os
import re
import shutil
import subprocess
import threading
import time

import pytest

from tests.lb.nginxnode import (backends, get, lb_value, new_uuid, node,  # noqa: F401
                                one_route, pool, route, vhost)


def test_a_killed_backend_fails_no_request(node, backends):
    a, b, c = backends("a"), backends("b"), backends("c")
    value, port, p = one_route(node, a, b, c)
    assert node.apply(value)["status"] == "ACTIVE"
    b.stop()
    # every request succeeds: the one that meets the dead backend first is passed on to
    # the next (proxy_next_upstream), and from then on b is out for fail_timeout
    answers = [get(node.address, port) for _ in range(60)]
    assert [s for s, _, _ in answers] == [200] * 60
    assert {body.split()[0] for _, _, body in answers} == {b"a", b"c"}
    # POST too: a refused connection means the request never reached b
    assert get(node.address, port, method="POST", body=b"x")[0] == 200


def test_a_rejected_config_is_error_and_the_old_one_keeps_serving(node, backends):
    a = backends("a")
    value, port, p = one_route(node, a)
    assert node.apply(value)["status"] == "ACTIVE"
    live = node.driver.live_generation()

    # an unknown variable in a header value: renders, but nginx refuses it
    value["vhosts"][0]["routes"][0]["condition"]["modifiers"] = [
        {"kind": "set_header", "name": "X-Who", "value": "$no_such_variable"}]
    result = node.apply(value)
    assert result["status"] == "ERROR"
    assert 'unknown "no_such_variable" variable' in result["reason"]
    assert "[emerg]" in result["value"]["nginx_check"]
    assert node.driver.live_generation() == live
    assert sorted(os.listdir(os.path.dirname(live))) == ["current", os.path.basename(live)]
    assert get(node.address, port)[0] == 200

    # two routes on one location: nginx's "duplicate location"
    value["vhosts"][0]["routes"] = [route("prefix", "/x/", p), route("prefix", "/x/", p)]
    result = node.apply(value)
    assert result["status"] == "ERROR" and "duplicate location" in result["reason"]
    assert get(node.address, port)[2] == b"a /"

    # nginx -t passes, the reload does not (the port is taken): back to the old one
    import socket
    with socket.socket() as taken:
        taken.bind((node.address, 0))
        taken.listen()
        other = taken.getsockname()[1]
        value["vhosts"] = [value["vhosts"][0], vhost("http", other, [route(pool_uuid=p)])]
        value["vhosts"][0]["routes"] = [route("prefix", "/", p)]
        result = node.apply(value)
    assert result["status"] == "ERROR", result
    assert "Address already in use" in result["reason"]
    assert node.driver.live_generation() == live
    assert get(node.address, port)[2] == b"a /"


def test_a_route_that_cannot_be_rendered_is_never_shipped(node, backends):
    a = backends("a")
    value, port, p = one_route(node, a)
    assert node.apply(value)["status"] == "ACTIVE"
    live = node.driver.live_generation()
    value["vhosts"][0]["routes"][0]["condition"]["modifiers"] = [
        {"kind": "set_header", "name": "X-A", "value": "a\nb"}]
    result = node.apply(value)
    assert result["status"] == "ERROR" and result["reason"].startswith("not rendered: ")
    assert node.driver.live_generation() == live
    assert get(node.address, port)[0] == 200

    # the master names the LB's files: it must be a uuid
    from tests.lb.nginxnode import item
    bad = item(value)
    bad["master"] = "../../escape"
    result = node.driver.apply(bad, None)
    assert result["status"] == "ERROR" and "lb uuid" in result["reason"]
    node.driver.remove(bad)
    assert sorted(os.listdir(os.path.dirname(live))) == ["current", os.path.basename(live)]
    assert get(node.address, port)[0] == 200


def wrk(url, seconds, connections=16, headers=()):
    extra = [a for h in headers for a in ("-H", h)]
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", *extra, url],
                         capture_output=True, text=True, timeout=seconds + 30).stdout
    total = int(re.search(r"(\d+) requests in", out).group(1))
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), "
                       r"timeout (\d+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return total, (sum(map(int, errors.groups())) if errors else 0), \
        (int(non2xx.group(1)) if non2xx else 0), out


def reloads_under_load(node, backends, headers):
    """(reloads made, wrk's (total, socket errors, non-2xx, output)) of 6 s of wrk at an
    LB that is changed (and reloaded) every 0.3 s meanwhile."""
    a, b = backends("a"), backends("b")
    value, port, p = one_route(node, a, b)
    assert node.apply(value)["status"] == "ACTIVE"
    results = {}
    load = threading.Thread(target=lambda: results.update(
        out=wrk(f"http://{node.address}:{port}/", 6, headers=headers)))
    load.start()
    reloads = 0
    time.sleep(0.5)
    while load.is_alive() and reloads < 10:
        value["vhosts"][0]["routes"][0]["condition"]["modifiers"] = [
            {"kind": "set_resp_header", "name": "X-Generation", "value": str(reloads)}]
        assert node.apply(value)["status"] == "ACTIVE"
        reloads += 1
        time.sleep(0.3)
    load.join()
    assert get(node.address, port)[1]["x-generation"] == str(reloads - 1)
    return reloads, results["out"]


needs_wrk = pytest.mark.skipif(shutil.which("wrk") is None,
                               reason="wrk is not installed (make setup installs it)")


@needs_wrk
def test_reloads_under_load_fail_no_request(node, backends):
    """Each request on its own connection: a reload drops none (the listening sockets
    pass to the new workers, old workers finish what they accepted)."""
    reloads, (total, errors, non2xx, out) = reloads_under_load(
        node, backends, ["Connection: close"])
    assert reloads >= 5 and total > 500, out
    assert (errors, non2xx) == (0, 0), out


@needs_wrk
def test_reloads_under_keepalive_load_answer_every_request_they_read(node, backends):
    """Keep-alive connections: nginx's old workers close their idle ones, so wrk (which
    never retries) sees a few reads end on a closed connection; what matters is that no
    connection is refused and no request gets an error status (docs/lb-dataplane.md)."""
    reloads, (total, errors, non2xx, out) = reloads_under_load(node, backends, [])
    assert reloads >= 5 and total > 1000, out
    assert non2xx == 0, out
    assert re.search(r"Socket errors: connect 0,", out) or "Socket errors" not in out, out


def test_several_lbs_share_the_instance_and_removal(node, backends):
    a, b = backends("a"), backends("b")
    pa, pb = new_uuid(), new_uuid()
    port_a, port_b = node.port(), node.port()
    first = lb_value([vhost("http", port_a, [route(pool_uuid=pa)])], {pa: pool(a.port)})
    second = lb_value([vhost("http", port_b, [route(pool_uuid=pb)])], {pb: pool(b.port)})
    assert node.apply(first)["status"] == "ACTIVE"
    pid = node.driver.pid()
    assert node.apply(second)["status"] == "ACTIVE"
    assert node.driver.pid() == pid                 # one instance, reloaded
    assert get(node.address, port_a)[2] == b"a /"
    assert get(node.address, port_b)[2] == b"b /"
    live = node.driver.live_generation()
    assert sorted(f for f in os.listdir(live) if f.startswith("lb-")) == sorted(
        [f"lb-{first['lb']}.http.conf", f"lb-{second['lb']}.http.conf"])

    # a failing change of one LB leaves the other's config alone, and vice versa
    bad = {**second, "vhosts": [vhost("http", port_b, [route(pool_uuid=new_uuid())])]}
    assert node.apply(bad)["status"] == "ERROR"
    assert get(node.address, port_b)[2] == b"b /"

    # an agent restart: a new driver finds nginx serving, and goes on from it
    node.restart_agent()
    assert node.driver.pid() == pid
    from tests.lb.nginxnode import item
    node.driver.remove(item(first))
    with pytest.raises(OSError):
        get(node.address, port_a, timeout=2)
    assert get(node.address, port_b)[2] == b"b /"
    assert not any(first["lb"] in f for f in os.listdir(node.driver.live_generation()))

    node.driver.remove(item(second))                # the last one: nginx stops
    assert node.driver.pid() is None
    assert not os.path.exists(node.file("/etc/appliance/lb"))


def test_auth_request_gets_the_original_method_and_uri(node, backends):
    site, auth = backends("site"), backends("auth")
    site_pool, auth_pool = new_uuid(), new_uuid()
    port = node.port()
    value = lb_value([vhost("http", port, [route("prefix", "/repo/", site_pool, modifiers=[
        {"kind": "auth_request", "pool": auth_pool, "path": "/v1/check"}])])],
        {site_pool: pool(site.port), auth_pool: pool(auth.port)})
    assert node.apply(value)["status"] == "ACTIVE"
    status, _, body = get(node.address, port, "/repo/p/%2e%2e/x?y=1", method="PUT",
                          body=b"payload", headers={"Authorization": "Bearer t"})
    assert status == 200
    check = auth.requests[-1]
    assert check["REQUEST_METHOD"] == "GET"
    assert check["PATH_INFO"] == "/v1/check"
    assert check["HTTP_X_ORIGINAL_METHOD"] == "PUT"
    assert check["HTTP_X_ORIGINAL_URI"] == "/repo/p/%2e%2e/x?y=1"      # raw
    assert check["HTTP_AUTHORIZATION"] == "Bearer t"
    assert site.requests[-1]["REQUEST_METHOD"] == "PUT"

    # a refusal is the caller's answer, and the site never sees the request
    auth.status = 403
    seen = len(site.requests)
    assert get(node.address, port, "/repo/p/x", method="PUT", body=b"x")[0] == 403
    auth.status = 401
    assert get(node.address, port, "/repo/p/x")[0] == 401
    assert len(site.requests) == seen
