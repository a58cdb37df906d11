"""Writers at once: the owner rule holds when a database is created while its owner is
deleted, and a name is taken once when two create it together."""

import threading

from .helpers import databases, make_instance, make_user, users

ROUNDS = 20


def at_once(*calls):
    """Run the calls in threads started together; their results in order."""
    results = [None] * len(calls)
    barrier = threading.Barrier(len(calls))

    def run(i, call):
        barrier.wait()
        results[i] = call()

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_no_database_outlives_its_owner(server, admin):
    instance = make_instance(admin)
    for n in range(ROUNDS):
        owner = make_user(admin, instance)
        made, deleted = at_once(
            lambda: admin.post(databases(instance), {"name": f"race_{n}",
                                                     "owner": owner["uuid"]}),
            lambda: admin.delete(f"{users(instance)}/{owner['uuid']}"))
        # either the database came first (and the delete is refused) or the user went
        # first (and the database is refused): never both
        assert sorted([made.status, deleted.status]) in ([201, 409], [204, 400]), \
            (made, deleted)
    owners = {u["uuid"] for u in server.store.collection("sqldb_users").by(
        "instance", instance["uuid"])}
    for db in server.store.collection("sqldb_databases").by("instance", instance["uuid"]):
        assert db["owner"] in owners


def test_a_name_is_taken_once(admin):
    instance = make_instance(admin)
    for n in range(ROUNDS):
        results = at_once(*[lambda: admin.post(users(instance), {
            "name": f"same_{n}", "password": "password-1"})] * 3)
        assert sorted(r.status for r in results) == [201, 409, 409], results


def test_no_user_outlives_its_instance(server, admin):
    for n in range(ROUNDS // 2):
        instance = make_instance(admin)
        made, deleted = at_once(
            lambda: admin.post(users(instance), {"name": "late", "password": "password-1"}),
            lambda: admin.delete(f"/v1/sqldb/instances/{instance['uuid']}"))
        assert deleted.status == 204 and made.status in (201, 404), (made, deleted)
        assert server.store.collection("sqldb_users").by("instance", instance["uuid"]) == []
