"""The read index (docs/audit.md, "Reading"): a sidecar summary per closed segment lets a
read skip segments and stop early. It must never change an answer: the pages of random
filters over many segments equal a full scan's, whatever state the sidecars are in
(missing, corrupt, stale, or never written because the writer stopped between closing a
segment and writing its sidecar)."""

import datetime
import os
import random
import shutil
import uuid

import orjson
import pytest

from appliance.api import audit
from appliance.api.audit import INDEX, Trail, format_time, index_path
from tests.apiserver import ApiServer
from tests.audit.conftest import trail_files
from tests.conftest import ADMIN_PASSWORD
from tests.iam.helpers import bind, make_project, make_user

SEED = 29
ENTRIES = 700
KINDS = ("secret_secrets", "iam_users", "compute_nodes", "dns_records")
METHODS = ("POST", "PUT", "DELETE")
START = datetime.datetime(2026, 11, 20, 8, 0, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module", autouse=True)
def marks_every_few_lines():
    """Marks every 3 lines instead of 256: the 4 KiB segments here are read by stretches."""
    kept, audit.MARK_EVERY = audit.MARK_EVERY, 3
    yield
    audit.MARK_EVERY = kept


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """An API whose trail rolls a segment every 4 KiB, two projects with an owner each,
    and ENTRIES generated entries written by the API's own writer and by a second writer
    over the same directory (as a second API process would), in shuffled time order so
    that the segments' time ranges overlap."""
    server = ApiServer(str(tmp_path_factory.mktemp("index")), ADMIN_PASSWORD,
                       audit_segment_bytes=4096, audit_max_bytes=1 << 30).start()
    admin = server.client(server.login("admin", ADMIN_PASSWORD))
    projects, owners = [], {}
    for _ in range(2):
        project = make_project(admin)
        user, username, password = make_user(admin)
        bind(admin, user, "owner", project)
        owners[project] = server.client(server.login(username, password,
                                                     f"project:{project}"))
        projects.append(project)
    rng = random.Random(SEED)
    actors = [{"type": "user", "id": str(uuid.UUID(int=rng.getrandbits(128))),
               "name": f"user-{i}", "project_id": rng.choice(projects + [None])}
              for i in range(5)]
    # whole multiples of 5 s: many entries share a time, within and across segments
    # (the order then falls to the uuid)
    moments = sorted(START + datetime.timedelta(seconds=5 * rng.randrange(720))
                     for _ in range(ENTRIES))
    generated = []
    for i, moment in enumerate(moments):
        # neighbours swap: times out of order inside and across segments
        if i and rng.random() < 0.2:
            moment = moments[i - 1] - datetime.timedelta(seconds=5 * rng.randrange(3))
        item = {"uuid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                "created_at": format_time(moment), "request_id": uuid.uuid4().hex,
                "method": rng.choice(METHODS), "path": "/v1/x", "route": "/v1/x",
                "status": rng.choice((201, 400, 403)), "source": "127.0.0.1",
                "actor": rng.choice(actors + [None]), "kind": rng.choice(KINDS + (None,)),
                "resource_uuid": None,
                "project_id": rng.choice(projects + [None, str(uuid.uuid4())])}
        if rng.random() < 0.05:
            item["login"] = {"username": f"user-{rng.randrange(7)}", "succeeded": False}
        generated.append(item)
    other = Trail(server.settings["state_dir"], 1 << 30, 86400.0 * 365, 4096)
    try:
        # a few entries a write: a write goes whole into one segment
        for start in range(0, ENTRIES, 4):
            writer = server.api.trail if rng.random() < 0.5 else other
            for item in generated[start:start + 4]:
                writer.record(dict(item))
            assert writer.flush()
    finally:
        other.close()
    yield {"server": server, "admin": admin, "owners": owners, "projects": projects,
           "actors": actors, "generated": generated, "rng": rng}
    server.stop()


def all_entries(state_dir):
    """Every entry of the trail, read from the segment files with no help."""
    found = []
    for path in trail_files(state_dir):
        with open(path, "rb") as f:
            for line in f.read().splitlines():
                try:
                    item = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(item, dict):
                    found.append(item)
    return found


def full_scan(state_dir, query, project=None):
    """What the filters documented in docs/audit.md select, in their order: the oracle."""
    def passes(item):
        actor = item.get("actor") or {}
        names = {actor.get("id"), actor.get("name"), (item.get("login") or {}).get(
            "username")}
        return ((project is None or item.get("project_id") == project)
                and ("project_id" not in query or item.get("project_id") in query["project_id"])
                and ("kind" not in query or item.get("kind") in query["kind"])
                and ("method" not in query or item.get("method") in query["method"])
                and ("actor" not in query or set(query["actor"]) & names)
                and ("since" not in query or item["created_at"] >= query["since"][0])
                and ("until" not in query or item["created_at"] < query["until"][0]))
    chosen = [e for e in all_entries(state_dir) if passes(e)]
    chosen.sort(key=lambda e: (e["created_at"], e["uuid"]),
                reverse=query.get("sort_dir") == ["desc"])
    return [e["uuid"] for e in chosen]


def read_all(client, query, limit):
    """Every page of a query, following the markers."""
    got, marker = [], None
    for _ in range(10000):
        page_query = dict(query)
        if limit is not None:
            page_query["page_limit"] = [str(limit)]
        if marker:
            page_query["page_marker"] = [marker]
        resp = client.get("/v1/audit/", query=page_query)
        assert resp.status == 200, (page_query, resp)
        got += [e["uuid"] for e in resp.json]
        marker = resp.header("X-Pagination-Marker")
        if limit is None or not marker:
            return got
    raise AssertionError("paging did not end")


def random_query(world):
    rng = world["rng"]
    query = {}
    if rng.random() < 0.4:
        query["project_id"] = rng.sample(world["projects"] + [str(uuid.uuid4())],
                                         rng.choice((1, 2)))
    if rng.random() < 0.4:
        query["kind"] = rng.sample(KINDS, rng.choice((1, 2)))
    if rng.random() < 0.3:
        actor = rng.choice(world["actors"])
        query["actor"] = [rng.choice((actor["id"], actor["name"], "user-6", "nobody"))]
    if rng.random() < 0.3:
        query["method"] = [rng.choice(METHODS)]
    if rng.random() < 0.4:
        low, high = sorted(5 * rng.randrange(-100, 820) for _ in range(2))
        if rng.random() < 0.7:
            query["since"] = [format_time(START + datetime.timedelta(seconds=low))]
        if rng.random() < 0.7:
            query["until"] = [format_time(START + datetime.timedelta(seconds=high))]
    if rng.random() < 0.5:
        query["sort_dir"] = ["desc"]
    return query


def test_many_segments_and_overlapping_ranges(world):
    state_dir = world["server"].settings["state_dir"]
    assert len(trail_files(state_dir)) > 50
    # most closed segments have their sidecar, written by the writer that closed them,
    # each cut into stretches (every 3 lines here)
    sidecars = [n for n in os.listdir(state_dir) if INDEX.match(n)]
    assert len(sidecars) > 40
    for name in sidecars:
        with open(os.path.join(state_dir, name), "rb") as f:
            body = orjson.loads(f.read())
        assert len(body["marks"]) == -(-body["count"] // 3), name


def test_random_filters_answer_as_a_full_scan_does(world):
    """Admin and owners, random filters, whole lists and every page of random sizes."""
    state_dir = world["server"].settings["state_dir"]
    rng = world["rng"]
    checked = nonempty = 0
    for _ in range(80):
        query = random_query(world)
        # pages of one entry now and then: many requests, so not always
        limit = rng.choice((None, 1, 7, 50) if rng.random() < 0.2 else (None, 7, 50))
        if rng.random() < 0.3:
            project = rng.choice(world["projects"])
            client = world["owners"][project]
            if "project_id" in query:
                query["project_id"] = [project]
        else:
            project, client = None, world["admin"]
        expected = full_scan(state_dir, query, project)
        assert read_all(client, query, limit) == expected, (query, limit, project)
        checked += 1
        nonempty += bool(expected)
    assert checked == 80 and nonempty > 40


def damage_and_check(world, damage):
    """Damage every sidecar, then check that reads answer as a full scan does and that
    each sidecar is sound again afterwards (rebuilt from its segment)."""
    state_dir = world["server"].settings["state_dir"]
    world["server"].api.trail._summaries.clear()     # the process's memory of them too
    sidecars = sorted(os.path.join(state_dir, n) for n in os.listdir(state_dir)
                      if INDEX.match(n))
    for path in sidecars:
        damage(path)
    project = world["projects"][0]
    for query in ({}, {"kind": ["iam_users"]}, {"sort_dir": ["desc"], "method": ["PUT"]}):
        assert read_all(world["admin"], query, 9) == full_scan(state_dir, query), query
    assert read_all(world["owners"][project], {}, 13) == full_scan(state_dir, {}, project)
    open_segment = world["server"].api.trail._segment    # being written: has none yet
    for segment in trail_files(state_dir):
        if segment == open_segment:
            continue
        with open(index_path(segment), "rb") as f:
            body = orjson.loads(f.read())
        assert body["size"] == os.path.getsize(segment), segment


def test_missing_sidecars_are_rebuilt(world):
    damage_and_check(world, os.unlink)


def test_corrupt_sidecars_are_rebuilt_not_trusted(world):
    rng = random.Random(SEED)

    def corrupt(path):
        with open(path, "rb") as f:
            data = f.read()
        body = orjson.loads(data)
        choice = rng.randrange(4)
        if choice == 0:
            data = data[:len(data) // 2]                  # cut short
        elif choice == 1:
            data = b"\x00garbage"
        elif choice == 2:       # an edited sidecar: claims nothing, digest left as it was
            body.update(projects=[], kinds=[], actors=[], methods=[])
            data = orjson.dumps(body)
        else:                   # sound, but of the segment at another size
            del body["digest"]
            body["size"] += 1
            data = orjson.dumps(body)
        with open(path, "wb") as f:
            f.write(data)
    damage_and_check(world, corrupt)


def test_a_crash_between_closing_a_segment_and_writing_its_sidecar(tmp_path):
    """The writer closes segments and cannot write their sidecars (their place is taken
    by a directory: a real failure, as a crash at that moment would leave no sidecar), and
    a temporary sidecar is left half written; the trail still reads correctly, and
    once the way is clear a read writes the sidecars."""
    server = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD, audit_segment_bytes=4096,
                       audit_max_bytes=1 << 30).start()
    try:
        admin = server.client(server.login("admin", ADMIN_PASSWORD))
        trail, state_dir = server.api.trail, server.settings["state_dir"]
        assert trail.flush()
        # the sidecars of the next segments: a segment is named by its opening time,
        # so block every name the writer could take in the coming seconds
        moment = datetime.datetime.now(datetime.timezone.utc)
        blocked = []
        generated = []
        for i in range(120):
            generated.append({"uuid": str(uuid.uuid4()),
                              "created_at": format_time(moment), "method": "POST",
                              "kind": KINDS[i % len(KINDS)], "project_id": None,
                              "actor": None, "padding": "x" * 300})
        first = len(trail_files(state_dir))
        for item in generated:
            trail.record(item)
            assert trail.flush()
            for segment in trail_files(state_dir)[first:]:
                target = index_path(segment)
                if not os.path.exists(target):
                    os.mkdir(target)
                    blocked.append(target)
        assert len(blocked) >= 5
        stray = os.path.join(state_dir, os.path.basename(blocked[0]) + ".tmp-1-1")
        with open(stray, "wb") as f:
            f.write(b'{"version": 1, "si')
        trail._summaries.clear()
        for query in ({}, {"kind": ["iam_users"]}, {"sort_dir": ["desc"]}):
            assert read_all(admin, query, 11) == full_scan(state_dir, query), query
        # the way clear: the next read writes them
        for target in blocked:
            shutil.rmtree(target)
        trail._summaries.clear()
        assert read_all(admin, {"kind": ["dns_records"]}, 11) == full_scan(
            state_dir, {"kind": ["dns_records"]})
        assert all(os.path.isfile(t) for t in blocked[:-1])
    finally:
        server.stop()
