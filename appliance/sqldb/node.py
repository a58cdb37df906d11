"""The node side of DBaaS: the agent's driver of kind `sqldb` (docs/sqldb-dataplane.md).

One item per instance this node is a member of. apply() brings the node to the item:
a primary is made with initdb and started, a replica is copied from the primary with
pg_basebackup and started as a hot standby streaming from it; a role change acts as the
contract's failover section says (promote; rewind the old primary onto the new one; follow
a moved primary). On the primary it then applies the reserved roles, the users and the
databases (replicas get them through replication). Each step looks at what is on disk and
what runs first, so the same item again changes nothing and restarts nothing.

tick() is the heartbeat: a fresh report per item every HEARTBEAT_SECONDS, at once when the
role, `running`, `streaming_from` or the status changes; it starts a stopped PostgreSQL again and retries a
failed apply with a back-off.

PostgreSQL runs as its own daemon so it outlives the agent: on a node with systemd under a
unit written here (`appliance-sqldb-<instance>.service`, enabled, so a reboot brings it
back), otherwise (host tests: a root prefix) started by pg_ctl, which detaches it.

Runs on a node from the agent: stdlib and this package only.
"""

import datetime
import hashlib
import ipaddress
import logging
import os
import shutil
import time

from appliance import kinds
from appliance.agent.host import PathRefused

from . import pg
from .pg import Failed

UNIT = "appliance-sqldb-{instance}.service"
HEARTBEAT_SECONDS = 2.0
RETRY_FIRST, RETRY_MAX = 2.0, 30.0
BASEBACKUP_SECONDS = 900            # setting agent_sqldb_basebackup_seconds
STREAM_WAIT_SECONDS = 15.0          # apply's wait for a new replica to stream
# how long a new replica waits, retrying at every tick, for its primary to take its copy
# (the primary's node makes it at the same time: initdb, start, the roles); after that the
# wait is an ERROR with the back-off
PRIMARY_WAIT_SECONDS = 120.0
# what pg_basebackup says while the primary is still being made: nothing listens yet, it
# starts, or its replication role has no password yet
NOT_READY = ("Connection refused", "the database system is starting up",
             "password authentication failed", "could not connect to server")
UUID_RE = kinds.STORED_UUID_RE
RESERVED_DATABASES = ("postgres", "template0", "template1")

log = logging.getLogger("appliance.sqldb.node")


def _now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# ---- the item -----------------------------------------------------------------------------------

class Spec:
    """The item's value, checked: Failed names the first field that is wrong."""

    def __init__(self, value):
        if not isinstance(value, dict):
            raise Failed("the item has no value")
        self.instance = value.get("instance")
        if not isinstance(self.instance, str) or not UUID_RE.match(self.instance):
            raise Failed(f"instance {self.instance!r} is not a uuid")
        self.epoch = _int(value, "epoch", 0, 2 ** 62)
        self.major = _int(value, "major", 10, 99)
        self.port = _int(value, "port", 1, 65535)
        self.me = _member(value.get("self"), "self")
        self.role = value.get("role")
        if self.role not in ("primary", "replica"):
            raise Failed(f"role {self.role!r} is neither primary nor replica")
        self.primary = _member(value.get("primary"), "primary")
        members = value.get("members")
        if not isinstance(members, list) or not members:
            raise Failed("members is not a list of members")
        self.members = [_member(m, "members[]") for m in members]
        self.sync = _int(value, "sync_replica_number", 0, 64)
        self.hba = pg.client_networks(value.get("hba") or [])
        self.replicator = _account(value.get("replication"), "replication")
        self.admin = _account(value.get("admin"), "admin")
        users, dbs = value.get("users") or {}, value.get("databases") or {}
        if not isinstance(users, dict) or not isinstance(dbs, dict):
            raise Failed("users and databases are maps")
        self.users, self.databases = users, dbs
        resources = value.get("resources") or {}
        self.cpu = resources.get("cpu") if isinstance(resources, dict) else None
        self.ram_mb = resources.get("ram_mb") if isinstance(resources, dict) else None
        if self.role == "replica" and self.primary["host"] == self.me["host"]:
            raise Failed("a replica whose primary is itself")

    @property
    def others(self):
        return [m["name"] for m in self.members if m["name"] != self.me["name"]]

    @property
    def reserved(self):
        return {pg.OS_USER, self.replicator[0], self.admin[0]}


