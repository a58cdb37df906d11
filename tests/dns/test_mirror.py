"""The DNS realm mirror (spec 2.8, rules 1-8; docs/dns-mirror.md).

Every upstream is a second real appliance on loopback (tests.apiserver.ApiServer) with its
records API in one of its tag modes: full, no_filter (tags stored, q refused) and none (no
tags at all). Its WSGI app is wrapped in a small layer that records every request and, on
demand, answers 500 to a domain's record listings or 400 to the creation of a record by
name. The mirror runs as a real daemon process (`python -m daemons.mirror`) over the state
dir of a local appliance; appliance.dns.mirror is also tested directly.
"""

import io
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid as uuidlib

import pytest

from appliance import config
from appliance.app import create_app
from appliance.api.resource import Action
from appliance.bootstrap import bootstrap
from appliance.dns import mirror as dnsmirror
from appliance.dns import upstream as dnsupstream
from appliance.dns.adopt import REQUEST_SCHEMA, adopt
from appliance.iam.builtin import ADMIN_PROJECT
from daemons.mirror import Mirror
from state import Store
from tests.wsgiserver import LoopbackServer
from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD, ROOT, RUN_LOG_DIR, SECRET_VALUES
from tests.iam.helpers import bind, make_project, make_user
from tests.secret.conftest import wait_for
from tests import processes

D = "/v1/dns/domains"
MIRROR_PASSWORD = "mirror-pw-" + uuidlib.uuid4().hex
SECRET_VALUES.add(MIRROR_PASSWORD)      # tests/secret/test_zz_logs.py greps every log
FILTER_RETRY = 1.5                      # the "hour" of the daemons under test


# ---- the upstream: a real appliance behind a recording / fault-injecting WSGI layer -------

class Layer:
    LISTING = re.compile(r"^/v1/dns/domains/([0-9a-f-]{36})/records/?$")

    def __init__(self, app):
        self.app = app
        self.requests = []            # (monotonic, method, path, decoded query)
        self.fail_listings = set()    # upstream domain uuids whose listings answer 500
        self.refuse_names = set()     # record names whose creation answers 400
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        query = urllib.parse.unquote_plus(environ.get("QUERY_STRING", ""))
        with self.lock:
            self.requests.append((time.monotonic(), method, path, query))
        listing = self.LISTING.match(path)
        if listing and method == "GET" and listing.group(1) in self.fail_listings:
            return self.answer(start_response, 500, "InternalError", "injected failure")
        if listing and method == "POST" and self.refuse_names:
            length = int(environ.get("CONTENT_LENGTH") or 0)
            raw = environ["wsgi.input"].read(length)
            environ["wsgi.input"] = io.BytesIO(raw)
            try:
                name = json.loads(raw)["record"]["name"]
            except (ValueError, KeyError, TypeError):
                name = None
            if name in self.refuse_names:
                return self.answer(start_response, 400, "ValidationError",
                                   "record.name: refused by this upstream")
        return self.app(environ, start_response)

    @staticmethod
    def answer(start_response, status, kind, message):
        body = json.dumps({"type": kind, "code": status, "message": message}).encode()
        start_response(f"{status} {kind}", [("Content-Type", "application/json"),
                                            ("Content-Length", str(len(body)))])
        return [body]

    def listings(self, zone, since=0.0):
        """(time, query) of the record listings of one upstream domain."""
        with self.lock:
            return [(t, q) for t, m, p, q in self.requests
                    if t >= since and m == "GET" and self.LISTING.match(p)
                    and self.LISTING.match(p).group(1) == zone]


class UpstreamServer(ApiServer):
    """ApiServer whose app is wrapped in a Layer, served by Waitress here."""

    def start(self):
        bootstrap(self.settings)
        app, self.api = create_app(self.settings)
        self.layer = Layer(app)
        self.loop = LoopbackServer(self.layer, port=self.settings["api_port"]).start()
        self.port = self.loop.port
        return self

    @property
    def url(self):
        return f"http://{self.host}:{self.port}"


def register_adopt(api):
    """Until Domains declares the action itself: the same Action, registered late."""
    domains = api.resources[D]
    if any(a.name == "adopt" for a in domains.actions):
        return
    action = Action("adopt", lambda call, record: adopt(api, call, record),
                    request_schema=REQUEST_SCHEMA)
    domains.actions.append(action)
    api.route("POST", f"{D}/<uuid>/actions/adopt/invoke", domains._action_endpoint(action),
              permission=domains.permission("adopt"), resource=domains, tag="dns")


class MirrorProcess:
    """`python -m daemons.mirror` over a local state dir, configured by variables."""

    def __init__(self, state_dir, **settings):
        self.state_dir, self.settings = state_dir, settings
        self.log_path = os.path.join(RUN_LOG_DIR, f"mirror-{os.getpid()}-{id(self)}.log")

    def start(self):
        env = {k: v for k, v in os.environ.items()
               if "proxy" not in k.lower() and not k.startswith("APPLIANCE_")}
        env.update(PYTHONPATH=ROOT, APPLIANCE_STATE_DIR=self.state_dir,
                   APPLIANCE_LOG_LEVEL="DEBUG",
                   **{f"APPLIANCE_{k.upper()}": str(v) for k, v in self.settings.items()})
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "daemons.mirror"], cwd=ROOT,
                                         env=env, stdout=log, stderr=log)
        return self

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        processes.stop(self.proc, 5)

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()


