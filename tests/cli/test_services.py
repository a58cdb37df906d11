"""`appliance services ...` against the real API (no agent runs here: where a command
waits, the test moves the service's status in the store, as the status step would)."""

from __future__ import annotations

import threading
import time

from .conftest import ADMIN_PROJECT

SVC = "/v1/em/services/"


def hw_node(cli, name):
    result = cli("--json", "compute", "nodes", "add", "-p", ADMIN_PROJECT, "-n", name,
                 "node_type=HW")
    assert result.code == 0, result.stderr
    return result.json()["uuid"]


def test_add_show_update_actions_delete(logged_in, real_api):
    a, b = hw_node(logged_in, "svc-a"), hw_node(logged_in, "svc-b")
    first = logged_in("--json", "services", "add", "-p", ADMIN_PROJECT, "-n", "db",
                      "--command", "exec postgres", "--node", "svc-a")
    assert first.code == 0, first.stderr
    sent = logged_in.transport.to(SVC)[-1].body
    assert sent == {"name": "db", "project_id": ADMIN_PROJECT, "path": "exec postgres",
                    "target": {"kind": "node", "node": a},
                    "service_type": {"kind": "simple"}}
    web = logged_in("--json", "services", "add", "-p", ADMIN_PROJECT, "-n", "web",
                    "--command", "echo 'it''s' \"$HOME\" 100%", "--node", "svc-a",
                    "--node", b, "--type", "monopoly", "--before-service", "db",
                    "--before-shell", "mkdir -p /srv/web", "--user", "www-data")
    assert web.code == 0, web.stderr
    svc = web.json()
    assert svc["target"] == {"kind": "nodes", "nodes": [a, b]}
    assert svc["path"] == "echo 'it''s' \"$HOME\" 100%"
    assert svc["before"] == [{"kind": "shell", "command": "mkdir -p /srv/web"},
                             {"kind": "service", "service": first.json()["uuid"]}]
    listed = logged_in("services", "list")
    assert listed.code == 0 and "web" in listed.stdout and "db" in listed.stdout
    shown = logged_in("--json", "services", "show", "web")
    assert shown.json()["uuid"] == svc["uuid"]
    updated = logged_in("--json", "services", "update", "web", "--target-status", "started")
    assert updated.json()["target_status"] == "started"
    assert logged_in("--json", "services", "stop", "web").json()["target_status"] == \
        "disabled"
    assert logged_in("--json", "services", "start", "web").json()["target_status"] == \
        "started"
    assert logged_in("--json", "services", "restart", "web").json()["restart_counter"] == 1
    # db cannot go while web orders itself after it
    refused = logged_in("services", "delete", "db")
    assert refused.code != 0 and "names this one in its before" in refused.stderr, refused
    assert logged_in("services", "delete", "web").code == 0
    assert logged_in("services", "delete", "db").code == 0
    assert logged_in("--json", "services", "list").json() == []


def test_bad_input_is_the_api_message(logged_in):
    hw_node(logged_in, "svc-c")
    result = logged_in("services", "add", "-p", ADMIN_PROJECT, "--command", "a\nb",
                       "--node", "svc-c")
    assert result.code != 0 and "path" in result.stderr
    missing = logged_in("services", "add", "-p", ADMIN_PROJECT, "--command", "x")
    assert missing.code != 0 and "target" in missing.stderr
    nothing = logged_in("services", "update", "nope")
    assert nothing.code != 0
    assert logged_in("--json", "services", "list").json() == []


def test_wait_follows_the_status_to_active(logged_in, real_api):
    hw_node(logged_in, "svc-d")
    svc = logged_in("--json", "services", "add", "-p", ADMIN_PROJECT, "-n", "w",
                    "--command", "true", "--node", "svc-d").json()

    def agent():
        # as an agent would: once the restart is recorded (a busy machine may take longer
        # than any fixed sleep to get the CLI there), it reports the service running
        services = real_api.store.collection("em_services")
        deadline = time.monotonic() + 30
        while (services.get(svc["uuid"]) or {}).get("restart_counter", 0) < 1 \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)             # the CLI has seen NEW by now: --wait follows a change
        services.update(svc["uuid"], {"status": "ACTIVE"})
    threading.Thread(target=agent, daemon=True).start()
    result = logged_in("--json", "services", "restart", "w", "--wait", "--wait-timeout", "30")
    assert result.code == 0, result.stderr
    assert result.json()["status"] == "ACTIVE" and "NEW" in result.stderr
