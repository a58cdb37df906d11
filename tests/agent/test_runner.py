"""Real agent processes (HW "nodes" with their own root prefixes) against a real API,
with the test capability "testfile": delivery, changes, removal, refused paths, kill and
restart, the API stopped and restarted, and `appliance agent enroll|status`."""

import json
import os
import time

import pytest

from appliance.cli.client import UrllibTransport
from state import Store
from tests import waiting
from tests.agent import testcap
from tests.agent.agents import AgentProcess
from tests.agent.conftest import add_file, enroll, hw_node
from tests.apiserver import ApiServer
from tests.cli.conftest import Cli
from tests.conftest import ADMIN_PASSWORD

# how long a change may take to reach a file: the issue wants well under a second on the
# node; generous here for a machine busy with VM boots and image builds
PROMPT = 5.0


def eventually(check, seconds=PROMPT, what=""):
    return waiting.eventually(check, seconds, what)


@pytest.fixture
def api(tmp_path):
    testcap.install()
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD, api_threads=12).start()
    yield srv
    srv.stop()
    testcap.uninstall()


def start_agent(api, admin, base, node=None):
    node = node or hw_node(admin)
    cred = enroll(api, admin, node["uuid"])
    return node, AgentProcess(base, cred, f"http://127.0.0.1:{api.port}").start()


def test_agents_deliver_change_and_remove(api, tmp_path):
    admin = api.client(api.login("admin", ADMIN_PASSWORD))
    (na, a), (nb, b) = (start_agent(api, admin, tmp_path / n) for n in ("a", "b"))
    try:
        both = add_file(api.store, {"kind": "nodes", "nodes": [na["uuid"], nb["uuid"]]},
                        "/etc/app/both.conf", "v1")
        only_a = add_file(api.store, {"kind": "node", "node": na["uuid"]}, "/srv/a", "a")
        eventually(lambda: a.file("/etc/app/both.conf") == "v1" and a.file("/srv/a") == "a"
                   and b.file("/etc/app/both.conf") == "v1", what="first delivery")
        assert b.file("/srv/a") is None
        api.store.collection(testcap.MASTER_KIND).update(both["uuid"], {"content": "v2"})
        eventually(lambda: a.file("/etc/app/both.conf") == b.file("/etc/app/both.conf") == "v2",
                   what="a change")
        api.store.collection(testcap.MASTER_KIND).delete(only_a["uuid"])
        eventually(lambda: a.file("/srv/a") is None, what="a removal")
        # outside the allowed roots, and through a symlink out of them: ERROR saying why
        os.symlink("/tmp", a.root + "/etc/escape")
        for path in ("/tmp/outside", "/etc/escape/x"):
            add_file(api.store, {"kind": "node", "node": na["uuid"]}, path, "no")
        def errors():
            rows = admin.get("/v1/ua/resources", query={"node": na["uuid"],
                                                        "status": "ERROR"}).json
            return rows if len(rows) == 2 else None
        reasons = " | ".join(sorted(r["reason"] for r in eventually(errors, what="2 ERRORs")))
        assert "/tmp/outside is outside the allowed roots" in reasons, reasons
        assert "/etc/escape/x leads out of /etc through a symlink" in reasons, reasons
        assert not os.path.exists(a.root + "/tmp/outside")
        # a link not ready: the agent keeps what it has
        api.store.collection(testcap.MASTER_KIND).update(both["uuid"], {
            "unavailable": "password p has no value yet"})
        time.sleep(0.5)
        assert a.file("/etc/app/both.conf") == "v2"
    finally:
        a.stop()
        b.stop()


def test_killed_agent_converges_after_restart(api, tmp_path):
    admin = api.client(api.login("admin", ADMIN_PASSWORD))
    node, agent = start_agent(api, admin, tmp_path / "n")
    target = {"kind": "node", "node": node["uuid"]}
    add_file(api.store, target, "/etc/kept", "same")
    changed = add_file(api.store, target, "/etc/changed", "old")
    gone = add_file(api.store, target, "/etc/gone", "bye")
    eventually(lambda: agent.file("/etc/gone") == "bye" and agent.file("/etc/kept") == "same"
               and agent.file("/etc/changed") == "old", what="first delivery")
    inode = os.stat(agent.root + "/etc/kept").st_ino
    agent.kill()
    files = api.store.collection(testcap.MASTER_KIND)
    files.update(changed["uuid"], {"content": "new"})
    files.delete(gone["uuid"])
    add_file(api.store, target, "/etc/added", "hello")
    agent.start()
    try:
        eventually(lambda: agent.file("/etc/changed") == "new" and agent.file("/etc/gone") is None
                   and agent.file("/etc/added") == "hello", what="convergence after restart")
        # nothing unchanged was applied again (the file would be a new inode)
        assert os.stat(agent.root + "/etc/kept").st_ino == inode
        # its full report after the restart: exactly what the node has
        eventually(lambda: sorted(r["res_uuid"] for r in admin.get(
            "/v1/ua/resources", query={"node": node["uuid"]}).json) == sorted(
            r["uuid"] for r in files.records() if r["target"] == target), what="full report")
    finally:
        agent.stop()