class Env:
    """A local appliance, its mirror daemon and the upstream it mirrors to."""

    def __init__(self, tmp, upstream, mode, username="mirror", password=MIRROR_PASSWORD,
                 **daemon_settings):
        self.upstream, self.mode = upstream, mode
        self.realm = str(uuidlib.uuid4())
        self.mark = f"realm:{self.realm}"
        mirror = {"realm_uuid": self.realm, "mirror_url": upstream.url,
                  "mirror_username": username, "mirror_password": password}
        self.local = ApiServer(str(tmp / "local"), ADMIN_PASSWORD, extra=register_adopt,
                               **mirror).start()
        self.admin = self.local.client(self.local.login("admin", ADMIN_PASSWORD))
        self.up = upstream.client(upstream.login("admin", ADMIN_PASSWORD))
        self.daemon = MirrorProcess(self.local.settings["state_dir"], **mirror,
                                    mirror_resync_seconds=3, mirror_retry_max_seconds=1,
                                    mirror_filter_retry_seconds=FILTER_RETRY,
                                    **daemon_settings).start()

    def stop(self):
        self.daemon.stop()
        self.local.stop()

    # -- local side --
    def domain(self, sync=True, name=None):
        resp = self.admin.post(D, {"name": name or f"m{uuidlib.uuid4().hex[:10]}.test",
                                   "project_id": ADMIN_PROJECT, "sync_to_ecosystem": sync})
        assert resp.status == 201, resp
        return resp.json

    def enable(self, domain):
        resp = self.admin.put(f"{D}/{domain['uuid']}", {"sync_to_ecosystem": True})
        assert resp.status == 200, resp

    def synced(self, *bodies):
        """A domain whose records all exist before its first pass (one pass, one count)."""
        domain = self.domain(sync=False)
        made = [self.add(domain, body) for body in bodies]
        self.enable(domain)
        return domain, made

    def add(self, domain, body):
        resp = self.admin.post(f"{D}/{domain['uuid']}/records", body)
        assert resp.status == 201, resp
        return resp.json

    def mirror(self, domain):
        return self.admin.get(f"{D}/{domain['uuid']}").json["mirror"]

    def settled(self, domain, since_revision=None, **expect):
        """Wait for a mirror status (ACTIVE unless told) and return the field."""
        expect.setdefault("status", "ACTIVE")

        def check():
            m = self.mirror(domain)
            return m if m and all(m.get(k) == v for k, v in expect.items()) else None
        return wait_for(check)

    # -- upstream side --
    def zone(self, domain):
        found = self.up.get(D, query={"name": domain["name"]}).json
        return found[0] if found else None

    def upstream_records(self, domain, with_soa=False):
        zone = self.zone(domain)
        if zone is None:
            return {}
        listed = self.up.get(f"{D}/{zone['uuid']}/records").json
        return {r["uuid"]: r for r in listed if with_soa or r["type"] != "SOA"}

    def upstream_add(self, domain, body):
        zone = self.zone(domain) or self.up.post(D, {"name": domain["name"],
                                                     "project_id": ADMIN_PROJECT}).json
        resp = self.up.post(f"{D}/{zone['uuid']}/records", body)
        assert resp.status == 201, resp
        return resp.json


def a_record(name="www", address="10.20.0.5", **extra):
    return {"type": "A", "record": {"kind": "A", "name": name, "address": address}, **extra}


def txt(name, content, **extra):
    return {"type": "TXT", "record": {"kind": "TXT", "name": name, "content": content},
            **extra}


def mirror_user(upstream):
    """An ordinary upstream IAM user with the admin role: the mirror's credentials."""
    up = upstream.client(upstream.login("admin", ADMIN_PASSWORD))
    user, _, _ = make_user(up, "mirror", MIRROR_PASSWORD)
    bind(up, user, "admin")
    return user


def start_upstream(tmp, mode, **overrides):
    srv = UpstreamServer(str(tmp), ADMIN_PASSWORD, dns_tags=mode, **overrides).start()
    mirror_user(srv)
    return srv


@pytest.fixture(scope="module")
def full_upstream(tmp_path_factory):
    srv = start_upstream(tmp_path_factory.mktemp("up-full"), "full")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def full(tmp_path_factory, full_upstream):
    env = Env(tmp_path_factory.mktemp("env-full"), full_upstream, "full")
    yield env
    env.stop()


@pytest.fixture(scope="module")
def no_filter(tmp_path_factory):
    srv = start_upstream(tmp_path_factory.mktemp("up-nf"), "no_filter")
    env = Env(tmp_path_factory.mktemp("env-nf"), srv, "no_filter")
    yield env
    env.stop()
    srv.stop()


@pytest.fixture(scope="module")
def no_tags(tmp_path_factory):
    srv = start_upstream(tmp_path_factory.mktemp("up-none"), "none")
    env = Env(tmp_path_factory.mktemp("env-none"), srv, "none")
    yield env
    env.stop()
    srv.stop()


# ---- rule 1: the mark; create, update, delete propagate ---------------------------------