def _int(value, key, low, high):
    v = value.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
        raise Failed(f"{key} {v!r} is not an integer from {low} to {high}")
    return v


def _member(m, what):
    if not isinstance(m, dict):
        raise Failed(f"{what} is not a member")
    try:
        host = str(ipaddress.ip_address(m.get("host")))
    except ValueError:
        raise Failed(f"{what}: host {m.get('host')!r} is not an address") from None
    name = m.get("name")
    if not isinstance(name, str) or not pg.NAME_RE.match(name):
        raise Failed(f"{what}: name {name!r} is not [A-Za-z0-9_]{{1,63}}")
    return {"node": m.get("node"), "host": host, "name": name}


def _account(a, what):
    if not isinstance(a, dict) or not isinstance(a.get("user"), str) \
            or not pg.NAME_RE.match(a["user"]) or not isinstance(a.get("password"), str) \
            or not a["password"]:
        raise Failed(f"{what} needs a user and a password")
    return a["user"], a["password"]


class Waiting(Failed):
    """The item cannot go on yet, and nothing needs fixing: a new replica whose primary
    is still being made. Reported IN_PROGRESS and tried again at every tick (not after the
    back-off, whose waits would hold the instance seconds after its primary is up)."""


class _State:
    """What the driver remembers of one item between calls (lost with the agent: the
    first tick after a restart applies the item once more, which changes nothing when
    the node is as it should be)."""

    def __init__(self):
        self.hash = None
        self.error = None           # the last apply's failure, retried by the tick
        self.waiting_since = None   # monotonic time of the first Waiting of this stretch
        self.users = {}
        self.databases = {}
        self.key = None             # (status, role, running, streaming_from) reported
        self.reported_at = 0.0


