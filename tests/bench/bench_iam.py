"""The cost of authentication: token verification plus permission check, with a large IAM.

    python -m tests.bench iam

The store holds, besides the seed: 1,000 roles, 201 permissions, 5,001 permission
bindings, 1,000 users and 10,000 role bindings (10 per user, all global). The bench user
`bench` is one of them; one of its 10 roles grants `bench.ping.read`.

Over HTTP (the real app on Waitress, threads=4, in its own process): the same handler at
  GET /v1/bench/public   permission PUBLIC, requested without a token
  GET /v1/bench/private  permission bench.ping.read, requested with the bench user's token
loaded by the same generator in alternating 1 s slices; the ratio private/public is
printed (all slices, best slices, median of pairs, server CPU time per request).

In process: microseconds per `Authenticator.__call__` (what every non-public request
runs) on a warm permission cache and on a cold one, right after an IAM kind changed,
written by this process or by another one (which also makes this one reload the file).
"""

import sys

from . import (ADMIN_PASSWORD, Child, compare, load_rows, mean_cpu_us, median, note, now,
               ratio_text, ratios, remove, table, temp_dir, title, tool_name, us)

ROLES = 1_000
USERS = 1_000
ROLES_PER_USER = 10          # 1,000 x 10 = 10,000 role bindings
PERMISSIONS = 200
PERMS_PER_ROLE = 5           # 5,000 permission bindings (+1 for bench.ping.read)
PING = "bench.ping.read"
BENCH_USER, BENCH_PASSWORD = "bench", "bench-user-password"
SLICES = 12           # x 1 s per URL, alternated
CONNECTIONS = 16


def add_routes(api):
    from appliance.api.routing import PUBLIC

    def ping(call):
        return {"pong": True}
    api.route("GET", "/v1/bench/public", ping, permission=PUBLIC, summary="bench ping")
    api.route("GET", "/v1/bench/private", ping, permission=PING, summary="bench ping")


def serve(state_dir):
    from tests.apiserver import ApiServer
    from . import quiet_waitress, wait_for_parent
    quiet_waitress()
    srv = ApiServer(state_dir, ADMIN_PASSWORD, extra=add_routes).start()
    wait_for_parent({"port": srv.port})
    srv.stop()


def settings_for(state_dir):
    from appliance import config
    return config.load(environ={}, overrides={"state_dir": state_dir,
                                             "admin_password": ADMIN_PASSWORD})


def populate(state_dir):
    """Seed, then add the large IAM with insert_many. Returns the counts per kind."""
    from appliance.bootstrap import bootstrap
    from appliance.iam import passwords
    from state import Store
    bootstrap(settings_for(state_dir))
    store = Store(state_dir)
    perms = store.collection("iam_permissions", unique=[("name",)])
    roles = store.collection("iam_roles", unique=[("name",)])
    pbindings = store.collection("iam_permission_bindings", unique=[("role", "permission")])
    users = store.collection("iam_users", unique=[("username",)])
    rbindings = store.collection("iam_role_bindings", unique=[("user", "role", "project")])

    perm_ids = [p["uuid"] for p in perms.insert_many(
        [{"name": f"bench.p{i:03d}.read", "description": "bench"} for i in range(PERMISSIONS)]
        + [{"name": PING, "description": "bench"}])]
    ping_perm = perm_ids.pop()
    role_ids = [r["uuid"] for r in roles.insert_many(
        [{"name": f"bench-role-{i:04d}", "description": "bench", "builtin": False}
         for i in range(ROLES)])]
    ping_role = role_ids[ROLES - 1]
    pbindings.insert_many(
        [{"role": role, "permission": perm_ids[(i * PERMS_PER_ROLE + k) % PERMISSIONS]}
         for i, role in enumerate(role_ids) for k in range(PERMS_PER_ROLE)]
        + [{"role": ping_role, "permission": ping_perm}])

    def user(name, password_hash=None):
        return {"username": name, "password_hash": password_hash, "first_name": None,
                "last_name": None, "email": None, "type": "user", "description": "bench",
                "status": "ACTIVE"}
    user_ids = [u["uuid"] for u in users.insert_many(
        [user(f"bench-user-{i:04d}") for i in range(USERS - 1)]
        + [user(BENCH_USER, passwords.hash_password(BENCH_PASSWORD))])]
    bindings = []
    for u, user_id in enumerate(user_ids):
        chosen = [(u * 7 + k * 101) % ROLES for k in range(ROLES_PER_USER)]
        if user_id == user_ids[-1] and ROLES - 1 not in chosen:
            chosen[-1] = ROLES - 1          # the bench user gets the ping role
        bindings += [{"user": user_id, "role": role_ids[r], "project": None} for r in chosen]
    rbindings.insert_many(bindings)
    return {k: store.collection(k).count() for k in (
        "iam_users", "iam_roles", "iam_permissions", "iam_permission_bindings",
        "iam_role_bindings")}


def login(port):
    from .bench_api import login as api_login
    return api_login(port, BENCH_USER, BENCH_PASSWORD)


# ---- in process -------------------------------------------------------------------------

def per_call(fn, n):
    t0 = now()
    for _ in range(n):
        fn()
    return (now() - t0) / n