def test_rule1_create_update_delete_propagate_with_the_mark(full):
    domain, (www, note) = full.synced(a_record(tags=["web"]), txt("note", "hello"))
    m = full.settled(domain, created=2)
    assert m["tag_filter"] == "supported" and m["last_error"] is None

    zone = full.zone(domain)
    assert zone["project_id"] == ADMIN_PROJECT          # created upstream, admin project
    up = full.upstream_records(domain)
    assert set(up) == {www["uuid"], note["uuid"]}        # same uuids, no SOA
    assert up[www["uuid"]]["tags"] == ["web", full.mark]
    assert up[note["uuid"]]["tags"] == [full.mark]
    assert up[www["uuid"]]["record"] == www["record"]
    # the local SOA is never mirrored: the upstream keeps its own, only one
    soas = [r for r in full.upstream_records(domain, with_soa=True).values()
            if r["type"] == "SOA"]
    local_soa = [r for r in full.admin.get(f"{D}/{domain['uuid']}/records").json
                 if r["type"] == "SOA"][0]
    assert len(soas) == 1 and soas[0]["uuid"] != local_soa["uuid"]

    full.admin.put(f"{D}/{domain['uuid']}/records/{www['uuid']}",
                   {"ttl": 600, "record": {"kind": "A", "name": "www", "address": "10.9.9.9"}})
    # promptly, although a timed re-sync is pending
    wait_for(lambda: full.upstream_records(domain)[www["uuid"]]["record"]["address"]
             == "10.9.9.9", timeout=2.0)
    assert full.upstream_records(domain)[www["uuid"]]["ttl"] == 600
    full.settled(domain, updated=1)

    assert full.admin.delete(f"{D}/{domain['uuid']}/records/{note['uuid']}").status == 204
    wait_for(lambda: note["uuid"] not in full.upstream_records(domain))
    full.settled(domain, deleted=1)
    assert set(full.upstream_records(domain)) == {www["uuid"]}


def test_unsynced_domain_is_left_alone(full):
    domain = full.domain(sync=False)
    full.add(domain, a_record())
    synced = full.domain()
    full.settled(synced)               # the daemon has had its pass
    assert full.zone(domain) is None and full.mirror(domain) is None


# ---- rule 2: other realms and unmarked records intact; local realm: tags replaced ------

def test_rule2_foreign_and_unmarked_records_with_our_uuids_are_left_intact(full):
    domain = full.domain(sync=False)
    unmarked = full.upstream_add(domain, a_record("legacy", "10.1.1.1", tags=["old"]))
    foreign = full.upstream_add(domain, a_record("theirs", "10.1.1.2",
                                                 tags=["realm:" + str(uuidlib.uuid4())]))
    # local records that claim those uuids, with other content
    full.add(domain, a_record("legacy", "10.2.2.1", uuid=unmarked["uuid"]))
    full.add(domain, a_record("theirs", "10.2.2.2", uuid=foreign["uuid"]))
    plain = full.add(domain, a_record("plain", "10.2.2.3"))
    full.enable(domain)

    m = full.settled(domain, created=1)
    assert len(m["skipped"]) == 2, m
    assert any(unmarked["uuid"] in s and "unmarked" in s for s in m["skipped"]), m
    assert any(foreign["uuid"] in s and "realm:" in s for s in m["skipped"]), m
    up = full.upstream_records(domain)
    assert set(up) == {unmarked["uuid"], foreign["uuid"], plain["uuid"]}   # no duplicate
    assert up[unmarked["uuid"]] == unmarked and up[foreign["uuid"]] == foreign
    # deleting the local twins does not delete what is not ours
    full.admin.delete(f"{D}/{domain['uuid']}/records/{unmarked['uuid']}")
    full.admin.delete(f"{D}/{domain['uuid']}/records/{foreign['uuid']}")
    full.admin.delete(f"{D}/{domain['uuid']}/records/{plain['uuid']}")
    wait_for(lambda: set(full.upstream_records(domain)) == {unmarked["uuid"],
                                                            foreign["uuid"]})
    full.settled(domain, skipped=[])
    assert full.upstream_records(domain) == {unmarked["uuid"]: unmarked,
                                            foreign["uuid"]: foreign}


def test_rule2_local_realm_tags_are_replaced_by_our_mark(full):
    other = "realm:" + str(uuidlib.uuid4())
    domain, (made,) = full.synced(a_record(tags=[other, "team:a", full.mark, "env:prod"]))
    full.settled(domain, created=1)
    assert full.upstream_records(domain)[made["uuid"]]["tags"] == [
        "team:a", "env:prod", full.mark]
    # a tag change locally is a change upstream; realm: tags still never pass
    full.admin.put(f"{D}/{domain['uuid']}/records/{made['uuid']}",
                   {"tags": ["realm:x", "team:b"]})
    wait_for(lambda: full.upstream_records(domain)[made["uuid"]]["tags"]
             == ["team:b", full.mark])


# ---- rule 3: the mark is a label; IAM still decides ----------------------------------

def test_rule3_mirror_user_without_dns_permissions_gets_a_clear_error(tmp_path,
                                                                      full_upstream):
    up = full_upstream.client(full_upstream.login("admin", ADMIN_PASSWORD))
    password = "np-" + uuidlib.uuid4().hex
    SECRET_VALUES.add(password)
    user, username, _ = make_user(up, None, password)
    env = Env(tmp_path, full_upstream, "full", username=username, password=password)
    try:
        domain = env.domain()
        env.add(domain, a_record())
        m = env.settled(domain, status="ERROR")
        assert "403" in m["last_error"] and "permission" in m["last_error"], m
        assert env.zone(domain) is None
        assert env.daemon.alive()
        # permissions granted through IAM: the same credentials now work
        bind(up, user, "admin")
        env.settled(domain, created=1)
        assert len(env.upstream_records(domain)) == 1
    finally:
        env.stop()
    assert password not in env.daemon.log()


def test_wrong_mirror_password_is_an_error_not_a_crash(tmp_path, full_upstream):
    env = Env(tmp_path, full_upstream, "full", password="not-the-password")
    try:
        domain = env.domain()
        m = env.settled(domain, status="ERROR")
        assert "invalid_grant" in m["last_error"], m
        assert env.daemon.alive()
    finally:
        env.stop()


# ---- rule 4: adoption of legacy records -------------------------------------------------

