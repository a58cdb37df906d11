"""The cost of authentication and permission checks with a large IAM.

    python -m tests.bench iam

Over HTTP, two real API processes (started as the supervisor and the unit start them:
access log on, the shipped thread count), each over its own store:
  large  the seed plus 1,000 roles, 201 permissions, 5,001 permission bindings, 1,000
         users and 10,000 role bindings (10 per user);
  small  the seed plus 10 roles, 201 permissions, 51 permission bindings, 1 user and
         10 role bindings.
In both the bench user `bench` holds 10 roles and the same set of permissions, one of them
granting iam.user.read; it gets its own user, GET /v1/iam/users/<uuid> with its token.
The two are loaded in alternating slices (small, large, small, ...): the ratio
large/small per pair shows what the IAM's size costs a request.

In process: microseconds per `Authenticator.__call__` + `allows()` (what every non-public
request runs) on a warm permission cache and on a cold one, right after an IAM kind
changed, written by this process or by another one (which also makes this one reload the
file). Every figure is min / median / max over rounds or samples.
"""

import os
import time

from . import (PAIR_HEADERS, api_service, login, median, note, now, pair_ratios, pair_rows,
               pairs, remove, settings_for, spread, table, temp_dir, title, tool_name)

LARGE = {"roles": 1_000, "users": 1_000}
SMALL = {"roles": 10, "users": 1}
ROLES_PER_USER = 10
PERMISSIONS = 200
PERMS_PER_ROLE = 5
PERM = "iam.user.read"       # what GET /v1/iam/users/<uuid> needs
BENCH_USER, BENCH_PASSWORD = "bench", "bench-user-password"
ROUNDS = int(os.environ.get("BENCH_IAM_PAIRS", "6"))
SECONDS = 3
CONNECTIONS = 16


def populate(settings, roles, users):
    """Seed, then add `roles` roles and `users` users (the bench user last), ROLES_PER_USER
    roles each, with insert_many. Returns the counts per kind."""
    from appliance.bootstrap import bootstrap
    from appliance.iam import passwords
    from state import Store
    bootstrap(settings)
    store = Store(settings["state_dir"])
    perms = store.collection("iam_permissions", unique=[("name",)])
    role_kind = store.collection("iam_roles", unique=[("name",)])
    pbindings = store.collection("iam_permission_bindings", unique=[("role", "permission")])
    user_kind = store.collection("iam_users", unique=[("username",)])
    rbindings = store.collection("iam_role_bindings", unique=[("user", "role", "project")])

    perm_ids = [p["uuid"] for p in perms.insert_many(
        [{"name": f"bench.p{i:03d}.read", "description": "bench"} for i in range(PERMISSIONS)])]
    ping_perm = (perms.find_one(name=PERM)
                 or perms.insert({"name": PERM, "description": "bench"}))["uuid"]
    role_ids = [r["uuid"] for r in role_kind.insert_many(
        [{"name": f"bench-role-{i:04d}", "description": "bench", "builtin": False}
         for i in range(roles)])]
    ping_role = role_ids[-1]
    pbindings.insert_many(
        [{"role": role, "permission": perm_ids[(i * PERMS_PER_ROLE + k) % PERMISSIONS]}
         for i, role in enumerate(role_ids) for k in range(PERMS_PER_ROLE)]
        + [{"role": ping_role, "permission": ping_perm}])

    def user(name, password_hash=None):
        return {"username": name, "password_hash": password_hash, "first_name": None,
                "last_name": None, "email": None, "type": "user", "description": "bench",
                "status": "ACTIVE"}
    user_ids = [u["uuid"] for u in user_kind.insert_many(
        [user(f"bench-user-{i:04d}") for i in range(users - 1)]
        + [user(BENCH_USER, passwords.hash_password(BENCH_PASSWORD))])]
    bindings = []
    for u, user_id in enumerate(user_ids):
        chosen = [(u * 7 + k * 101) % roles for k in range(ROLES_PER_USER)]
        if user_id == user_ids[-1] and roles - 1 not in chosen:
            chosen[-1] = roles - 1          # the bench user gets the role granting PERM
        bindings += [{"user": user_id, "role": role_ids[r], "project": None} for r in chosen]
    rbindings.insert_many(bindings)
    counts = {k: store.collection(k).count() for k in (
        "iam_users", "iam_roles", "iam_permissions", "iam_permission_bindings",
        "iam_role_bindings")}
    store.close()
    return counts, user_ids[-1]


# ---- in process -------------------------------------------------------------------------

IN_ROUNDS = 7           # each in-process figure: min / median / max over these rounds


def per_call(fn, n=500, rounds=IN_ROUNDS):
    """Seconds per call of fn(), one figure per round of n calls."""
    out = []
    for _ in range(rounds):
        t0 = now()
        for _ in range(n):
            fn()
        out.append((now() - t0) / n)
    return out


