"""The harness for the real-systemd tests of issue 14 (tests/image/conftest.py's `box`: the
appliance image booted once per session under TCG, shared with the boot test), shown on
what needs no agent: the units' ordering as the guest's systemd sees it, a unit made in
the guest (as the agent will make them) with its ordering and a oneshot's exit code, and
the API over the forwarded HTTPS port."""

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

UNIT = "harness-probe"


def test_the_guests_systemd_orders_the_appliance_units(box):
    # a daemon starts after first boot and the API; the API needs first boot but starts
    # beside it, waiting in-process for its mark (docs/appliance-image.md, "Second pass")
    dns = box.show("appliance-dns.service", "After")
    assert {"appliance-firstboot.service", "appliance-api.service"} <= set(dns["After"].split())
    api = box.show("appliance-api.service", "After", "Requires", "Environment")
    assert "appliance-firstboot.service" in api["Requires"].split()
    assert "appliance-firstboot.service" not in api["After"].split()
    assert "APPLIANCE_API_WAIT_FOR=/run/appliance/firstboot-done" in api["Environment"].split()
    # the agent's unit is the node image's; the appliance's drop-in adds its ordering
    agent = box.show("appliance-agent.service", "After", "PartOf", "User", "DropInPaths",
                     "ConditionResult")
    assert {"appliance-api.service", "appliance-firstboot.service",
            "network-online.target"} <= set(agent["After"].split())
    assert agent["PartOf"] == "appliance.target" and agent["User"] == "root"
    assert agent["DropInPaths"].endswith("appliance-agent.service.d/appliance.conf")


def test_a_unit_made_in_the_guest_shows_its_ordering_and_exit_code(box):
    """What the agent's systemd driver will do, done by hand: a unit file, a reload, a
    start; systemd reports the ordering and the oneshot's exit code."""
    box.ssh(f"printf '%s\\n' '[Unit]' 'After=appliance-dns.service' 'Before=nginx.service' "
            f"'[Service]' 'Type=oneshot' 'ExecStart=/bin/sh -c \"exit 3\"' "
            f"> /run/systemd/system/{UNIT}.service && systemctl daemon-reload")
    try:
        box.ssh(f"systemctl start {UNIT}", check=False)
        shown = box.show(f"{UNIT}.service", "After", "Before", "ExecMainStatus", "Result")
        assert "appliance-dns.service" in shown["After"].split()
        assert "nginx.service" in shown["Before"].split()
        assert (shown["ExecMainStatus"], shown["Result"]) == ("3", "exit-code")
    finally:
        box.ssh(f"rm -f /run/systemd/system/{UNIT}.service; systemctl reset-failed {UNIT}; "
                "systemctl daemon-reload", check=False)
    assert box.ssh(f"systemctl cat {UNIT}", check=False).returncode != 0


def test_the_api_answers_through_the_forwarded_https_port(box):
    assert box.client.get("/v1/health").status == 200
    assert box.admin().get("/v1/iam/users").status == 200
    # an unknown path is the API's JSON error, through nginx
    missing = box.client.get("/v1/no/such/thing")
    assert missing.status == 404 and set(missing.json) >= {"type", "code", "message"}