def test_rule4_adopt_verifies_origin_and_marks(full):
    domain = full.domain(sync=False)
    content = a_record("legacy", "10.3.3.1")
    # legacy upstream records, as an older realm or a human left them
    good = full.upstream_add(domain, {**content, "tags": ["keep:me"]})
    differs = full.upstream_add(domain, a_record("legacy2", "10.3.3.2"))
    foreign = full.upstream_add(domain, a_record("legacy3", "10.3.3.3",
                                                 tags=["realm:" + str(uuidlib.uuid4())]))
    same_content = full.upstream_add(domain, a_record("legacy4", "10.3.3.4"))
    # local records: same uuid and content; same uuid, other content; same uuid and content
    # but the upstream one is another realm's; same content, other uuid
    full.add(domain, {**content, "uuid": good["uuid"]})
    full.add(domain, a_record("legacy2", "10.9.9.2", uuid=differs["uuid"]))
    full.add(domain, a_record("legacy3", "10.3.3.3", uuid=foreign["uuid"]))
    full.add(domain, a_record("legacy4", "10.3.3.4"))
    full.enable(domain)
    m = full.settled(domain, created=1)
    assert len(m["skipped"]) == 3, m                       # not ours: reported, untouched

    invoke = f"{D}/{domain['uuid']}/actions/adopt/invoke"
    missing = str(uuidlib.uuid4())
    resp = full.admin.post(invoke, {"records": [good["uuid"], differs["uuid"],
                                                foreign["uuid"], same_content["uuid"],
                                                missing]})
    assert resp.status == 200, resp
    results = {r["uuid"]: r for r in resp.json["results"]}
    assert resp.json["adopted"] == 1 and resp.json["refused"] == 4
    assert results[good["uuid"]]["result"] == "adopted"
    assert results[differs["uuid"]]["result"] == "refused"
    assert "differs" in results[differs["uuid"]]["reason"]
    assert "realm:" in results[foreign["uuid"]]["reason"]
    assert "no local record" in results[same_content["uuid"]]["reason"]
    assert results[missing]["result"] == "refused"

    up = full.upstream_records(domain)
    assert up[good["uuid"]]["tags"] == ["keep:me", full.mark]      # other tags kept
    for untouched in (differs, foreign, same_content):
        assert up[untouched["uuid"]] == untouched
    # adopting again answers adopted, without a write
    again = full.admin.post(invoke, {"records": [good["uuid"]]}).json
    assert again["results"][0]["result"] == "adopted"
    # from now on the mirror manages it: updates follow, delete removes it
    full.admin.put(f"{D}/{domain['uuid']}/records/{good['uuid']}", {"ttl": 120})
    wait_for(lambda: full.upstream_records(domain)[good["uuid"]]["ttl"] == 120)
    full.admin.delete(f"{D}/{domain['uuid']}/records/{good['uuid']}")
    wait_for(lambda: good["uuid"] not in full.upstream_records(domain))
    assert len(full.upstream_records(domain)) == 4     # 3 legacy + our twin of legacy4


def test_rule4_adopt_is_an_admin_action_and_checks_its_body(full):
    domain = full.domain()
    invoke = f"{D}/{domain['uuid']}/actions/adopt/invoke"
    for body in ({}, {"records": []}, {"records": ["nope"]}, {"records": "x"},
                 {"records": [str(uuidlib.uuid4())], "force": True}):
        resp = full.admin.post(invoke, body)
        assert resp.status == 400, (body, resp)
    user, username, password = make_user(full.admin)
    bind(full.admin, user, "owner", ADMIN_PROJECT)
    owner = full.local.client(full.local.login(username, password,
                                               f"project:{ADMIN_PROJECT}"))
    resp = owner.post(invoke, {"records": [str(uuidlib.uuid4())]})
    assert resp.status == 403, resp


@pytest.mark.parametrize("settings,status,words", [
    ({}, 409, "not configured"),
    ({"mirror_url": "http://127.0.0.1:9", "realm_uuid": str(uuidlib.uuid4()),
      "mirror_username": "mirror", "mirror_password": MIRROR_PASSWORD}, 502, "cannot reach"),
], ids=["unconfigured", "upstream-down"])
def test_adopt_without_a_usable_mirror(tmp_path, settings, status, words):
    local = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD, extra=register_adopt,
                      **settings).start()
    try:
        admin = local.client(local.login("admin", ADMIN_PASSWORD))
        domain = admin.post(D, {"name": "nomirror.test", "project_id": ADMIN_PROJECT}).json
        resp = admin.post(f"{D}/{domain['uuid']}/actions/adopt/invoke",
                          {"records": [str(uuidlib.uuid4())]})
        assert resp.status == status and words in resp.json["message"], resp
        assert set(resp.json) == {"type", "code", "message"}
    finally:
        local.stop()


# ---- rule 5: an upstream without tags -----------------------------------------------------

