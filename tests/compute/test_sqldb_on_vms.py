"""Issue 31: DBaaS on its default placement, for real. A 2-node instance (one synchronous
replica) on its own node set: two VMs booted from the node image under TCG, one on each
hypervisor of the run (the appliance's namespace and the second machine over qemu+ssh,
conftest.py's session fixtures), each with the node image's agent running PostgreSQL 17
for the appliance's sqldb daemon, which runs in the namespace beside the API and the
compute daemon. A client writes rows through the instance's endpoint (a name the
appliance's DNS server answers) and counts those acknowledged; the primary's VM is
powered off through its libvirt (a power cut); the replica is promoted and holds every
acknowledged row; the old primary's VM started again rejoins as a replica; then that
replica's VM moves live to the other hypervisor with PostgreSQL and a shell loop running
on, and answers SSH there (issue 31's move of a booted node, on this module's boots).

The appliance on this Debian 12 host carries PostgreSQL 15, so the version seeded is 15;
the node image carries 17: the test makes the version 17 through the API, with the node
image as its image (docs/sqldb.md, "Version"). Root only, slow (two boots of the node
image under TCG); skips with the reason where the namespaces, libvirt or sshd are missing.
"""

import faulthandler
import os
import subprocess
import threading
import time

import libvirt
import pytest
from dnslib import DNSRecord

from tests.bench import Service, daemon_ready
from tests.compute import tcg
from tests.compute.netns import sshd_unavailable
from tests.image import qemu

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

INSTANCES, VERSIONS = "/v1/sqldb/instances", "/v1/types/sqldb/versions"
USER, DATABASE, PASSWORD = "app_user", "app_db", "app-Pass-17"
WAIT = 300
PSQL = "/usr/lib/postgresql/15/bin/psql"     # the host's client; the server is 17


@pytest.fixture(autouse=True)
def no_stack_dumps():
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def env(request):
    # the module's fixtures (image build, boots) run in its first test's set-up, before
    # the function-scoped no_stack_dumps: the suite's 45 s stack dump is off from here
    faulthandler.cancel_dump_traceback_later()
    reason = tcg.missing() or sshd_unavailable()
    if reason:
        pytest.skip(reason)
    if not os.path.exists(PSQL):
        pytest.skip("Debian's postgresql-client-15 is not installed")
    env = request.getfixturevalue("tcg_env")
    env.hv2 = request.getfixturevalue("tcg_hv2")
    # the sqldb daemon (failover, status, endpoint) and the DNS server, in the namespace
    # with the API's settings, for this module only
    prefix = env.ns.command([])
    started = [Service(name, env.settings, daemon_ready, prefix=prefix)
               for name in ("sqldb", "dns")]
    env.services += started
    try:
        yield env
    finally:
        for service in reversed(started):
            env.services.remove(service)
            service.stop()
            service.remove_log()


@pytest.fixture(scope="module")
def version(env):
    """PostgreSQL 17, on nodes booted from the node image (served over HTTP in the
    namespace, as an administrator would give its URL)."""
    image = qemu.build_image("node")
    rec = env.ok(env.admin.post(f"{VERSIONS}/", {
        "name": "17-node", "major": 17, "image": env.images.url(image),
        "description": "the node image's PostgreSQL"}), 201)
    yield rec
    env.admin.delete(f"{VERSIONS}/{rec['uuid']}")


def instance_of(env, uuid):
    return env.ok(env.admin.get(f"{INSTANCES}/{uuid}"))


def wait_instance(env, uuid, what, check, timeout=WAIT):
    return env.wait(what, lambda: (lambda rec: rec if check(rec) else None)(
        instance_of(env, uuid)), timeout, interval=1)


@pytest.fixture(scope="module")
def key(env):
    """An SSH key of the admin project with no target, made before the instance: it goes
    into the seed of every node of the project, the DBaaS set's VMs included (their
    project is the admin's: appliance/sqldb/sets.py), so the test reaches them by SSH."""
    return env.ssh_key("dbaas-vms")