class Driver:
    def __init__(self, host):
        self.host = host
        settings = getattr(host, "settings", None) or {}
        self.basebackup_seconds = int(settings.get("agent_sqldb_basebackup_seconds")
                                      or BASEBACKUP_SECONDS)
        # item uuid -> when its failed apply is tried again
        self.retry = host.backoff(RETRY_FIRST, RETRY_MAX)
        # a node booted with systemd gets a unit per instance; a host test (a root
        # prefix, no systemd) gets PostgreSQL started by pg_ctl
        self.systemd = host.root == "/" and os.path.isdir("/run/systemd/system")
        self.states = {}

    # the back-off's first and longest waits (a test shortens them)
    @property
    def retry_first(self):
        return self.retry.first

    @retry_first.setter
    def retry_first(self, seconds):
        self.retry.first = seconds

    @property
    def retry_max(self):
        return self.retry.cap

    @retry_max.setter
    def retry_max(self, seconds):
        self.retry.cap = seconds

    # ---- the driver contract -----------------------------------------------------------------

    def apply(self, item, applied):
        st = self.states.setdefault(item["uuid"], _State())
        value = item.get("value") or {}
        log.info("instance %s: applying its item (%s, epoch %s)", value.get("instance"),
                 value.get("role"), value.get("epoch"))
        self._converge(item, st)
        result = self._report(item, st)
        st.key, st.reported_at = _key(result), time.monotonic()
        return result

    def remove(self, applied):
        self.states.pop(applied.get("uuid"), None)
        self.retry.forget(applied.get("uuid"))
        value = applied.get("value") or {}
        instance = value.get("instance")
        if not isinstance(instance, str) or not UUID_RE.match(instance):
            return                      # never made anything under that name
        try:
            c = pg.Cluster(self.host, instance, value.get("major") or 15,
                           value.get("port") or 5432, "")
        except PathRefused:
            return                      # refused when applied too: nothing was made
        if self.systemd:
            unit = UNIT.format(instance=instance)
            self.host.systemctl("disable", "--now", unit)
            try:
                self.host.remove_unit(unit)
            except PathRefused:
                pass                    # refused when applied too: never written
        if os.path.isdir(c.data):
            pg.stop(c, "fast")
        shutil.rmtree(c.base, ignore_errors=True)
        if c.socket_dir != c.run_dir:
            shutil.rmtree(c.socket_dir, ignore_errors=True)
        log.info("instance %s removed from this node", instance)

    def tick(self, items):
        live = {i["uuid"] for i in items}
        for uuid in [u for u in self.states if u not in live]:
            del self.states[uuid]
            self.retry.forget(uuid)
        results = []
        for item in items:
            st = self.states.get(item["uuid"])
            if st is None or st.hash != item.get("hash"):
                # unseen (the agent restarted): apply once, which changes nothing when
                # the node is as it should be
                st = self.states.setdefault(item["uuid"], _State())
                self._converge(item, st)
            elif self.retry.ready(item["uuid"]) and (st.error is not None or not self._running(item)
                                         or self._stuck(item)):
                self._converge(item, st)
            self._rotate_log(item)
            result = self._report(item, st)
            key = _key(result)
            if key != st.key or time.monotonic() - st.reported_at >= HEARTBEAT_SECONDS - 0.5:
                st.key, st.reported_at = key, time.monotonic()
                results.append({"uuid": item["uuid"], **result})
        return results

    # ---- bringing the node to the item ------------------------------------------------------

    def _converge(self, item, st):
        st.hash = item.get("hash")
        try:
            spec = Spec(item.get("value"))
            c = self._cluster(spec)
            self._bring(spec, c, st)
        except Waiting as e:
            self._waiting(item, st, str(e))
        except (Failed, PathRefused) as e:
            self._failed(item, st, str(e))
        except OSError as e:
            self._failed(item, st, f"{e.strerror or e}: {e.filename or ''}".rstrip(": "))
        else:
            st.error, st.waiting_since = None, None
            self.retry.succeeded(item["uuid"])

    def _failed(self, item, st, reason):
        st.error, st.waiting_since = reason, None
        self.retry.failed(item["uuid"])
        log.warning("sqldb: %s", reason)

    def _waiting(self, item, st, reason):
        now = time.monotonic()
        if st.waiting_since is None:
            st.waiting_since = now
        elif now - st.waiting_since > PRIMARY_WAIT_SECONDS:
            self._failed(item, st, f"{reason} (for more than {PRIMARY_WAIT_SECONDS:g} s)")
            return
        if st.error != reason:              # once, not at every tick of the wait
            log.info("sqldb: %s", reason)
        st.error = reason
        self.retry.forget(item["uuid"])     # the next tick tries again

    def _cluster(self, spec):
        return pg.Cluster(self.host, spec.instance, spec.major, spec.port, spec.me["host"])

    def _bring(self, spec, c, st):
        pg.check_data_runnable(c)
        pg.check_installed(c)
        pg.prepare_dirs(c)
        pg.write_file(c, c.passfile, pg.pgpass_line(*spec.replicator)
                      + pg.pgpass_line(*spec.admin))
        if c.initialized:
            with open(os.path.join(c.data, "PG_VERSION")) as f:
                have = f.read().strip()
            if have != str(spec.major):
                raise Failed(f"the data directory is PostgreSQL {have}; the item asks for "
                             f"{spec.major} (no upgrade in place)")
        if not c.initialized:
            if spec.role == "primary":
                pg.initdb(c)
                log.info("instance %s: initdb done", spec.instance)
            else:
                self._first_copy(spec, c)
                log.info("instance %s: base backup from %s done", spec.instance,
                         spec.primary["host"])
            self._configure(spec, c)
            self._start(spec, c)
        elif spec.role == "replica" and not os.path.exists(c.standby_signal):
            self._rejoin(spec, c)
        else:
            changed = self._configure(spec, c)
            if pg.postmaster_pid(c) is None:
                self._start(spec, c)
            elif changed:
                self._reload(spec, c)
            if spec.role == "primary" and os.path.exists(c.standby_signal):
                pg.promote(c)
                # the control file says the new timeline only after a checkpoint: what
                # pg_rewind of the old primary reads
                pg.psql(c, "CHECKPOINT;\n")
                log.info("instance %s: promoted (epoch %s)", spec.instance, spec.epoch)
        if spec.role == "primary":
            self._primary(spec, c, st)
        else:
            st.users, st.databases = {}, {}
            if not self._await_streaming(spec, c):
                why = pg.stuck(c)
                if why == "diverged":
                    # ahead of the new primary's timeline (WAL it never had): rewound
                    # as an old primary is
                    self._rejoin(spec, c)
                    self._await_streaming(spec, c)
                elif why == "behind":
                    self._copy_anew(spec, c)
                    self._await_streaming(spec, c)

    def _configure(self, spec, c):
        """Both config files (and standby.signal for a replica); True when one changed."""
        if spec.role == "primary":
            sync, conninfo = pg.sync_standby_names(spec.others, spec.sync), ""
        else:
            sync, conninfo = "", self._source(spec, c, replication=True)
        conf = pg.render_conf(c, ram_mb=spec.ram_mb, cpu=spec.cpu, sync_names=sync,
                              primary_conninfo=conninfo)
        hba = pg.render_hba([m["host"] for m in spec.members], spec.hba,
                            spec.replicator[0], spec.admin[0])
        changed = pg.write_file(c, os.path.join(c.data, "postgresql.conf"), conf)
        changed = pg.write_file(c, os.path.join(c.data, "pg_hba.conf"), hba) or changed
        if spec.role == "replica" and not os.path.exists(c.standby_signal):
            pg.write_file(c, c.standby_signal, "")
        return changed

    def _source(self, spec, c, replication):
        """A conninfo of the item's primary: the replication role (streaming, base backup)
        or the admin role (pg_rewind), the password from the passfile."""
        user = spec.replicator[0] if replication else spec.admin[0]
        return pg.conninfo(host=spec.primary["host"], port=spec.port, user=user,
                           dbname=None if replication else "postgres",
                           passfile=c.passfile, application_name=spec.me["name"],
                           connect_timeout=10, sslmode="prefer")

    def _rejoin(self, spec, c):
        """This node's data went further than the item's primary (the old primary back
        after a failover, or a replica ahead of the one promoted): stop, pg_rewind onto
        the new primary (a new base backup when that fails), start as its replica. The
        new primary must have been promoted: rewinding onto a server still in recovery
        could leave this one ahead of it."""
        self._stop(spec, c)
        source = self._source(spec, c, replication=False)
        try:
            in_recovery = pg.source_query(c, source, "SELECT to_json(pg_is_in_recovery());")
        except Failed as e:
            raise Failed(f"the primary {spec.primary['host']}:{spec.port} cannot be "
                         f"reached for pg_rewind: {e}") from None
        if in_recovery:
            raise Waiting(f"the primary {spec.primary['host']} is not promoted yet; "
                         "pg_rewind waits for it")
        # pg_rewind reads the source's timeline from its control file, which a promotion
        # updates only at its next checkpoint: before it, "no rewind required"
        pg.source_query(c, source, "CHECKPOINT; SELECT to_json(true);")
        try:
            pg.rewind(c, source, self.basebackup_seconds)
            log.info("instance %s: rejoined by pg_rewind onto %s", spec.instance,
                     spec.primary["host"])
        except Failed as e:
            log.warning("instance %s: %s; a new base backup instead", spec.instance, e)
            self._copy_anew(spec, c)
            return
        self._configure(spec, c)
        self._start(spec, c)

    def _first_copy(self, spec, c):
        """A new replica's base backup; Waiting while its primary cannot give it yet."""
        try:
            pg.basebackup(c, self._source(spec, c, replication=True),
                          self.basebackup_seconds)
        except Failed as e:
            if any(words in str(e) for words in NOT_READY):
                raise Waiting(f"waiting for the primary {spec.primary['host']}:{spec.port} "
                              f"({e})") from None
            raise

    def _copy_anew(self, spec, c):
        """A new base backup in place of this member's data (kept aside until the copy is
        whole), then started as the primary's replica."""
        self._stop(spec, c)
        aside = c.data + ".old"
        shutil.rmtree(aside, ignore_errors=True)
        os.rename(c.data, aside)
        pg.basebackup(c, self._source(spec, c, replication=True), self.basebackup_seconds)
        shutil.rmtree(aside, ignore_errors=True)
        log.info("instance %s: copied anew from %s", spec.instance, spec.primary["host"])
        self._configure(spec, c)
        self._start(spec, c)

    def _await_streaming(self, spec, c):
        """A bounded wait for a replica to stream from its primary, so that apply's answer
        says how it went; the tick reports any change after."""
        deadline = time.monotonic() + STREAM_WAIT_SECONDS
        while time.monotonic() < deadline:
            try:
                seen = pg.observe(c)
            except Failed:
                seen = {}
            if seen.get("streaming_from") == spec.primary["host"]:
                log.info("instance %s: streaming from %s", spec.instance,
                         spec.primary["host"])
                return True
            if pg.stuck(c):
                return False
            time.sleep(0.2)
        return False

    # ---- the primary's roles and databases ------------------------------------------------------

    def _primary(self, spec, c, st):
        have = pg.roles(c)
        marker = os.path.join(c.base, "roles.applied")
        digest = hashlib.sha256(repr((spec.replicator, spec.admin)).encode()).hexdigest()
        try:
            with open(marker) as f:
                done = f.read() == digest
        except FileNotFoundError:
            done = False
        if not done or spec.replicator[0] not in have or spec.admin[0] not in have:
            pg.set_system_role(c, *spec.replicator, "NOSUPERUSER REPLICATION")
            pg.set_system_role(c, *spec.admin, "SUPERUSER")
            pg.write_file(c, marker, digest)
        users = self._users(spec, c, have)
        databases = self._databases(spec, c, users)
        # users dropped after the databases: a database that goes takes what it held
        for name in sorted(set(have) - set(spec.users) - spec.reserved):
            try:
                pg.drop_user(c, name, pg.connectable_databases(c))
                log.info("instance %s: user %r dropped", spec.instance, name)
            except Failed as e:
                users[name] = f"not dropped: {e}"
        st.users, st.databases = users, databases

    def _users(self, spec, c, have):
        out = {}
        for name, verifier in sorted(spec.users.items()):
            if name in spec.reserved or name.startswith("pg_"):
                out[name] = "a reserved role name"
                continue
            if not isinstance(verifier, str) or not verifier.startswith("SCRAM-SHA-256$"):
                out[name] = "the password is not a SCRAM-SHA-256 verifier"
                continue
            try:
                if name not in have:
                    pg.create_user(c, name, verifier)
                elif have[name] != verifier:
                    pg.alter_user(c, name, verifier)
                out[name] = "ok"
            except Failed as e:
                out[name] = str(e)
        return out

    def _databases(self, spec, c, users):
        have = pg.databases(c)
        out = {}
        for name, owner in sorted(spec.databases.items()):
            if name in RESERVED_DATABASES:
                out[name] = "a reserved database name"
                continue
            if users.get(owner) != "ok":
                out[name] = f"its owner {owner!r} is not a working user of this instance"
                continue
            try:
                if name not in have:
                    pg.create_database(c, name, owner)
                elif have[name] != owner:
                    pg.set_owner(c, name, owner)
                out[name] = "ok"
            except Failed as e:
                out[name] = str(e)
        for name in sorted(set(have) - set(spec.databases)):
            try:
                pg.drop_database(c, name)
                log.info("instance %s: database %r dropped", spec.instance, name)
            except Failed as e:
                out[name] = f"not dropped: {e}"
        return out

    # ---- the server's process -----------------------------------------------------------------

    def _running(self, item):
        try:
            spec = Spec(item.get("value"))
            return pg.postmaster_pid(self._cluster(spec)) is not None
        except (Failed, PathRefused):
            return False

    def _rotate_log(self, item):
        try:
            pg.rotate_log(self._cluster(Spec(item.get("value"))))
        except (Failed, PathRefused, OSError):
            pass

    def _stuck(self, item):
        try:
            spec = Spec(item.get("value"))
            return spec.role == "replica" and pg.stuck(self._cluster(spec)) is not None
        except (Failed, PathRefused):
            return False

    def _unit(self, spec):
        return UNIT.format(instance=spec.instance)

    def _start(self, spec, c):
        # children of a killed postmaster still attached to its shared memory make a new
        # one refuse to start: they end on their own once they notice
        pg.wait_gone(c)
        if not self.systemd:
            pg.start(c)
            log.info("instance %s: PostgreSQL started", spec.instance)
            return
        self._write_unit(spec, c)
        offset = pg.log_size(c)
        code, out = self.host.systemctl("enable", "--now", self._unit(spec))
        if code != 0:
            raise Failed(f"{self._unit(spec)} did not start: "
                         f"{pg.log_complaint(c, offset) or out[-400:]}")
        log.info("instance %s: PostgreSQL started (%s)", spec.instance, self._unit(spec))

    def _stop(self, spec, c):
        if self.systemd:
            self.host.systemctl("stop", self._unit(spec))
        pg.stop(c, "fast")

    def _reload(self, spec, c):
        """Reload; restart when a changed setting takes effect only then."""
        before = pg.query(c, "SELECT to_json(pg_conf_load_time());")
        pg.reload(c)
        deadline = time.monotonic() + 10
        while pg.query(c, "SELECT to_json(pg_conf_load_time());") == before:
            if time.monotonic() > deadline:
                raise Failed("PostgreSQL did not reload its configuration within 10 s")
            time.sleep(0.05)
        if pg.observe(c).get("pending_restart"):
            log.info("instance %s: restarted for a changed setting", spec.instance)
            self._stop(spec, c)
            self._start(spec, c)

    def _write_unit(self, spec, c):
        self.host.ensure_unit(self._unit(spec), unit_text(spec, c))

    # ---- the report ---------------------------------------------------------------------------

    def _report(self, item, st):
        value = (item.get("value") or {})
        out = {"epoch": value.get("epoch"), "role": "stopped", "running": False,
               "timeline": None, "lsn": None, "lsn_int": None, "streaming_from": None,
               "sync_standbys": [], "users": {}, "databases": {}}
        try:
            spec = Spec(value)
            c = self._cluster(spec)
        except (Failed, PathRefused) as e:
            out["checked_at"] = _now_iso()
            return {"status": "ERROR", "reason": st.error or str(e), "value": out}
        reason = note = None
        if pg.postmaster_pid(c) is None:
            said = pg.log_complaint(c, limit=300) if c.initialized else ""
            reason = "PostgreSQL is not running" + (f": {said}" if said else "")
        else:
            out["running"] = True
            try:
                seen = pg.observe(c)
            except Failed as e:
                out["role"] = "replica" if os.path.exists(c.standby_signal) else "primary"
                reason = f"PostgreSQL does not answer: {e}"
            else:
                out.update(role="replica" if seen["recovery"] else "primary",
                           timeline=seen["timeline"], lsn=seen["lsn"],
                           lsn_int=seen["lsn_int"], streaming_from=seen["streaming_from"],
                           sync_standbys=seen["sync_standbys"] if not seen["recovery"]
                           else [])
                reason = _mismatch(spec, seen)
                note = _not_streaming(spec, seen)
        if out["role"] == "primary" and spec.role == "primary":
            out["users"], out["databases"] = dict(st.users), dict(st.databases)
        out["checked_at"] = _now_iso()
        if st.error is not None and st.waiting_since is not None:
            return {"status": "IN_PROGRESS", "reason": st.error, "value": out}
        reason = st.error or reason
        return {"status": "ERROR" if reason else "ACTIVE", "reason": reason or note,
                "value": out}


