"""The unit files of systemd/, read as systemd would (no systemd runs on the host: the boot
test checks them live in the image). One rule set for every process unit, so that a
daemon added to daemons.DAEMONS gets a unit like the others and a place in the target."""

import configparser
import os

import pytest

from appliance import config
from appliance.firstboot import Paths, ondemand
from daemons import DAEMONS, ON_DEMAND, module_of
from daemons.base import MARKS, wake_name
from state.collection import LOCK_DIR
from state.wake import SLEEP_DIR, TIMED_DIR, WAKE_DIR

SYSTEMD = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "systemd")
PROCESSES = [("api", "appliance.server")] + [(name, module_of(name)) for name in DAEMONS]
# the node agent runs as root, on every node (its own test below); the backup is a
# oneshot run by a timer, not a process that idles
APPLIANCE_USER = [(n, m) for n, m in PROCESSES if n != "agent"]
LONG_RUNNING = [(n, m) for n, m in PROCESSES if n != "backup"]


def unit(name):
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    with open(os.path.join(SYSTEMD, name)) as f:
        parser.read_file(f)
    return parser


def words(parser, section, key):
    return " ".join(parser[section].get(key, "").split()).split()


@pytest.mark.parametrize("name,module", APPLIANCE_USER)
def test_every_process_unit_is_hardened_and_ordered(name, module):
    u = unit(f"appliance-{name}.service")
    service = u["Service"]
    once = " --once" if name == "backup" else ""
    assert service["ExecStart"] == f"/opt/appliance/venv/bin/python -P -m {module}{once}"
    assert service["User"] == service["Group"] == "appliance"
    if name == "backup":
        assert service["Type"] == "oneshot" and "Install" not in u
    elif name in ON_DEMAND:
        # started by its path unit or by first boot, never by the target (test below)
        assert service["Restart"] == "on-failure" and "Install" not in u
    else:
        assert service["Restart"] == "on-failure"
        assert u["Install"]["WantedBy"] == "appliance.target"
    assert service["ProtectSystem"] == "strict"
    # the state, and for the backup daemon its optional folder (`-`: may be missing)
    extra = ["-/var/backups/appliance"] if name == "backup" else []
    assert service["ReadWritePaths"].split() == ["/var/lib/appliance"] + extra
    for key in ("PrivateTmp", "NoNewPrivileges", "ProtectHome", "PrivateDevices"):
        assert service[key] == "yes", key
    assert u["Unit"]["RequiresMountsFor"] == "/var/lib/appliance"
    assert "appliance-firstboot.service" in words(u, "Unit", "Requires")
    if name == "api":
        # beside first boot, waiting in-process for its mark (docs/appliance-image.md)
        assert "appliance-firstboot.service" not in words(u, "Unit", "After")
        assert "APPLIANCE_API_WAIT_FOR=/run/appliance/firstboot-done" in \
            service["Environment"].split()
        assert Paths().done_mark == "/run/appliance/firstboot-done"
    else:
        assert "appliance-firstboot.service" in words(u, "Unit", "After")
    caps = "CAP_NET_BIND_SERVICE" if name == "dns" else ""
    assert service["CapabilityBoundingSet"] == caps
    assert service.get("AmbientCapabilities", "") == caps


def test_the_target_wants_first_boot_nginx_and_every_process_but_those_on_demand():
    wanted = set(words(unit("appliance.target"), "Unit", "Wants"))
    assert wanted == ({"appliance-firstboot.service", "nginx.service"}
                      | {f"appliance-{name}.service" for name, _ in LONG_RUNNING
                         if name not in ON_DEMAND})


@pytest.mark.parametrize("name", sorted(ON_DEMAND))
def test_an_on_demand_daemon_s_path_unit_watches_its_kinds_and_first_boot_starts_it(name):
    u = unit(f"appliance-{name}.path")
    # configparser keeps the last of repeated keys: read the PathModified= lines directly
    with open(os.path.join(SYSTEMD, f"appliance-{name}.path")) as f:
        watched = [line.split("=", 1)[1].strip() for line in f
                   if line.startswith("PathModified=")]
    assert watched == [os.path.join("/var/lib/appliance", LOCK_DIR, f"{kind}.lock")
                       for kind in ON_DEMAND[name]]
    # and its wake mark, level-triggered: checked again whenever the daemon stopped when
    # idle (state/wake.py, daemons/base.py wake_name)
    with open(os.path.join(SYSTEMD, f"appliance-{name}.path")) as f:
        exists = [line.split("=", 1)[1].strip() for line in f
                  if line.startswith("PathExists=")]
    assert exists == [os.path.join("/var/lib/appliance", WAKE_DIR, wake_name(name))]
    assert u["Path"]["Unit"] == f"appliance-{name}.service"
    assert u["Unit"]["RequiresMountsFor"] == "/var/lib/appliance"
    assert u["Unit"]["PartOf"] == "appliance.target"
    # first boot starts it and waits for it (appliance/firstboot/ondemand.py): neither
    # wanted by the target nor ordered after first boot, which would wait forever
    assert "Install" not in u
    assert "appliance-firstboot.service" not in words(u, "Unit", "After")


@pytest.mark.parametrize("name", sorted(ON_DEMAND))
def test_an_on_demand_daemon_stops_when_idle_asleep_on_its_marks(name):
    """The unit's environment (daemons/base.py run): the marks mode and its idle time,
    before /etc/appliance/environment, which may change them; a clean exit (an idle stop)
    leaves the unit inactive, for its path unit to start again."""
    with open(os.path.join(SYSTEMD, f"appliance-{name}.service")) as f:
        lines = [line.strip() for line in f]
    environment = [word for line in lines if line.startswith("Environment=")
                   for word in line.split("=", 1)[1].split()]
    assert {"APPLIANCE_IDLE_WAKE=" + MARKS, "APPLIANCE_IDLE_STOP_SECONDS=60"} \
        <= set(environment)
    assert lines.index("EnvironmentFile=-/etc/appliance/environment") > max(
        i for i, line in enumerate(lines) if line.startswith("Environment="))
    assert unit(f"appliance-{name}.service")["Service"]["Restart"] == "on-failure"