def test_rule5_no_tag_support_new_records_unmarked_existing_untouched(no_tags):
    env = no_tags
    domain = env.domain(sync=False)
    legacy = env.upstream_add(domain, a_record("legacy", "10.5.5.1"))
    env.add(domain, a_record("legacy", "10.5.5.99", uuid=legacy["uuid"]))
    new = env.add(domain, a_record("new", "10.5.5.2", tags=["team:a"]))
    env.enable(domain)
    m = env.settled(domain, created=1)
    assert m["tag_filter"] == "unsupported" and m["filter_retry_at"]
    assert any(legacy["uuid"] in s and "rule 5" in s for s in m["skipped"]), m
    up = env.upstream_records(domain)
    assert "tags" not in up[new["uuid"]]                      # created, unmarked
    assert up[new["uuid"]]["record"] == new["record"]
    assert up[legacy["uuid"]] == legacy                       # not updated

    # even the records it created itself: no proof, so no update and no delete
    env.admin.put(f"{D}/{domain['uuid']}/records/{new['uuid']}", {"ttl": 77})
    wait_for(lambda: any(new["uuid"] in s for s in env.mirror(domain)["skipped"]))
    assert env.upstream_records(domain)[new["uuid"]]["ttl"] == 3600
    # nor can such a record be adopted: there is nowhere to put the mark
    resp = env.admin.post(f"{D}/{domain['uuid']}/actions/adopt/invoke",
                          {"records": [legacy["uuid"]]})
    assert resp.status == 200 and resp.json["results"][0]["result"] == "refused", resp
    assert "tags" in resp.json["results"][0]["reason"]
    env.admin.delete(f"{D}/{domain['uuid']}/records/{new['uuid']}")
    env.admin.delete(f"{D}/{domain['uuid']}/records/{legacy['uuid']}")
    env.settled(domain, skipped=[])
    assert set(env.upstream_records(domain)) == {new["uuid"], legacy["uuid"]}


class FakeUpstream:
    """An upstream of this shape that lists nothing and refuses tags on create."""

    def __init__(self):
        self.created = []

    def ensure_domain(self, name):
        return {"uuid": "z", "name": name}, False

    def list_records(self, zone, tag=None):
        if tag is not None:
            raise dnsupstream.UpstreamError("q refused", 400, {"message": "unknown field q"})
        return []

    def create_record(self, zone, body):
        if "tags" in body:
            raise dnsupstream.UpstreamError("refused", 400,
                                          {"message": "unknown field(s) for Record: tags"})
        self.created.append(body)


def local_record(name, address="10.0.0.1", tags=None):
    return {"uuid": str(uuidlib.uuid4()), "type": "A", "ttl": 3600, "prio": None,
            "disabled": False, "tags": tags, "record": {"kind": "A", "name": name,
                                                          "address": address}}


def test_rule5_create_refused_for_tags_retries_unmarked():
    fake, memo = FakeUpstream(), dnsmirror.FilterMemo()
    records = [local_record("a", tags=["x"]), local_record("b")]
    result = dnsmirror.sync_domain(fake, str(uuidlib.uuid4()), {"name": "z.test"}, records,
                                   memo)
    assert result.created == 2 and not result.skipped
    assert [b["uuid"] for b in fake.created] == [r["uuid"] for r in records]
    assert all("tags" not in b for b in fake.created)
    assert memo.tag_filter == "unsupported" and memo.tags_supported is False


# ---- rule 6: refused filter, server errors -------------------------------------------

def test_rule6_refused_filter_reads_the_zone_and_still_marks_updates_deletes(no_filter):
    env = no_filter
    domain = env.domain(sync=False)
    unmarked = env.upstream_add(domain, a_record("legacy", "10.6.6.1"))
    env.add(domain, a_record("legacy", "10.6.6.9", uuid=unmarked["uuid"]))
    made = env.add(domain, a_record("www", "10.6.6.2", tags=["realm:old", "k"]))
    gone = env.add(domain, txt("gone", "bye"))
    env.enable(domain)
    m = env.settled(domain, created=2)
    assert m["tag_filter"] == "refused" and m["filter_retry_at"], m
    assert any(unmarked["uuid"] in s for s in m["skipped"])    # ownership still checked
    up = env.upstream_records(domain)
    assert up[made["uuid"]]["tags"] == ["k", env.mark]         # still marked
    assert up[unmarked["uuid"]] == unmarked
    zone = env.zone(domain)["uuid"]
    assert any("q=" not in q for _, q in env.upstream.layer.listings(zone))   # full read

    env.admin.put(f"{D}/{domain['uuid']}/records/{made['uuid']}", {"ttl": 999})
    env.admin.delete(f"{D}/{domain['uuid']}/records/{gone['uuid']}")
    wait_for(lambda: env.upstream_records(domain).get(made["uuid"], {}).get("ttl") == 999
             and gone["uuid"] not in env.upstream_records(domain))
    assert env.upstream_records(domain)[unmarked["uuid"]] == unmarked

    # the filter is tried again after the "hour" (FILTER_RETRY here), not on every pass
    since = time.monotonic()
    wait_for(lambda: len([q for _, q in env.upstream.layer.listings(zone, since)
                          if "q=" in q]) >= 2, timeout=3 * FILTER_RETRY + 3)
    tries = [t for t, q in env.upstream.layer.listings(zone, since) if "q=" in q]
    assert all(b - a >= FILTER_RETRY * 0.9 for a, b in zip(tries, tries[1:])), tries
    assert env.mirror(domain)["tag_filter"] == "refused"


def test_rule6_filter_retry_after_the_patched_hour(monkeypatch, no_filter):
    """appliance.dns.mirror directly: the retry time is kept in the memo and the hour is
    the module constant."""
    monkeypatch.setattr(dnsmirror, "FILTER_RETRY_SECONDS", 100.0)
    layer = no_filter.upstream.layer
    upstream = dnsupstream.Upstream(no_filter.upstream.url, "mirror", MIRROR_PASSWORD)
    memo, realm = dnsmirror.FilterMemo(), str(uuidlib.uuid4())
    domain = {"name": f"u{uuidlib.uuid4().hex[:8]}.test"}
    records = [local_record("a")]

    def queries(now):
        start = time.monotonic()
        result = dnsmirror.sync_domain(upstream, realm, domain, records, memo, now=now)
        zone = result.upstream_domain["uuid"]
        return ["q=" in q for _, q in layer.listings(zone, start)], result

    seen, result = queries(1000.0)
    assert seen == [True, False] and result.created == 1       # refused, then full read
    assert memo.tag_filter == "refused" and memo.filter_retry_at == 1100.0
    seen, result = queries(1099.0)
    assert seen == [False] and result.created == 0             # within the hour
    seen, _ = queries(1100.0)
    assert seen == [True, False] and memo.filter_retry_at == 1200.0