def test_agent_catches_up_after_the_api_restarts(tmp_path):
    testcap.install()
    state = str(tmp_path / "state")
    srv = ApiServer(state, ADMIN_PASSWORD, api_threads=8).start()
    port = srv.port
    admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
    node, agent = start_agent(srv, admin, tmp_path / "n")
    target = {"kind": "node", "node": node["uuid"]}
    try:
        record = add_file(srv.store, target, "/etc/x", "before")
        eventually(lambda: agent.file("/etc/x") == "before", what="first delivery")
        srv.stop()
        # the API is down: written to the store directly, the agent keeps its file
        store = Store(state)
        store.collection(testcap.MASTER_KIND).update(record["uuid"], {"content": "after"})
        store.close()
        time.sleep(1.5)
        assert agent.file("/etc/x") == "before"
        srv = ApiServer(state, ADMIN_PASSWORD, api_threads=8, api_port=port).start()
        # back-off: at most 30 s between attempts
        eventually(lambda: agent.file("/etc/x") == "after", seconds=45, what="catch-up")
        assert "again in" in agent.logs()
    finally:
        agent.stop()
        srv.stop()
        testcap.uninstall()


def test_enroll_and_status_commands(api, tmp_path):
    admin = api.client(api.login("admin", ADMIN_PASSWORD))
    node = hw_node(admin)
    token = admin.post(f"/v1/compute/nodes/{node['uuid']}/actions/enroll/invoke").json["token"]
    cli = Cli(tmp_path / "config", None)
    cli.transport = UrllibTransport({})         # the real HTTP client, no proxies
    cred_file = tmp_path / "n" / "agent.json"
    endpoint = f"http://127.0.0.1:{api.port}"
    result = cli("agent", "enroll", "--endpoint", endpoint, "--token", token, "--root",
                 str(tmp_path / "n" / "root"), "--state-dir", str(tmp_path / "n" / "state"),
                 "--credential-file", str(cred_file))
    assert result.code == 0, result.stderr
    assert oct(os.stat(cred_file).st_mode & 0o777) == "0o600"
    cred = json.loads(cred_file.read_text())
    assert cred["node"] == node["uuid"] and cred["root"] == str(tmp_path / "n" / "root")
    again = cli("agent", "enroll", "--endpoint", endpoint, "--token", token,
                "--credential-file", str(tmp_path / "other.json"))
    assert again.code == 1 and "already used" in again.stderr
    assert not (tmp_path / "other.json").exists()
    agent = AgentProcess(tmp_path / "n", {k: cred[k] for k in ("agent", "node", "secret")},
                         endpoint).start()
    try:
        add_file(api.store, {"kind": "node", "node": node["uuid"]}, "/etc/s", "s")
        add_file(api.store, {"kind": "node", "node": node["uuid"]}, "/etc/s.fail", "s")
        eventually(lambda: len((json.loads(cli(
            "agent", "status", "--json", "--credential-file", str(cred_file)).stdout)
            ).get("items", [])) == 2, what="status shows both items")
        shown = json.loads(cli("agent", "status", "--json", "--credential-file",
                               str(cred_file)).stdout)
        assert shown["node"] == node["uuid"] and shown["payload_hash"]
        assert sorted(i["status"] for i in shown["items"]) == ["ACTIVE", "ERROR"]
        text = cli("agent", "status", "--credential-file", str(cred_file)).stdout
        assert "refused on purpose" in text and f"node: {node['uuid']}" in text
    finally:
        agent.stop()
    missing = cli("agent", "status", "--credential-file", str(tmp_path / "none.json"))
    assert missing.code == 1 and "cannot read the credential file" in missing.stderr


def test_an_agent_started_before_its_credential_waits_for_it(api, tmp_path):
    admin = api.client(api.login("admin", ADMIN_PASSWORD))
    node = hw_node(admin)
    cred = enroll(api, admin, node["uuid"])
    agent = AgentProcess(tmp_path / "n", cred, f"http://127.0.0.1:{api.port}")
    written = open(agent.credential_file).read()
    os.unlink(agent.credential_file)            # as on a VM before cloud-init wrote it
    agent.start()
    try:
        eventually(lambda: "watching for the credential file" in agent.logs(), seconds=30,
                   what="the agent waits")
        assert agent.proc.poll() is None
        add_file(api.store, {"kind": "node", "node": node["uuid"]}, "/etc/late", "ok")
        with open(agent.credential_file, "w") as f:
            f.write(written)
        # it looks again every 5 s
        eventually(lambda: agent.file("/etc/late") == "ok", seconds=5 + PROMPT,
                   what="delivery once the credential is there")
    finally:
        agent.stop()