def threaded_cpu(fn, threads, total=1600, rounds=IN_ROUNDS):
    """Process CPU seconds per call of fn() when `threads` threads call it at once, one
    figure per round of `total` calls."""
    import threading

    def work():
        for _ in range(total // threads):
            fn()
    out = []
    for _ in range(rounds):
        t0 = time.process_time()       # nanoseconds; os.times() counts 10 ms ticks
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        out.append((time.process_time() - t0) / total)
    return out


def in_process(settings, token):
    import bottle
    from appliance.app import build_api
    from state import Store

    api = build_api(settings)
    auth = api.authenticate
    request = bottle.BaseRequest({"HTTP_AUTHORIZATION": f"Bearer {token}"})
    principal = auth(request)
    assert principal.allows(PERM), f"the bench user should hold {PERM}"
    threads = settings["api_threads"]
    rows = []

    def row(label, seconds):
        rows.append([label, spread([x * 1e6 for x in seconds], "{:,.1f}"), len(seconds)])

    row("JWT verify only (TokenSigner.verify)",
        per_call(lambda: auth.signer.verify(token, "access")))
    uid = principal.user_uuid
    row("permissions_of, warm cache", per_call(lambda: auth.permissions_of(uid, None)))
    warm = per_call(lambda: auth(request).allows(PERM))
    row("Authenticator() + allows(), warm cache", warm)
    # the API's Waitress threads call it at once: process CPU time per call
    row(f"Authenticator() + allows(), warm, {threads} threads at once (CPU)",
        threaded_cpu(lambda: auth(request).allows(PERM), threads))
    kinds = ("iam_revoked_sessions", "iam_users", "iam_role_bindings",
             "iam_permission_bindings", "iam_permissions")
    check = lambda: [api.store.collection(k).snapshot() for k in kinds]  # noqa: E731
    row("its 5 snapshot() freshness checks alone, 1 thread (CPU)", threaded_cpu(check, 1))
    row(f"its 5 snapshot() freshness checks alone, {threads} threads (CPU)",
        threaded_cpu(check, threads))

    other = Store(settings["state_dir"])      # another process, as far as caches go
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
            auth(request).allows(PERM)
            times.append(now() - t0)
        row(label, times)

    cold("cold: iam_permissions written by this process", api.store, "iam_permissions")
    cold("cold: iam_permissions written by another process", other, "iam_permissions")
    cold("cold: iam_permission_bindings written by another process", other,
         "iam_permission_bindings")
    cold("cold: iam_role_bindings written by this process", api.store, "iam_role_bindings")
    cold("cold: iam_role_bindings written by another process", other, "iam_role_bindings")

    firsts = []
    for _ in range(5):
        fresh = build_api(settings).authenticate
        t0 = now()
        fresh(request).allows(PERM)
        firsts.append(now() - t0)
    row("first call of a newly built API (every kind loaded)", firsts)
    return rows, len(principal.permissions), warm


def main():
    title("bench_iam: token verification + permission check, a large IAM against a small "
          "one, the API as `make run` runs it")
    sides = {"small": SMALL, "large": LARGE}
    dirs = {side: temp_dir(f"iam-{side}") for side in sides}
    services = {}
    try:
        targets = []
        for side, size in sides.items():
            settings = settings_for(dirs[side])
            t0 = now()
            counts, bench_uuid = populate(settings, **size)
            note(f"{side}: {', '.join(f'{v:,} {k}' for k, v in counts.items())} "
                 f"(built in {now() - t0:.1f} s)")
            services[side] = api_service(settings)
            port = settings["api_port"]
            token = login(port, BENCH_USER, BENCH_PASSWORD)
            targets.append((side, f"http://127.0.0.1:{port}/v1/iam/users/{bench_uuid}",
                            {"Authorization": f"Bearer {token}"}, services[side]))
        note(f"GET /v1/iam/users/<the bench user> with its token; load: {tool_name()}, "
             f"2 client threads, -c{CONNECTIONS}; {ROUNDS} pairs of {SECONDS} s slices "
             f"(small, large alternated); Waitress threads={settings['api_threads']}, "
             f"access log on")
        results = pairs(targets, ROUNDS, SECONDS, CONNECTIONS)
        for service in services.values():
            service.stop()
        services = {}
        rows, n_perms, warm = in_process(settings, token)
    finally:
        for service in services.values():
            service.stop()
        for side in sides:
            remove(dirs[side])

    table(["IAM"] + PAIR_HEADERS, pair_rows(results, [(s, s) for s in sides]))
    note(f"ratio large/small, per pair: {spread(pair_ratios(results, 'large', 'small'))} "
         f"(min / median / max)")
    print()
    note(f"in process, large IAM: the bench user holds {n_perms} permissions through "
         f"{ROLES_PER_USER} roles; us per call:")
    table(["what", "us min / median / max", "rounds or samples"], rows)
    note(f"    warm authentication is {median(warm) * 1e6:.0f} us per request (median)")


if __name__ == "__main__":
    main()