def test_rule6_server_error_is_a_failure_not_a_refusal(full):
    domain, _ = full.synced(a_record())
    full.settled(domain, created=1, tag_filter="supported")
    zone = full.zone(domain)["uuid"]
    layer = full.upstream.layer
    layer.fail_listings.add(zone)
    try:
        since = time.monotonic()
        late = full.add(domain, a_record("late", "10.7.7.7"))
        m = full.settled(domain, status="ERROR")
        assert "500" in m["last_error"], m
        assert m["tag_filter"] == "supported" and m["filter_retry_at"] is None
        # retried, and every retry asks with the filter again: no fallback to a full read
        wait_for(lambda: len(layer.listings(zone, since)) >= 2)
        assert all("q=" in q for _, q in layer.listings(zone, since))
        # (the listing answers 500 to the test too: ask for the item)
        assert full.up.get(f"{D}/{zone}/records/{late['uuid']}").status == 404
    finally:
        layer.fail_listings.discard(zone)
    m = full.settled(domain, created=1)
    assert m["last_error"] is None and m["tag_filter"] == "supported"
    assert late["uuid"] in full.upstream_records(domain)


def test_rule6_unit_server_error_keeps_the_filter(full):
    upstream = dnsupstream.Upstream(full.upstream.url, "mirror", MIRROR_PASSWORD)
    memo = dnsmirror.FilterMemo("supported")
    domain = {"name": f"u{uuidlib.uuid4().hex[:8]}.test"}
    first = dnsmirror.sync_domain(upstream, full.realm, domain, [], memo)
    zone = first.upstream_domain["uuid"]
    full.upstream.layer.fail_listings.add(zone)
    try:
        with pytest.raises(dnsupstream.UpstreamError) as caught:
            dnsmirror.sync_domain(upstream, full.realm, domain, [local_record("a")], memo)
        assert caught.value.failure and not caught.value.refusal
        assert memo.tag_filter == "supported" and memo.filter_retry_at is None
    finally:
        full.upstream.layer.fail_listings.discard(zone)
    # nothing listening: a failure too
    dead = dnsupstream.Upstream("http://127.0.0.1:9", "mirror", MIRROR_PASSWORD, timeout=2)
    with pytest.raises(dnsupstream.UpstreamError) as caught:
        dnsmirror.sync_domain(dead, full.realm, domain, [], memo)
    assert caught.value.failure and memo.tag_filter == "supported"


# ---- rule 7: the filter is what the mirror reads with -------------------------------

def test_rule7_listing_uses_the_realm_filter(full):
    domain, _ = full.synced(a_record())
    full.settled(domain, created=1)
    zone = full.zone(domain)["uuid"]
    queries = [q for _, q in full.upstream.layer.listings(zone)]
    assert queries and all(q == f'q=tags:"{full.mark}"' for q in queries), queries
    # the API side of the rule: unknown field parameters and bad typed values are 400
    records = f"{D}/{zone}/records"
    assert full.up.get(records, query={"q": f'tags:"{full.mark}"'}).status == 200
    assert full.up.get(records, query={"colour": "red"}).status == 400
    assert full.up.get(records, query={"ttl": "long"}).status == 400


# ---- rule 8: the wildcard -----------------------------------------------------------

def test_rule8_bare_star_is_mirrored_as_the_zone_wildcard(full):
    domain, (star, sub) = full.synced(a_record("*", "10.8.8.8"), a_record("*.dev", "10.8.8.9"))
    full.settled(domain, created=2)
    up = full.upstream_records(domain)
    assert set(up) == {star["uuid"], sub["uuid"]}
    assert up[star["uuid"]]["record"]["name"] == "*"
    assert up[sub["uuid"]]["record"]["name"] == "*.dev"



def test_a_long_txt_record_is_mirrored_unchanged(full):
    # the reference's 5,000-character TXT record (issue 27), and one of non-ASCII text
    content = "x" * 5000
    accents = "é" * 3000
    domain, (long, wide) = full.synced(txt("long", content), txt("wide", accents))
    full.settled(domain, created=2)
    up = full.upstream_records(domain)
    assert up[long["uuid"]]["record"] == {"kind": "TXT", "name": "long", "content": content}
    assert up[wide["uuid"]]["record"]["content"] == accents


# ---- robustness and progress -------------------------------------------------------------

def test_one_refused_record_does_not_stop_the_others(full):
    layer = full.upstream.layer
    layer.refuse_names.add("refuse-me")
    try:
        domain, (first, bad, last) = full.synced(a_record("first", "10.0.1.1"),
                                                 a_record("refuse-me", "10.0.1.2"),
                                                 a_record("last", "10.0.1.3"))
        m = full.settled(domain, created=2)
        assert m["status"] == "ACTIVE" and len(m["skipped"]) == 1, m
        assert bad["uuid"] in m["skipped"][0] and "refused" in m["skipped"][0]
        assert set(full.upstream_records(domain)) == {first["uuid"], last["uuid"]}
    finally:
        layer.refuse_names.discard("refuse-me")
    # once the upstream takes it, the next pass creates it
    full.admin.put(f"{D}/{domain['uuid']}/records/{bad['uuid']}", {"ttl": 300})
    full.settled(domain, created=1, skipped=[])
    assert bad["uuid"] in full.upstream_records(domain)