@pytest.fixture(scope="module")
def instance(env, version, key):
    started = time.monotonic()
    rec = env.ok(env.admin.post(f"{INSTANCES}/", {
        "name": "vms", "project_id": tcg.ADMIN_PROJECT, "cpu": 1, "ram": 1024,
        "disk_size": 8, "nodes_number": 2, "sync_replica_number": 1,
        "version": version["uuid"]}), 201)
    try:
        active = wait_instance(env, rec["uuid"], "the instance ACTIVE on its VMs",
                               lambda r: r["status"] == "ACTIVE", tcg.BOOT_TIMEOUT * 2)
        env.sqldb_active_seconds = time.monotonic() - started
        print(f"\n2-node instance on VMs: created -> ACTIVE in "
              f"{env.sqldb_active_seconds:.0f} s")
        yield active
    finally:
        env.admin.delete(f"{INSTANCES}/{rec['uuid']}")
        # its set and nodes go with it (the compute daemon's sqldb step): the shared
        # hypervisors are left without them
        env.wait("the instance's node set deleted", lambda: env.admin.get(
            f"/v1/compute/sets/{rec['uuid']}").status == 404, WAIT)
        env.wait("the instance's nodes gone", lambda: not any(
            tcg.domains_in(ns, node) for ns in (env.ns, env.second.ns)
            for node in getattr(env, "sqldb_nodes", ())), WAIT)


def resolve(env, name):
    with env.ns.inside():
        reply = DNSRecord.parse(DNSRecord.question(name, "A").send(
            "127.0.0.1", env.settings["dns_port"], timeout=2))
    return [str(rr.rdata) for rr in reply.rr if rr.rtype == 1]


def psql(env, host, sql, timeout=30):
    environ = {**os.environ, "PGPASSWORD": PASSWORD, "PGCONNECT_TIMEOUT": "5",
               "PGSSLMODE": "disable"}
    return env.ns.run([PSQL, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", host,
                       "-p", str(env.settings["sqldb_port"]), "-U", USER, "-d", DATABASE,
                       "-c", sql], timeout=timeout, env=environ)


def hypervisor_ns(env, hv_uuid):
    return env.ns if hv_uuid == env.hypervisor["uuid"] else env.second.ns


def test_the_instance_runs_on_one_vm_of_each_hypervisor(env, instance):
    node_set = env.ok(env.admin.get(f"/v1/compute/sets/{instance['uuid']}"))
    nodes = [env.node(u) for u in node_set["nodes"]]
    env.sqldb_nodes = [n["uuid"] for n in nodes]
    assert len(nodes) == 2
    assert {n["hypervisor"] for n in nodes} == {env.hypervisor["uuid"], env.hv2["uuid"]}
    assert sorted(instance["ipsv4"]) == sorted(n["default_network"]["ipv4"] for n in nodes)
    primary = env.node(instance["primary"])
    assert resolve(env, instance["endpoint"]) == [primary["default_network"]["ipv4"]]
    roles = {u: s["role"] for u, s in instance["node_status"].items()}
    assert sorted(roles.values()) == ["primary", "replica"]