def _mismatch(spec, seen):
    """Why the running server is not what the item wants, or None."""
    if spec.role == "primary":
        return "still in recovery (a replica)" if seen["recovery"] else None
    return "runs as a primary" if not seen["recovery"] else None


def _not_streaming(spec, seen):
    """A replica in its role that streams nothing (its primary down or restarting, a
    timeline it cannot follow): still ACTIVE, as the contract says (it runs in the wanted
    role); the reason says it and `streaming_from` is null, which plan's status reads."""
    if spec.role == "replica" and seen["recovery"] and \
            seen["streaming_from"] != spec.primary["host"]:
        return (f"not streaming from {spec.primary['host']} (WAL receiver: "
                f"{seen.get('receiver') or 'not running'})")
    return None


def _key(result):
    v = result.get("value") or {}
    return (result.get("status"), v.get("role"), v.get("running"), v.get("streaming_from"))


def unit_text(spec, c):
    start = " ".join(pg.pg_ctl_start_argv(c, 300))
    return (
        "[Unit]\n"
        f"Description=PostgreSQL of DBaaS instance {spec.instance} (the appliance agent "
        "writes its config)\n"
        "After=network-online.target\nWants=network-online.target\n\n"
        "[Service]\nType=forking\n"
        f"User={pg.OS_USER}\nGroup={pg.OS_USER}\n"
        f"PIDFile={c.pid_file}\n"
        f"ExecStart={start}\n"
        f"ExecStop={c.tool('pg_ctl')} stop -D {c.data} -m fast -w -t 60 -s\n"
        f"ExecReload={c.tool('pg_ctl')} reload -D {c.data} -s\n"
        "TimeoutStartSec=320\nTimeoutStopSec=90\n"
        # the postmaster ends its own children; systemd kills what is left only after it
        "KillMode=mixed\nKillSignal=SIGINT\n"
        "Restart=on-failure\nRestartSec=2\n\n"
        "[Install]\nWantedBy=multi-user.target\n")