def test_progress_in_the_mirror_field_and_no_wake_up_loop(full):
    domain, _ = full.synced(a_record())
    m = full.settled(domain, created=1)
    assert set(m) == {"status", "synced_at", "last_error", "created", "updated", "deleted",
                      "skipped", "tag_filter", "filter_retry_at"}
    assert m["synced_at"].endswith("Z") and m["skipped"] == []
    # the daemon's own write does not make it write again
    revision = full.local.store.collection("dns_domains").get(domain["uuid"])["revision"]
    time.sleep(1.0)
    assert full.local.store.collection("dns_domains").get(
        domain["uuid"])["revision"] == revision
    # a user's write to the domain is never undone by the mirror's
    full.admin.put(f"{D}/{domain['uuid']}", {"description": "mine"})
    full.add(domain, a_record("two", "10.0.2.2"))
    wait_for(lambda: len(full.upstream_records(domain)) == 2)
    assert full.admin.get(f"{D}/{domain['uuid']}").json["description"] == "mine"


def test_in_process_pass_shows_in_progress_then_active(tmp_path, full):
    """daemons.mirror.Mirror in-process: the sequence of `mirror` values of one pass, and
    a second pass with nothing to do writes nothing."""
    local = ApiServer(str(tmp_path / "local"), ADMIN_PASSWORD).start()
    try:
        admin = local.client(local.login("admin", ADMIN_PASSWORD))
        domain = admin.post(D, {"name": f"p{uuidlib.uuid4().hex[:8]}.test",
                                "project_id": ADMIN_PROJECT,
                                "sync_to_ecosystem": True}).json
        admin.post(f"{D}/{domain['uuid']}/records", a_record())
        settings = dict(config.DEFAULTS, state_dir=local.settings["state_dir"],
                        realm_uuid=str(uuidlib.uuid4()), mirror_url=full.upstream.url,
                        mirror_username="mirror", mirror_password=MIRROR_PASSWORD)
        daemon = Mirror(settings, Store(settings["state_dir"]))
        written = []
        real_update = daemon.store.collection("dns_domains").update

        def spy(uuid, changes, expect_revision=None):
            written.append(changes["mirror"]["status"])
            return real_update(uuid, changes, expect_revision=expect_revision)
        daemon.store.collection("dns_domains").update = spy
        daemon.reconcile_pass()
        assert written == ["IN_PROGRESS", "ACTIVE"]
        daemon.reconcile_pass()        # woken by its own write: nothing to do
        daemon.domains[domain["uuid"]].next_at = 0   # a periodic re-sync: in step already
        daemon.reconcile_pass()
        assert written == ["IN_PROGRESS", "ACTIVE"]
        # a conflict is shown once; the re-syncs that meet it again write nothing
        zone = full.up.get(D, query={"name": domain["name"]}).json[0]
        taken = full.up.post(f"{D}/{zone['uuid']}/records", a_record("x", "10.0.0.9")).json
        admin.post(f"{D}/{domain['uuid']}/records", a_record("x", "10.0.0.8",
                                                            uuid=taken["uuid"]))
        daemon.reconcile_pass()
        assert written == ["IN_PROGRESS", "ACTIVE"] * 2
        mirror = admin.get(f"{D}/{domain['uuid']}").json["mirror"]
        assert len(mirror["skipped"]) == 1 and "unmarked" in mirror["skipped"][0]
        daemon.domains[domain["uuid"]].next_at = 0
        daemon.reconcile_pass()
        assert written == ["IN_PROGRESS", "ACTIVE"] * 2
    finally:
        local.stop()


class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_unconfigured_mirror_logs_once_and_does_nothing(tmp_path):
    store = Store(str(tmp_path))
    domains = store.collection("dns_domains")
    domains.insert({"name": "x.test", "project_id": ADMIN_PROJECT,
                    "sync_to_ecosystem": True, "mirror": None})
    for settings in ({}, {"mirror_url": "http://127.0.0.1:9"},
                     {"mirror_url": "http://127.0.0.1:9", "realm_uuid": "not-a-uuid"}):
        daemon = Mirror(dict(config.DEFAULTS, state_dir=str(tmp_path), **settings), store)
        handler = Lines()
        daemon.log.addHandler(handler)
        try:
            for _ in Mirror.kinds * 3:
                daemon.reconcile_pass()
        finally:
            daemon.log.removeHandler(handler)
        assert len(handler.lines) == 1 and "not configured" in handler.lines[0]
        assert daemon.domains == {}
    assert domains.find_one(name="x.test")["mirror"] is None


def test_token_is_refreshed_when_it_expires(tmp_path):
    srv = start_upstream(tmp_path, "full", token_ttl=2)
    try:
        upstream = dnsupstream.Upstream(srv.url, "mirror", MIRROR_PASSWORD)
        since = time.monotonic()

        def grants():
            return [p for t, m, p, _ in srv.layer.requests
                    if t >= since and p == dnsupstream.TOKEN_PATH]
        assert upstream.find_domain("nothing.test") is None
        assert len(grants()) == 1
        upstream.find_domain("nothing.test")
        assert len(grants()) == 1                  # cached
        time.sleep(1.7)                            # within the margin of a 2 s token
        upstream.find_domain("nothing.test")
        assert len(grants()) == 2                  # refreshed before it expired
        upstream._access = "not-a-token"           # a token the upstream rejects: 401
        upstream.find_domain("nothing.test")
        assert len(grants()) == 3
        assert upstream.project_id == ADMIN_PROJECT
    finally:
        srv.stop()