def test_rows_acknowledged_before_the_primarys_power_cut_survive_it(env, instance):
    path = f"{INSTANCES}/{instance['uuid']}"
    user = env.ok(env.admin.post(f"{path}/users", {"name": USER, "password": PASSWORD}), 201)
    env.wait("the user ACTIVE", lambda: env.ok(env.admin.get(
        f"{path}/users/{user['uuid']}"))["status"] == "ACTIVE", WAIT)
    db = env.ok(env.admin.post(f"{path}/databases", {"name": DATABASE,
                                                     "owner": user["uuid"]}), 201)
    env.wait("the database ACTIVE", lambda: env.ok(env.admin.get(
        f"{path}/databases/{db['uuid']}"))["status"] == "ACTIVE", WAIT)
    host = resolve(env, instance["endpoint"])[0]

    def made():
        # the first commit waits for the synchronous replica: with two CIs on the machine
        # its TCG VM was not yet streaming, and a 30 s psql ran out (a commit cut short
        # that way is kept on the primary: IF NOT EXISTS)
        try:
            return psql(env, host, "CREATE TABLE IF NOT EXISTS t (id int PRIMARY KEY)",
                        timeout=60).returncode == 0
        except subprocess.TimeoutExpired:
            return False
    env.wait("the table made through the endpoint (its replica streaming)", made,
             tcg.BOOT_TIMEOUT, 5)

    acked, stop = [], threading.Event()

    def writer():
        # one row per transaction, each through the endpoint resolved again: a row counts
        # only when its COMMIT returned
        i = 0
        while not stop.is_set():
            try:
                addresses = resolve(env, instance["endpoint"])
                if addresses and psql(env, addresses[0],
                                      f"INSERT INTO t (id) VALUES ({i})").returncode == 0:
                    acked.append(i)
            except Exception:        # a timeout on the dead primary: not acknowledged
                pass
            i += 1
            time.sleep(0.2)
    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        env.wait("rows acknowledged before the cut", lambda: len(acked) >= 20, WAIT)
        old = instance_of(env, instance["uuid"])["primary"]
        old_node = env.node(old)
        conn = hypervisor_ns(env, old_node["hypervisor"]).connect()
        try:
            conn.lookupByUUIDString(old).destroy()      # the power cut
        finally:
            conn.close()
        cut_at, before_cut = time.monotonic(), len(acked)
        after = wait_instance(env, instance["uuid"], "the replica promoted",
                              lambda r: r["primary"] not in (None, old), WAIT)
        promoted = time.monotonic() - cut_at
        new_ipv4 = env.node(after["primary"])["default_network"]["ipv4"]
        # a wait that holds a boot under TCG (below): a boot's bound, not a step's; at
        # WAIT it ran out once with three CIs on the machine (the VM started again 40 s
        # after the cut, its agent not yet reporting 4.5 min later)
        env.wait("the endpoint on the new primary, taking writes",
                 lambda: resolve(env, after["endpoint"]) == [new_ipv4]
                 and len(acked) > before_cut + 5, tcg.BOOT_TIMEOUT)
        # with one synchronous replica in two nodes, the promoted primary's commits wait
        # for its only standby, the old primary: writes are acknowledged again once the
        # compute daemon has started the cut VM again and it rejoined (docs/sqldb-failover.md,
        # "Limits": no acknowledged commit is lost, at the price of that wait)
        print(f"\nprimary's VM powered off -> replica promoted in {promoted:.0f} s; "
              f"writes through the endpoint acknowledged again {time.monotonic() - cut_at:.0f}"
              " s after the cut")
    finally:
        stop.set()
        thread.join(60)
    done = psql(env, new_ipv4, "SELECT id FROM t")
    assert done.returncode == 0, done.stderr
    stored = {int(x) for x in done.stdout.split()}
    assert set(acked) <= stored, f"acknowledged rows lost: {sorted(set(acked) - stored)}"
    env.sqldb_failover = (old, after["primary"], len(stored))


def test_the_old_primarys_vm_started_again_rejoins_as_a_replica(env, instance):
    old, new, count = env.sqldb_failover
    old_node = env.node(old)
    conn = hypervisor_ns(env, old_node["hypervisor"]).connect()
    try:
        dom = conn.lookupByUUIDString(old)
        # the compute daemon starts a domain that stopped without being asked to (a power
        # cut) by itself, within a pass; when it has not yet, the test powers it on
        by_daemon = dom.isActive()
        who = "the compute daemon" if by_daemon else "the test"
        print(f"\nthe cut VM was started again by {who}")
        if not dom.isActive():
            try:
                dom.create()                  # the power back
            except libvirt.libvirtError:
                if not dom.isActive():        # the compute daemon started it meanwhile
                    raise
    finally:
        conn.close()
    started = time.monotonic()

    def rejoined(rec):
        s = rec["node_status"].get(old) or {}
        return rec["status"] == "ACTIVE" and rec["primary"] == new and \
            s.get("role") == "replica" and s.get("status") == "ACTIVE"
    wait_instance(env, instance["uuid"], "the old primary back as a streaming replica",
                  rejoined, tcg.BOOT_TIMEOUT)
    print(f"\nold primary's VM started -> replica again in {time.monotonic() - started:.0f} s")
    # it holds the rows (a hot standby answers reads)
    ipv4 = old_node["default_network"]["ipv4"]
    env.wait("the rows on the old primary", lambda: (lambda d: d.returncode == 0 and int(
        d.stdout) >= count)(psql(env, ipv4, "SELECT count(*) FROM t")), WAIT)