def test_no_always_on_unit_stops_when_idle():
    for name, _ in PROCESSES:
        if name not in ON_DEMAND:
            with open(os.path.join(SYSTEMD, f"appliance-{name}.service")) as f:
                assert "APPLIANCE_IDLE_WAKE" not in f.read(), name


def test_only_on_demand_daemons_and_their_timed_waker_have_path_units():
    paths = {f[len("appliance-"):-len(".path")] for f in os.listdir(SYSTEMD)
             if f.endswith(".path")}
    assert paths == set(ON_DEMAND) | {"wake"}


def test_the_timed_waker_runs_only_while_an_entry_is_timed_as_a_hardened_appliance_user():
    """appliance-wake (docs/on-demand-daemons.md, "A timer of its own"): its path unit
    watches the timed entries' folder (state/wake.py), level-triggered, started by first
    boot (ondemand.WAKE_PATH_UNIT), not by the target; its service is the shell loop the
    image installs, as the appliance user, hardened like the daemons, and quiet."""
    path = unit("appliance-wake.path")
    assert path["Path"]["DirectoryNotEmpty"] == os.path.join(
        "/var/lib/appliance", SLEEP_DIR, TIMED_DIR)
    assert path["Path"]["Unit"] == "appliance-wake.service"
    assert "Install" not in path and path["Unit"]["PartOf"] == "appliance.target"
    assert "appliance-firstboot.service" not in words(path, "Unit", "After")
    assert ondemand.WAKE_PATH_UNIT == "appliance-wake.path"
    u = unit("appliance-wake.service")
    service = u["Service"]
    script = "/usr/lib/appliance/wake-due"
    assert service["ExecStart"] == f"{script} /var/lib/appliance"
    installed = os.path.join(os.path.dirname(SYSTEMD), "image-build", "files", "appliance",
                             script.lstrip("/"))
    assert os.access(installed, os.X_OK)
    with open(installed) as f:
        assert f.readline() == "#!/bin/sh\n"
    assert service["User"] == service["Group"] == "appliance"
    assert service["ProtectSystem"] == "strict"
    assert service["ReadWritePaths"].split() == ["/var/lib/appliance"]
    for key in ("PrivateTmp", "NoNewPrivileges", "ProtectHome", "PrivateDevices"):
        assert service[key] == "yes", key
    assert service["CapabilityBoundingSet"] == ""
    # the manager's Started/Deactivated lines (info) dropped, its own lines (notice) kept
    assert service["LogLevelMax"] == service["SyslogLevel"] == "notice"
    assert "Install" not in u


def test_the_agent_runs_as_root_on_enrolled_nodes_only():
    """issue 14: the one unit serves the node image (enabled, wanted by multi-user) and
    the appliance (wanted by its target; ordered after first boot and the API by the
    image's drop-in), so it names no unit a node lacks."""
    u = unit("appliance-agent.service")
    service = u["Service"]
    assert service["ExecStart"] == "/opt/appliance/venv/bin/python -P -m daemons.agent"
    assert service["User"] == "root" and "Group" not in service
    assert u["Unit"]["ConditionPathExists"] == "/etc/appliance/agent.json"
    # settings' own variables (appliance/config.py): the credential, and the state in the
    # directory StateDirectory= makes
    assert service["Environment"].split() == [
        "APPLIANCE_AGENT_CREDENTIAL_FILE=/etc/appliance/agent.json",
        "APPLIANCE_AGENT_STATE_DIR=/var/lib/appliance-agent"]
    assert {"agent_credential_file", "agent_state_dir"} <= set(config.DEFAULTS)
    assert service["StateDirectory"] == "appliance-agent"
    assert service["StateDirectoryMode"] == "0700"
    assert service["Restart"] == "on-failure"
    for key in ("ProtectSystem", "ProtectHome", "NoNewPrivileges", "CapabilityBoundingSet"):
        assert key not in service, key
    assert "Requires" not in u["Unit"] and "RequiresMountsFor" not in u["Unit"]
    assert u["Install"]["WantedBy"] == "multi-user.target"
    drop_in = configparser.ConfigParser(strict=False, interpolation=None)
    drop_in.optionxform = str
    drop_in.read(os.path.join(os.path.dirname(SYSTEMD), "image-build", "files", "appliance",
                              "etc/systemd/system/appliance-agent.service.d/appliance.conf"))
    assert set(words(drop_in, "Unit", "After")) == {"appliance-firstboot.service",
                                                    "appliance-api.service"}
    assert drop_in["Unit"]["PartOf"] == "appliance.target"


def test_first_boot_runs_before_what_reads_its_files():
    u = unit("appliance-firstboot.service")
    assert u["Service"]["Type"] == "oneshot"
    assert u["Service"]["ExecStart"].endswith("-m appliance.firstboot")
    assert {"nginx.service", "ssh.service"} <= set(words(u, "Unit", "Before"))
    assert u["Unit"]["RequiresMountsFor"] == "/var/lib/appliance"


def test_no_unit_is_left_without_a_process():
    processes = {f"appliance-{name}.service" for name, _ in PROCESSES}
    files = {f for f in os.listdir(SYSTEMD) if f.endswith(".service")}
    # a shell loop, not a Python process of its own (the test above)
    assert files - processes == {"appliance-firstboot.service", "appliance-wake.service"}