def test_scoped_token_creates_the_domain_in_its_project(full_upstream):
    up = full_upstream.client(full_upstream.login("admin", ADMIN_PASSWORD))
    project = make_project(up)
    password = "scoped-" + uuidlib.uuid4().hex
    SECRET_VALUES.add(password)
    user, username, _ = make_user(up, None, password)
    bind(up, user, "owner", project)
    upstream = dnsupstream.Upstream(full_upstream.url, username, password,
                                  scope=f"project:{project}")
    name = f"s{uuidlib.uuid4().hex[:8]}.test"
    result = dnsmirror.sync_domain(upstream, str(uuidlib.uuid4()), {"name": name},
                                   [local_record("a")], dnsmirror.FilterMemo())
    assert result.domain_created and result.created == 1
    assert upstream.project_id == project
    assert up.get(D, query={"name": name}).json[0]["project_id"] == project


def test_the_mirror_password_is_never_logged(full, no_filter, no_tags):
    for env in (full, no_filter, no_tags):
        text = env.daemon.log()
        assert "started" in text and MIRROR_PASSWORD not in text
        assert env.daemon.alive()


# ---- a zone has one owner, at the upstream and here (docs/security.md) --------------------

def scoped_mirror(up, url):
    """An upstream owner of a project of its own, and the mirror client scoped to it."""
    project = make_project(up)
    password = "scoped-" + uuidlib.uuid4().hex
    SECRET_VALUES.add(password)
    user, username, _ = make_user(up, None, password)
    bind(up, user, "owner", project)
    return project, dnsupstream.Upstream(url, username, password, scope=f"project:{project}")


def test_the_mirror_never_writes_into_an_upstream_domain_of_another_project(full_upstream):
    """The mirror's admin credentials see every upstream project's domains: one named like
    the local domain but of another project is refused, never written into."""
    up = full_upstream.client(full_upstream.login("admin", ADMIN_PASSWORD))
    other = make_project(up)
    name = f"o{uuidlib.uuid4().hex[:8]}.test"
    theirs = up.post(D, {"name": name, "project_id": other}).json
    before = up.get(f"{D}/{theirs['uuid']}/records").json
    upstream = dnsupstream.Upstream(full_upstream.url, "mirror", MIRROR_PASSWORD)
    with pytest.raises(dnsupstream.UpstreamError) as refused:
        dnsmirror.sync_domain(upstream, str(uuidlib.uuid4()), {"name": name},
                              [local_record("a")], dnsmirror.FilterMemo())
    assert refused.value.status == 409 and "does not write into it" in refused.value.message
    assert up.get(f"{D}/{theirs['uuid']}/records").json == before


def test_the_upstream_zone_rule_refuses_a_mirrored_zone_inside_another_owners(
        full_upstream):
    """A mirror scoped to one upstream project cannot plant a zone inside another upstream
    project's zone: the upstream's own rule refuses it and the pass fails with its words."""
    from appliance.tenancy.zones import ANOTHER_OWNER
    up = full_upstream.client(full_upstream.login("admin", ADMIN_PASSWORD))
    victim = make_project(up)
    parent = f"v{uuidlib.uuid4().hex[:8]}.test"
    up.post(D, {"name": parent, "project_id": victim})
    _, upstream = scoped_mirror(up, full_upstream.url)
    with pytest.raises(dnsupstream.UpstreamError) as refused:
        dnsmirror.sync_domain(upstream, str(uuidlib.uuid4()), {"name": f"www.{parent}"},
                              [local_record("a")], dnsmirror.FilterMemo())
    assert refused.value.status == 409 and ANOTHER_OWNER in refused.value.message
    assert parent not in refused.value.message.replace(f"www.{parent}", "")
    assert up.get(D, query={"name": f"www.{parent}"}).json == []


def test_a_local_zone_nested_in_another_owners_is_not_mirrored(tmp_path, full):
    """Data from before zones had one owner: two local projects' nested zones. Which
    owner's records the realm would get is not the mirror's to decide: ERROR, nothing
    sent upstream, for as long as both exist."""
    local = ApiServer(str(tmp_path / "local"), ADMIN_PASSWORD).start()
    try:
        admin = local.client(local.login("admin", ADMIN_PASSWORD))
        a, b = make_project(admin), make_project(admin)
        name = f"n{uuidlib.uuid4().hex[:8]}.test"
        outer = admin.post(D, {"name": name, "project_id": a}).json
        inner = local.store.collection("dns_domains").insert({
            "name": f"www.{name}", "project_id": b, "description": "", "tags": [],
            "mirror": None, "sync_to_ecosystem": True})
        settings = dict(config.DEFAULTS, state_dir=local.settings["state_dir"],
                        realm_uuid=str(uuidlib.uuid4()), mirror_url=full.upstream.url,
                        mirror_username="mirror", mirror_password=MIRROR_PASSWORD)
        daemon = Mirror(settings, Store(settings["state_dir"]))
        daemon.reconcile_pass()
        mirror = admin.get(f"{D}/{inner['uuid']}").json["mirror"]
        assert mirror["status"] == "ERROR" and "another owner" in mirror["last_error"]
        assert full.up.get(D, query={"name": f"www.{name}"}).json == []
        # once the nesting is gone the zone is mirrored like any other
        admin.delete(f"{D}/{outer['uuid']}")
        daemon.reconcile_pass()
        assert admin.get(f"{D}/{inner['uuid']}").json["mirror"]["status"] == "ACTIVE"
        assert len(full.up.get(D, query={"name": f"www.{name}"}).json) == 1
    finally:
        local.stop()