def test_the_replicas_vm_moves_live_with_postgresql_running_and_answers_ssh(env, instance,
                                                                             key):
    """Issue 31's move of a booted node, on a DBaaS VM (sharing this module's boots): the
    replica's VM moves live to the other hypervisor (the action migrate); a process started
    over SSH runs on (the same boot_id, its pid alive, its counter further on), SSH to the
    node's address works after the move (from the appliance's namespace, the network's
    home: a node on hv2 is reached over the VXLAN), and PostgreSQL ran on through it: the
    same postmaster, still the instance's streaming replica, with a row written after it."""
    old, new, _count = env.sqldb_failover
    replica = env.node(old)
    here, ipv4 = replica["hypervisor"], replica["default_network"]["ipv4"]
    there = env.hv2["uuid"] if here == env.hypervisor["uuid"] else env.hypervisor["uuid"]

    def ssh(command):
        return env.ssh(ipv4, key, command)

    env.wait_ssh(ipv4, key, "SSH to the replica's VM before its move", WAIT)
    started = ssh("nohup sh -c 'i=0; while :; do i=$((i+1)); "
                  "echo $i > /tmp/ticks; sleep 0.2; done' >/dev/null 2>&1 & echo $!; "
                  "cat /proc/sys/kernel/random/boot_id")
    assert started.returncode == 0, started.stderr
    pid, boot_id = started.stdout.split()
    before = int(ssh("cat /tmp/ticks").stdout)
    postmaster = psql(env, ipv4, "SELECT pg_postmaster_start_time()")
    assert postmaster.returncode == 0 and postmaster.stdout.strip(), postmaster.stderr

    moved_at = time.monotonic()
    moved = env.move(old, there, WAIT * 2)
    print(f"\nthe replica's VM (1 GiB, booted) moved live in {time.monotonic() - moved_at:.0f} s")
    assert (moved["hypervisor"], moved["status"]) == (there, "ACTIVE")
    assert moved["default_network"] == replica["default_network"]
    assert tcg.domains_in(hypervisor_ns(env, here), old) == {}
    assert len(tcg.domains_in(hypervisor_ns(env, there), old)) == 1

    env.wait_ssh(ipv4, key, "SSH to the replica's VM on its new side", WAIT)
    after = ssh(f"kill -0 {pid} && cat /tmp/ticks /proc/sys/kernel/random/boot_id")
    assert after.returncode == 0, after.stderr
    ticks, boot_after = after.stdout.split()
    assert boot_after == boot_id and int(ticks) > before
    assert psql(env, ipv4, "SELECT pg_postmaster_start_time()").stdout == postmaster.stdout
    # still the replica, streaming: a row written through the endpoint reaches it
    host = resolve(env, instance["endpoint"])[0]
    done = psql(env, host, "INSERT INTO t (id) VALUES (-1)")
    assert done.returncode == 0, done.stderr
    env.wait("the row written after the move on the moved replica", lambda: psql(
        env, ipv4, "SELECT count(*) FROM t WHERE id = -1").stdout.strip() == "1", WAIT)
    rec = instance_of(env, instance["uuid"])
    assert rec["primary"] == new and rec["node_status"][old]["role"] == "replica"
