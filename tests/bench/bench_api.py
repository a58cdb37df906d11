"""The API's overhead: an authenticated GET of one item against a bare Bottle app.

    python -m tests.bench api

Two servers, each in its own process, both Waitress with 4 threads on 127.0.0.1:
- app:  the real application (tests.apiserver.ApiServer) answering
        GET /v1/iam/users/<admin uuid> with a bearer token: JWT verify, revocation and
        user check, permission check, store get, render, JSON;
- bare: a Bottle app with one route of the same path returning the same JSON body
        (byte for byte) from a dict.
Both are loaded by the same generator (wrk -t2 -c16, or the Python fallback when wrk is
unavailable) in 12 slices of 1 s each, alternating between the servers, so that bursts
of other load hit both alike; the ratio app/bare is printed several ways (all slices,
best slice of each, median of side-by-side pairs, server CPU time per request). Then the
same two WSGI apps are called in process without any server. Goal: ratio >= 0.6.
"""

import json
import sys
import urllib.parse

from . import (ADMIN_PASSWORD, Child, compare, http_get, load_rows, mean_cpu_us, ratio_text,
               ratios, remove, note, table, temp_dir, title, tool_name)

GOAL = 0.6
SLICES = 12           # x 1 s per server, alternated
CONNECTIONS = 16


def serve_app(state_dir):
    from tests.apiserver import ApiServer
    from . import quiet_waitress, wait_for_parent
    quiet_waitress()
    srv = ApiServer(state_dir, ADMIN_PASSWORD).start()
    wait_for_parent({"port": srv.port})
    srv.stop()


def bare_app(body):
    import bottle
    app = bottle.Bottle()

    @app.route("/v1/iam/users/<uuid>", "GET")
    def get_user(uuid):
        bottle.response.content_type = "application/json"
        return json.dumps(body, separators=(",", ":")).encode()
    return app


def serve_bare(body_file):
    import waitress
    from . import serve_until_stdin_closes
    with open(body_file) as f:
        body = json.load(f)
    server = waitress.create_server(bare_app(body), host="127.0.0.1", port=0, threads=4)
    serve_until_stdin_closes(server, {"port": server.effective_port})


def login(port, username, password):
    status, raw = _post_json(port, "/v1/iam/clients/default/actions/get_token/invoke",
                             {"grant_type": "password", "username": username,
                              "password": password})
    if status != 200:
        raise RuntimeError(f"login of {username} failed: {status} {raw[:200]!r}")
    return json.loads(raw)["access_token"]


def _post_json(port, path, body):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", path, body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def wsgi_get(app, path, headers):
    """One GET through a WSGI app, no server: (status, body)."""
    import io
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "",
               "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "80", "SERVER_PROTOCOL": "HTTP/1.1",
               "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(), "wsgi.errors": sys.stderr,
               "REMOTE_ADDR": "127.0.0.1"}
    for k, v in headers.items():
        environ["HTTP_" + k.upper().replace("-", "_")] = v
    status = []
    body = b"".join(app(environ, lambda s, h, e=None: status.append(s)))
    return status[0], body


def in_process(state_dir, path, token, body, expected, n=3000):
    """us per request through each WSGI app called directly: no socket, no Waitress, one
    thread. What is left is the app's own work."""
    from appliance import config
    from appliance.api.app import create_app
    from . import now
    settings = config.load(environ={}, overrides={"state_dir": state_dir,
                                                 "admin_password": ADMIN_PASSWORD})
    app, _ = create_app(settings)
    out = {}
    for label, wsgi, headers in (("bare", bare_app(body), {}),
                                 ("app", app, {"Authorization": f"Bearer {token}"})):
        status, got = wsgi_get(wsgi, path, headers)
        assert status.startswith("200") and got == expected, (label, status, got)
        t0 = now()
        for _ in range(n):
            wsgi_get(wsgi, path, headers)
        out[label] = (now() - t0) / n
    return out


def main():
    title("bench_api: authenticated GET of one item vs a bare Bottle app")
    state_dir = temp_dir("api")
    body_dir = temp_dir("api-body")
    app = bare = None
    try:
        app = Child("tests.bench.bench_api", "app", state_dir)
        port = app.info["port"]
        token = login(port, "admin", ADMIN_PASSWORD)
        auth = {"Authorization": f"Bearer {token}"}
        status, raw = http_get(port, "/v1/iam/users?" + urllib.parse.urlencode(
            {"username": "admin"}), auth)
        admin_uuid = json.loads(raw)[0]["uuid"]
        path = f"/v1/iam/users/{admin_uuid}"
        status, app_body = http_get(port, path, auth)
        assert status == 200, (status, app_body)

        body_file = f"{body_dir}/body.json"
        with open(body_file, "wb") as f:
            f.write(app_body)
        bare = Child("tests.bench.bench_api", "bare", body_file)
        status, bare_body = http_get(bare.info["port"], path)
        assert status == 200 and bare_body == app_body, (status, bare_body, app_body)

        note(f"GET {path}  ({len(app_body)} byte body, identical on both)")
        note(f"load: {tool_name()}, 2 client threads, {CONNECTIONS} connections, "
             f"{SLICES} slices of 1 s per server, alternated; Waitress threads=4")
        results = compare([
            ("bare", f"http://127.0.0.1:{bare.info['port']}{path}", {}, bare),
            ("app", f"http://127.0.0.1:{port}{path}", auth, app),
        ], slices=SLICES, connections=CONNECTIONS)
        in_proc = in_process(state_dir, path, token, json.loads(app_body), app_body)
    finally:
        for child in (bare, app):
            if child is not None:
                child.stop()
        remove(state_dir)
        remove(body_dir)

    headers, rows = load_rows(results, [("bare", "bare Bottle, dict -> JSON"),
                                        ("app", "appliance app, bearer token")])
    table(["server"] + headers[1:], rows)
    r = ratios(results, "app", "bare")
    note(f"ratio app/bare: {ratio_text(r)}")
    note(f"goal >= {GOAL}: {'met' if r['all'] >= GOAL else 'NOT met'} (over all slices); "
         f"the app spends ~{mean_cpu_us(results['app']) - mean_cpu_us(results['bare']):.0f}"
         " us more server CPU per request than the bare app")
    note(f"in process (WSGI called directly, {3000} calls, no server): bare "
         f"{in_proc['bare'] * 1e6:.0f} us, app {in_proc['app'] * 1e6:.0f} us per request; "
         f"ratio {in_proc['bare'] / in_proc['app']:.2f}")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--serve":
        {"app": serve_app, "bare": serve_bare}[sys.argv[2]](*sys.argv[3:])
    else:
        main()