def threaded_cpu(fn, threads, total=8000):
    """Process CPU seconds per call of fn() when `threads` threads call it at once."""
    import os
    import threading

    def work():
        for _ in range(total // threads):
            fn()
    t0 = os.times()
    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    t1 = os.times()
    return (t1.user + t1.system - t0.user - t0.system) / total


def in_process(state_dir, token):
    import bottle
    from appliance.app import build_api
    from state import Store

    settings = settings_for(state_dir)
    api = build_api(settings)
    auth = api.authenticate
    request = bottle.BaseRequest({"HTTP_AUTHORIZATION": f"Bearer {token}"})
    principal = auth(request)
    assert principal.allows(PING), "the bench user should hold bench.ping.read"
    n_perms = len(principal.permissions)
    rows = []

    n = 3000
    verify = per_call(lambda: auth.signer.verify(token, "access"), n)
    rows.append(["JWT verify only (TokenSigner.verify)", us(verify), "", ""])
    uid = principal.user_uuid
    rows.append(["permissions_of, warm cache",
                 us(per_call(lambda: auth.permissions_of(uid, None), n)), "", ""])
    warm = per_call(lambda: auth(request).allows(PING), n)
    rows.append(["Authenticator() + allows(), warm cache", us(warm), "", ""])

    # Waitress runs 4 threads: the same calls from 4 threads at once, in process CPU time
    rows.append(["Authenticator() + allows(), warm, 4 threads at once (CPU)",
                 us(threaded_cpu(lambda: auth(request).allows(PING), 4)), "", ""])
    kinds = ("iam_revoked_sessions", "iam_users", "iam_role_bindings",
             "iam_permission_bindings", "iam_permissions")
    check = lambda: [api.store.collection(k).snapshot() for k in kinds]  # noqa: E731
    rows.append(["its 5 snapshot() freshness checks alone, 1 thread (CPU)",
                 us(threaded_cpu(check, 1)), "", ""])
    rows.append(["its 5 snapshot() freshness checks alone, 4 threads (CPU)",
                 us(threaded_cpu(check, 4)), "", ""])

    other = Store(state_dir)            # another process, as far as caches go
    counter = [0]

    def touch(store, kind):
        coll = store.collection(kind)
        if kind == "iam_permissions":
            target = coll.find_one(name="bench.p000.read")
            counter[0] += 1
            coll.update(target["uuid"], {"description": f"bench {counter[0]}"})
        else:       # rewrite a record of someone else with the same values
            target = coll.records()[len(coll.records()) // 2]
            coll.update(target["uuid"], {k: target[k] for k in ("role",) if k in target})

    def cold(label, store, kind, repeat=15):
        times = []
        for _ in range(repeat):
            touch(store, kind)
            t0 = now()
            auth(request).allows(PING)
            times.append(now() - t0)
        rows.append([label, us(median(times)), us(max(times)), repeat])

    cold("cold: iam_permissions written by this process", api.store, "iam_permissions")
    cold("cold: iam_permissions written by another process", other, "iam_permissions")
    cold("cold: iam_permission_bindings written by another process", other,
         "iam_permission_bindings")
    cold("cold: iam_role_bindings written by this process", api.store, "iam_role_bindings")
    cold("cold: iam_role_bindings written by another process", other, "iam_role_bindings")

    firsts = []
    for _ in range(3):
        fresh = build_api(settings).authenticate
        t0 = now()
        fresh(request).allows(PING)
        firsts.append(now() - t0)
    rows.append(["first call in a fresh process (every kind loaded)", us(median(firsts)),
                 us(max(firsts)), 3])
    return rows, n_perms, warm


def main():
    title("bench_iam: token verification + permission check with a large IAM")
    state_dir = temp_dir("iam")
    child = None
    try:
        t0 = now()
        counts = populate(state_dir)
        note(f"store: {', '.join(f'{v:,} {k}' for k, v in counts.items())} "
             f"(built in {now() - t0:.1f} s)")
        child = Child("tests.bench.bench_iam", state_dir)
        port = child.info["port"]
        token = login(port)
        base = f"http://127.0.0.1:{port}/v1/bench"
        note(f"load: {tool_name()}, 2 client threads, {CONNECTIONS} connections, "
             f"{SLICES} slices of 1 s per URL, alternated; Waitress threads=4")
        results = compare([("public", f"{base}/public", {}, child),
                           ("private", f"{base}/private",
                            {"Authorization": f"Bearer {token}"}, child)],
                          slices=SLICES, connections=CONNECTIONS)
        child.stop()
        child = None
        rows, n_perms, warm = in_process(state_dir, token)
    finally:
        if child is not None:
            child.stop()
        remove(state_dir)

    headers, http_rows = load_rows(results, [
        ("public", "GET /v1/bench/public, no token"),
        ("private", f"GET /v1/bench/private, token, {PING}")])
    table(["request"] + headers[1:], http_rows)
    r = ratios(results, "private", "public")
    note(f"ratio with auth / without: {ratio_text(r)}")
    note(f"auth adds ~{mean_cpu_us(results['private']) - mean_cpu_us(results['public']):.0f}"
         " us of server CPU per request")
    print()
    note(f"in process, the bench user holds {n_perms} permissions through 10 roles:")
    table(["what", "us/call (median)", "max us", "samples"], rows)
    note(f"    warm authentication is {warm * 1e6:.0f} us per request")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--serve":
        serve(sys.argv[2])
    else:
        main()
