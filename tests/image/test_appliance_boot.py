"""The appliance image, booted under QEMU (TCG), seen from the host as a user sees it.

One VM boots the built image with the state on a second disk, the admin password
and root's SSH key in fw_cfg, and TCP ports 443, 53, 22 and 5432 (sqldb_port) forwarded
on 127.0.0.1 (the QEMU line of docs/boot.md). DNS over UDP cannot be asked from the host: with `restrict=on` libslirp drops
every UDP datagram the guest sends except DHCP and TFTP (udp_input: `if
(slirp->restricted) goto bad;`), forwarded replies included; the guest is seen to answer
(its UDP counters move) but the reply never leaves QEMU. So DNS is asked from the host
over TCP, and over UDP from inside the guest at its eth0 address. Most checks share that boot (tests/image/conftest.py's `box`, one per session, which
other image tests share too; each boot costs minutes under TCG); then it is rebooted in
place, and finally a newer build boots with the same state disk (the upgrade): those two
are marked `ends_the_boot` and run after every other test. The tests run in file order
and build on each other's records (`made`).

Figures (boot to a healthy API, idle memory, restart after SIGKILL) are printed with
`-s`; docs/appliance-image.md quotes them. Bounds asserted are the issue's "within
seconds" for a restart (generous: 60 s on a busy machine under TCG; 4-15 s measured) and the timeouts.
"""

import json
import os
import re
import socket
import subprocess
import sys
import time
import uuid

import dns.rcode
import pytest

from appliance.iam.builtin import ADMIN_PROJECT
from appliance.network import vxlan_hook
from appliance.firstboot import nginx as nginx_site
from appliance.sqldb.versions import NODE_IMAGE_MAJOR
from daemons import ON_DEMAND
from tests.api.test_flood import (FLOOD, TRICKLE_SECONDS, Flood,
                                  closed_by_server, own_descriptors)
from tests.firstboot.test_nginx_flood import image_worker_limits
from tests.apiserver import TOKEN_PATH
from tests.image.guest import (FW_PASSWORD, PASSWORD, SQLDB_PORT, Box, appliance_vm,
                               listening_tcp, os_release, wait_status)
from tests.image.qemu import APPLIANCE_UNITS, build_image, unit_memory

# a cold image build alone passes the suite's 300 s per test (it happens in the first
# test's set-up): the bound here covers build, boots and upgrade
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEST_MIGRATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations")
# the vendor GUID of systemd-boot's EFI variables (LoaderInfo, LoaderTimeExecUSec, ...)
LOADER_VENDOR = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"
MARKER_VERSION = 9000           # tests/image/migrations/9000_upgrade_test_marker.py
# every process the appliance runs as the appliance user (the agent runs as root: its own
# check below); backups are a timer's oneshot, not a process
DAEMON_UNITS = [u for u in APPLIANCE_UNITS if u != "appliance-agent"]
# the daemons that run once they have work (daemons.ON_DEMAND) and their path units
ON_DEMAND_UNITS = [f"appliance-{name}" for name in ON_DEMAND]
PATH_UNITS = [f"{u}.path" for u in ON_DEMAND_UNITS]
# what runs from the start on every boot
UNITS = ["appliance-firstboot", *[u for u in DAEMON_UNITS if u not in ON_DEMAND_UNITS],
         *PATH_UNITS, "nginx", "ssh"]
FIRST_USE_SECONDS = 120         # a path unit's start of a daemon: a Python start under TCG
# What the flood may add to a GET under TCG. The failures the flood test guards against
# keep a request waiting for one of the flood's deadlines (nginx's 10 s header timeout,
# the API's 10 s idle one: 31-60 s before the rules of docs/security.md); half of that
# still tells those apart, while the emulated CPUs share a host whose other work also
# slows each answer (2.0 s in ciAE, with a CPU hog beside it). The issue's second is
# held where the CPU is real: tests/api/test_flood.py, tests/firstboot/test_nginx_flood.py.
TCG_FLOOD_BOUND_SECONDS = 5.0
RESTART_BOUND_SECONDS = 60      # "back within seconds": RestartSec=1 + a Python start on TCG, on a busy host
API_BACK_SECONDS = 300          # the API's start under TCG (see the SIGKILL test)
LIBVIRT_FIRST_SECONDS = 900     # libvirtd's first start probes QEMU (see the libvirt test)


def assert_state_kept(box, made, password=PASSWORD):
    admin = box.admin(password)
    secret = admin.get(f"/v1/secret/secrets/{made['secret']}")
    assert secret.status == 200, secret
    assert secret.json["value"] == made["value"]
    assert secret.json["status"] == "ACTIVE"
    box.wait_answer(made["name"], made["address"])


# ---- the first boot -----------------------------------------------------------------------

def version_of(text):
    """(major, minor) of the first dotted version number in a --version line."""
    major, minor = re.search(r"(\d+)\.(\d+)", text).groups()
    return int(major), int(minor)


def test_the_upgrade_from_debian_12_kept_everything(box, made):
    """The Debian 13 image on the state disk of a Debian 12 appliance (docs/image.md,
    "Upgrade from a Debian 12 appliance"): the same certificate and SSH host key (the
    pinned client and known_hosts already insist), the kept password, the project, the
    secret's value, the DNS record, the config (its record, and its file written again by
    the agent on the new root), and the DBaaS versions: "17", what the image carries,
    offered; the Debian 12 seed "15" deprecated, not deleted."""
    assert made["previous_os"]["VERSION_ID"] == "12"
    assert os_release(box)["VERSION_ID"] == "13"
    info = json.loads(box.ssh("cat /etc/appliance/build-info.json").stdout)
    assert info["rootfs_hash"] != made["previous_build"]["rootfs_hash"]
    assert box.fingerprint == made["previous_fingerprint"]
    assert box.ssh("cat /etc/ssh/ssh_host_ed25519_key.pub").stdout == made["previous_host_key"]
    admin = box.admin()
    project = admin.get(f"/v1/iam/projects/{made['project']}")
    assert (project.status, project.json["name"]) == (200, "kept-from-debian12"), project
    assert_state_kept(box, made)
    config = wait_status(admin, f"/v1/config/configs/{made['config']}", "ACTIVE")
    assert config["path"] == made["config_path"]
    deadline = time.monotonic() + FIRST_USE_SECONDS
    while box.ssh(f"cat {made['config_path']}", check=False).stdout != made["config_content"]:
        assert time.monotonic() < deadline, "the agent did not write the kept config again"
        time.sleep(2)
    versions = {v["name"]: v for v in
                admin.get("/v1/types/sqldb/versions/").json["versions"]}
    assert "15" in made["versions"] and "17" not in made["versions"], made["versions"]
    assert versions["15"]["uuid"] == made["versions"]["15"]
    assert versions["15"]["deprecated"] is True, versions["15"]
    assert (versions["17"]["major"], versions["17"]["deprecated"]) == (17, False)
    assert box.ssh("ls /usr/lib/postgresql").stdout.split() == ["17"]


def test_the_image_carries_debian_13s_qemu_and_libvirt(box):
    """Issue 31: the spec's host minimum (QEMU >= 8.2, libvirt >= 10.0), read in the guest."""
    assert os_release(box)["VERSION_ID"] == "13"
    qemu = box.ssh("qemu-system-x86_64 --version").stdout
    assert version_of(qemu) >= (8, 2), qemu
    libvirtd = box.ssh("libvirtd --version").stdout
    assert version_of(libvirtd) >= (10, 0), libvirtd
    print(f"\nin the image: {qemu.splitlines()[0]}; {libvirtd.strip()}")


def test_the_vxlan_hook_joins_a_network_under_debian_13s_libvirt(box):
    """Issue 31: the appliance's libvirt network hook (appliance/network/vxlan_hook.py,
    installed in network.d) under the image's libvirt (nftables firewall backend) and
    iptables (the nft flavour): a network with the VXLAN mark and one peer gets its
    vxlan device on the bridge with the peer's flood entry and the drop rules; its stop
    removes the device. The peer is an address behind a dummy device made for the test
    inside the guest: nothing is sent anywhere. The compute daemon is stopped meanwhile:
    it removes an `appliance-` network that has no record (its own leftovers)."""
    name, bridge, vni = "appliance-00000000-0000-4000-8000-0000000a31a1", "ap-00000a31a1ff", 4231
    xml = (f"<network><name>{name}</name><bridge name='{bridge}'/><mtu size='1450'/>"
           f"<metadata><ap:vxlan xmlns:ap='{vxlan_hook.VXLAN_NS}' vni='{vni}'/></metadata>"
           f"<portgroup name='{vxlan_hook.PEER_PREFIX}10.231.0.2'/></network>")
    box.ssh("systemctl stop appliance-compute && ip link add apt-peer type dummy && "
            "ip addr add 10.231.0.1/24 dev apt-peer && ip link set apt-peer up")
    try:
        box.ssh(f"cat > /run/apt-vxlan.xml <<'EOF'\n{xml}\nEOF\nvirsh -q net-create "
                "/run/apt-vxlan.xml")
        link = box.ssh(f"ip -d link show dev vxlan{vni}").stdout
        assert f"vxlan id {vni}" in link and f"master {bridge}" in link and "mtu 1450" in link
        fdb = box.ssh(f"bridge fdb show dev vxlan{vni}").stdout
        assert vxlan_hook.flood_peers(fdb) == ["10.231.0.2"], fdb
        for rule in vxlan_hook.firewall_rules():
            assert box.ssh("iptables -C " + " ".join(rule), check=False).returncode == 0, rule
        box.ssh(f"virsh -q net-destroy {name}")
        assert box.ssh(f"ip link show dev vxlan{vni}", check=False).returncode != 0
    finally:
        box.ssh(f"virsh -q net-destroy {name}; ip link del apt-peer; rm -f /run/apt-vxlan.xml; "
                "systemctl start appliance-compute", check=False)


def test_https_health_is_200_with_the_certificate_the_console_shows(box):
    resp = box.client.get("/v1/health")          # the client pins the console's fingerprint
    assert resp.status == 200, resp
    for prefix in ("/api/core", "/api/dbaas"):
        assert box.client.get(prefix + "/v1/health").status == 200
    banner = box.vm.serial()
    assert "https://" in banner and "/var/lib/appliance/admin-password" in banner


def test_the_shared_boot_is_a_uefi_boot_through_systemd_boot(box):
    """appliance_vm boots by UEFI (OVMF): the kernel sees EFI firmware, and the loader that
    started it is the EFI system partition's systemd-boot, which leaves its name in the EFI
    variable LoaderInfo (what `bootctl status` shows; bootctl is in Debian's systemd-boot,
    which the image does not carry). The boot disk's partition 2 is that ESP. The BIOS path
    of the same kind of disk is the node image's boot test (tests/image/test_image.py)."""
    assert box.vm.firmware == "uefi"
    assert box.ssh("test -d /sys/firmware/efi", check=False).returncode == 0
    # cat: a file of efivarfs cannot seek (tail -c +5 on it reads nothing); the first 4
    # bytes are the variable's attributes, then UTF-16 text
    loader = box.ssh(f"cat /sys/firmware/efi/efivars/LoaderInfo-{LOADER_VENDOR} "
                     "| tail -c +5 | tr -d '\\000'").stdout
    assert loader.startswith("systemd-boot "), loader
    esp = box.ssh("lsblk -no PARTTYPE,FSTYPE,LABEL /dev/vda2").stdout.split()
    assert esp == ["0xef", "vfat", "ESP"], esp


def test_login_with_the_first_boot_password(box):
    assert box.admin().get("/v1/iam/users").status == 200
    wrong = box.client.post(TOKEN_PATH, {"grant_type": "password", "username": "admin",
                                         "password": PASSWORD + "x", "scope": ""})
    assert 400 <= wrong.status < 500 and wrong.json["error"] == "invalid_grant"
    # the password file is the one fw_cfg gave, readable by the appliance user only
    out = box.ssh("stat -c '%U %a' /var/lib/appliance/admin-password; "
                  "cat /var/lib/appliance/admin-password").stdout.split("\n")
    assert out[0] == "appliance 600" and out[1].strip() == PASSWORD


def test_a_secret_reaches_active(box, made):
    wait_status(box.admin(), f"/v1/secret/secrets/{made['secret']}", "ACTIVE")


def test_dns_answers_a_record_made_through_the_api(box, made):
    box.wait_answer(made["name"], made["address"])
    assert box.dns("nothing.boot.test").rcode() == dns.rcode.NXDOMAIN
    assert box.guest_udp_answer(made["name"]) == [made["address"]]


CLI = os.path.join(ROOT, ".venv", "bin", "appliance")
BANNER_LOGIN = re.compile(r"appliance login --endpoint https://\S+ --fingerprint (SHA256:[0-9A-F:]+)")
SQLDB_ADD_SECONDS = 900         # initdb and a PostgreSQL start under TCG on a busy host
SQLDB_GONE_SECONDS = 600


def cli_env(workdir):
    """The CLI's environment: its session under the test's directory, the admin password,
    and no trust store override (no SSL_CERT_FILE): the pin is what lets it in."""
    env = {name: value for name, value in os.environ.items()
           if name not in ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
                           "APPLIANCE_ENDPOINT")}
    env.update(APPLIANCE_CLI_CONFIG_DIR=os.path.join(workdir, "cli-config"),
               APPLIANCE_PASSWORD=PASSWORD)
    return env


def cli_command():
    return [CLI] if os.path.exists(CLI) else [sys.executable, "-m", "appliance.cli.main"]


def run_cli(env, *args, check=True, timeout=120, stdin=None):
    """The installed CLI as a subprocess, as a user runs it."""
    res = subprocess.run([*cli_command(), *args], capture_output=True, text=True, env=env,
                         timeout=timeout, input=stdin,
                         stdin=subprocess.DEVNULL if stdin is None else None)
    if check:
        assert res.returncode == 0, f"{args}: {res.returncode}\n{res.stderr}"
    return res


def banner_fingerprint(box):
    return BANNER_LOGIN.search(box.vm.serial()).group(1)


def test_the_cli_logs_in_with_the_banners_fingerprint(box, made, workdir):
    """docs/boot.md, steps 3 and 4: the fingerprint read from the console's banner, the
    installed CLI as a subprocess logging in over the forwarded 443 with it (the trust
    store untouched: no SSL_CERT_FILE), then a secret and a DNS record made and read back
    through the CLI, and the record asked over the forwarded TCP port 53."""
    banner = box.vm.serial()
    fingerprint = banner_fingerprint(box)
    assert fingerprint == box.fingerprint                   # the banner's two lines agree
    # docs/boot.md's way to take it from the console log finds the same
    with open(os.path.join(ROOT, "docs", "boot.md")) as f:
        doc_line = next(line for line in f if line.startswith("FINGERPRINT="))
    doc_line = doc_line.replace("build/images/appliance/appliance-serial.log",
                                box.vm.serial_log)
    from_doc = subprocess.run(["bash", "-c", doc_line + 'printf %s "$FINGERPRINT"'],
                              capture_output=True, text=True, timeout=60).stdout
    assert from_doc == fingerprint
    assert "(given through fw_cfg opt/appliance/admin-password)" in banner
    env = cli_env(workdir)

    def cli(*args):
        return run_cli(env, *args)

    endpoint = f"https://127.0.0.1:{box.vm.port(443)}"
    refused = run_cli(env, "login", "--endpoint", endpoint, check=False)
    assert refused.returncode == 1                          # no terminal, no --fingerprint
    assert f"--fingerprint {fingerprint}" in refused.stderr
    login = cli("login", "--endpoint", endpoint, "--fingerprint", fingerprint)
    assert f"trusting the pinned certificate {fingerprint}" in login.stdout

    value = "cli-boot-value-" + uuid.uuid4().hex
    secret = json.loads(cli("--json", "create", "secret/secrets", "name=cli-boot-test",
                            f"project_id={ADMIN_PROJECT}", 'constructor:={"kind": "plain"}',
                            f"value={value}").stdout)
    deadline = time.monotonic() + 120
    while True:
        shown = json.loads(cli("--json", "show", f"secret/secrets/{secret['uuid']}").stdout)
        if shown["status"] == "ACTIVE" or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert (shown["status"], shown["value"]) == ("ACTIVE", value)

    domain = json.loads(cli("--json", "create", "dns/domains", "name=cli.boot.test",
                            f"project_id={ADMIN_PROJECT}").stdout)
    cli("create", f"dns/domains/{domain['uuid']}/records", "type=A",
        'record:={"kind": "A", "name": "www", "address": "10.77.0.9"}')
    records = json.loads(cli("--json", "list", f"dns/domains/{domain['uuid']}/records").stdout)
    assert [r["record"]["address"] for r in records if r["record"].get("name") == "www"] == [
        "10.77.0.9"]
    box.wait_answer("www.cli.boot.test", "10.77.0.9")       # over the forwarded TCP 53


def host_psql(port, user, password, database, sql):
    """Debian's psql on the host, over TCP to the forwarded port on loopback."""
    env = dict(os.environ, PGPASSWORD=password, PGCONNECT_TIMEOUT="30", LC_ALL="C.UTF-8")
    return subprocess.run(["psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                           "-h", "127.0.0.1", "-p", str(port), "-U", user, "-d", database,
                           "-c", sql], capture_output=True, text=True, env=env, timeout=120,
                          stdin=subprocess.DEVNULL)


def test_the_first_boot_of_the_root_remakes_nothing_the_build_made(box):
    """The image carries /etc/.updated and /var/.updated (image-build/build.py,
    mark_updated): at the first boot of this root the `ConditionNeedsUpdate=` units were
    checked and skipped (ldconfig.service was 3.4 s of the boot's critical chain)."""
    for unit in ("ldconfig.service", "systemd-update-done.service"):
        shown = dict(line.split("=", 1) for line in box.ssh(
            f"systemctl show -p ConditionResult -p ConditionTimestampMonotonic {unit}")
            .stdout.split())
        assert shown["ConditionTimestampMonotonic"] != "0", f"{unit}: never checked"
        assert shown["ConditionResult"] == "no", f"{unit} ran at the first boot"


def test_the_boot_leaves_out_or_puts_after_the_api_what_serves_no_one_before_it(box):
    """The boot's cuts under TCG (docs/boot.md, "Less work before the API"), as the guest
    has them: libvirt's daemons ordered after the API; the generators, units and modules
    that would find nothing masked or left out; modules stored uncompressed; no BPF LSM,
    so systemd attaches no BPF program at its start; no hardware database in the
    initramfs."""
    with open(os.path.join(ROOT, "image-build", "recipe.json")) as f:
        recipe = json.load(f)
    for unit in ("libvirtd.service", "virtlogd.service", "systemd-machined.service"):
        assert "appliance-api.service" in box.show(unit, "After")["After"].split(), unit
    links = box.ssh("for g in /etc/systemd/system-generators/*; do "
                    "echo \"${g##*/} $(readlink $g)\"; done").stdout.split("\n")
    assert {line.split()[0] for line in links if line.endswith(" /dev/null")} \
        >= set(recipe["mask_generators"])
    for unit in ("systemd-network-generator.service", "systemd-udev-load-credentials.service"):
        assert box.ssh(f"systemctl is-enabled {unit}", check=False).stdout.strip() == "masked"
    assert box.show("systemd-modules-load.service", "ConditionResult")["ConditionResult"] == "no"
    modules = box.ssh("find /usr/lib/modules -name '*.ko*' | sed 's/.*[.]ko/.ko/' "
                      "| sort | uniq -c").stdout.split()
    assert modules[1::2] == [".ko"] and int(modules[0]) > 500, modules
    lsm = box.ssh("cat /sys/kernel/security/lsm").stdout.strip().split(",")
    assert "bpf" not in lsm and {"apparmor", "landlock", "yama"} <= set(lsm), lsm
    initramfs = box.ssh("lsinitramfs /boot/initrd.img-$(uname -r)").stdout.split()
    assert not [path for path in initramfs if path.endswith("hwdb.bin")]
    assert any(path.endswith("/virtio_blk.ko") for path in initramfs)


def test_every_unit_is_active_and_hardened(box, made):
    res = box.ssh("systemctl is-active " + " ".join(UNITS), check=False)
    assert res.stdout.split() == ["active"] * len(UNITS), res.stdout
    assert box.ssh("systemctl is-active appliance.target").stdout.strip() == "active"
    failed = box.ssh("systemctl list-units --failed --plain --no-legend").stdout
    assert "appliance" not in failed and "nginx" not in failed, failed
    # a secret (delivery's work: `made`'s, kept from Debian 12, and the CLI test's) and the
    # CLI test's DNS domain (a write the mirror's path unit sees): those two on-demand
    # daemons run by now, the others wait for theirs
    for unit in DAEMON_UNITS:
        if unit in ON_DEMAND_UNITS and unit not in ("appliance-delivery", "appliance-mirror"):
            continue
        if unit in ON_DEMAND_UNITS and is_active(box, unit) != "active":
            # started by their writes, then stopped after a minute without any: asleep
            assert ran_this_boot(box, unit), unit
            continue
        user = box.ssh(f"stat -c %U /proc/{box.main_pid(unit)}").stdout.strip()
        assert user == "appliance", unit
        assert box.ssh(f"systemctl show -p NRestarts --value {unit}").stdout.strip() == "0"
    # the node agent: root, and only on an enrolled node (its credential from first boot)
    enrolled = box.ssh("test -e /etc/appliance/agent.json", check=False).returncode == 0
    agent = box.ssh("systemctl is-active appliance-agent", check=False).stdout.strip()
    assert agent == ("active" if enrolled else "inactive"), (enrolled, agent)
    if enrolled:
        assert box.ssh(f"stat -c %U /proc/{box.main_pid('appliance-agent')}").stdout.strip() \
            == "root"
    # backups: no schedule in the image's config, so no timer and no process
    for unit in ("appliance-backup.timer", "appliance-backup.service"):
        state = box.ssh(f"systemctl is-active {unit}", check=False).stdout.strip()
        assert state == "inactive", (unit, state)
    # DNS on port 53 as the appliance user: its one capability is CAP_NET_BIND_SERVICE
    caps = box.ssh(f"grep CapEff /proc/{box.main_pid('appliance-dns')}/status").stdout
    assert int(caps.split()[1], 16) == 1 << 10, caps
    # nothing but nginx on 443, the API on loopback only
    listening = listening_tcp(box)
    assert ("127.0.0.1", 11010) in listening, listening
    assert {port for _, port in listening} & {80, 11010} == {11010}, listening
    assert [a for a, port in listening if port == 11010] == ["127.0.0.1"], listening


def test_an_on_demand_daemon_starts_at_the_first_write_to_its_kinds(box, made):
    """Idle, the builder, certificate and DBaaS daemons do not run (docs/on-demand-daemons.md);
    a repository written through the API starts the builder through its path unit, and the
    builder's first pass takes the repository out of NEW (ERROR here: nothing listens on
    the discard port)."""
    for unit in ("appliance-builder", "appliance-certificates", "appliance-sqldb"):
        assert is_active(box, unit) == "inactive", unit
        assert is_active(box, unit + ".path") == "active", unit
    admin = box.admin()
    assert ran_this_boot(box, "appliance-delivery", admin)
    started = time.monotonic()
    repo = admin.post("/v1/repo/repositories", {
        "name": "on-demand", "project_id": ADMIN_PROJECT, "sync_mode": "lazy",
        "driver_spec": {"kind": "nginx", "url": "http://127.0.0.1:9/"}})
    assert repo.status == 201, repo
    wait_status(admin, f"/v1/repo/repositories/{repo.json['uuid']}", "ERROR",
                timeout=FIRST_USE_SECONDS)
    print(f"\nbuilder: started by its first repository, which it took to ERROR in "
          f"{time.monotonic() - started:.1f} s")
    # running, or already asleep after its minute without a write (a slow TCG start)
    assert ran_this_boot(box, "appliance-builder", admin)
    assert box.ssh("systemctl show -p NRestarts --value appliance-builder").stdout.strip() \
        == "0"


def daemon_state(box, unit, admin=None):
    """The daemons endpoint's entry of `unit`'s daemon (`admin`: a logged-in client, else
    one more login: a scrypt, slow under TCG)."""
    name = unit[len("appliance-"):]
    return next(d for d in (admin or box.admin()).get("/v1/system/daemons").json
                if d["name"] == name)


def ran_this_boot(box, unit, admin=None):
    """Running, or asleep after running this boot (stopped when idle: waiting, since its
    stop), as GET /v1/system/daemons says."""
    state = daemon_state(box, unit, admin)
    return state["state"] == "running" or (state["state"] == "waiting"
                                           and state["since"] is not None)


IDLE_TEST_SECONDS = 5


def journal_count(box, unit, text):
    """How many lines of the unit's journal this boot hold `text` (a fixed string)."""
    return int(box.ssh(f"journalctl -b -o cat -u {unit} | grep -cF '{text}' "
                       "|| true").stdout.strip())


def starts_of(box, unit):
    """How many times the unit's daemon started this boot (its log's start line)."""
    return journal_count(box, unit, "started; watching")


def test_an_idle_on_demand_daemon_stops_and_the_next_write_starts_it_again(box, made):
    """In the image (docs/on-demand-daemons.md, "In the image"): with a short idle time
    (a runtime drop-in, gone at the reboot), a secret starts delivery; once idle it stops
    (inactive, shown as waiting) asleep on its kinds; the next secret leaves its wake mark,
    the path unit starts it, and the secret reaches ACTIVE. Then the same stop again."""
    drop_in = "/run/systemd/system/appliance-delivery.service.d"
    box.ssh(f"mkdir -p {drop_in} && printf '[Service]\\nEnvironment="
            f"APPLIANCE_IDLE_STOP_SECONDS={IDLE_TEST_SECONDS}\\n' > {drop_in}/idle.conf "
            "&& systemctl daemon-reload && systemctl restart appliance-delivery")
    admin = box.admin()
    try:
        def secret(name):
            made = admin.post("/v1/secret/secrets", {
                "name": name, "project_id": ADMIN_PROJECT, "constructor": {"kind": "plain"},
                "value": "v"})
            assert made.status == 201, made
            return made.json["uuid"]

        def asleep():
            deadline = time.monotonic() + FIRST_USE_SECONDS + 60
            while is_active(box, "appliance-delivery") != "inactive":
                assert time.monotonic() < deadline, "delivery never stopped when idle"
                time.sleep(1)
            state = daemon_state(box, "appliance-delivery", admin)
            assert state["state"] == "waiting" and state["since"], state
            assert "idle" in state["reason"], state
            # its path unit waits, on the lock files and its mark
            assert is_active(box, "appliance-delivery.path") == "active"

        first = secret(f"idle-first-{uuid.uuid4().hex[:8]}")
        wait_status(admin, f"/v1/secret/secrets/{first}", "ACTIVE", timeout=FIRST_USE_SECONDS)
        asleep()
        # asleep on the secret kinds, no mark yet
        assert box.ssh("ls /var/lib/appliance/.sleep/secret_secrets/").stdout.split() == \
            ["appliance-delivery"]
        assert box.ssh("ls -A /var/lib/appliance/.wake/").stdout.split() == []
        starts = starts_of(box, "appliance-delivery")
        started = time.monotonic()
        second = secret(f"idle-second-{uuid.uuid4().hex[:8]}")
        wait_status(admin, f"/v1/secret/secrets/{second}", "ACTIVE",
                    timeout=FIRST_USE_SECONDS)
        print(f"\ndelivery asleep: a secret to ACTIVE in {time.monotonic() - started:.1f} s")
        # its path unit started it once more (it may be asleep again already: 5 s), and the
        # started daemon consumed its mark
        assert starts_of(box, "appliance-delivery") == starts + 1
        assert box.ssh("ls -A /var/lib/appliance/.wake/").stdout.split() == []
        asleep()
        assert box.ssh("ls /var/lib/appliance/.sleep/secret_secrets/").stdout.split() == \
            ["appliance-delivery"]
        assert box.ssh("systemctl show -p NRestarts --value appliance-delivery").stdout \
            .strip() == "0"
    finally:
        box.ssh(f"rm -rf {drop_in} && systemctl daemon-reload", check=False)


TIMER_START = "started by its timer"      # daemons/base.py, run()


def test_the_builder_asleep_with_a_retry_due_is_started_again_by_its_timer(box, made):
    """docs/on-demand-daemons.md, "A timer of its own": with a short idle time (a runtime
    drop-in, gone at the reboot), the builder, its repository in ERROR (nothing listens on
    the discard port; retried after 5 s, then 10 s, ...), stops with the retry's time as a
    timed entry (inactive, shown as waiting). No write comes: appliance-wake.path sees
    the entry, its shell loop turns it into the builder's mark once the time passed, and the
    builder's path unit starts it again; the loop then exits (no process while nothing is
    timed)."""
    drop_in = "/run/systemd/system/appliance-builder.service.d"
    unit = "appliance-builder"
    box.ssh(f"mkdir -p {drop_in} && printf '[Service]\\nEnvironment="
            f"APPLIANCE_IDLE_STOP_SECONDS={IDLE_TEST_SECONDS}\\n' > {drop_in}/idle.conf "
            f"&& systemctl daemon-reload && systemctl restart {unit}")
    admin = box.admin()
    try:
        assert is_active(box, "appliance-wake.path") == "active"
        repo = admin.post("/v1/repo/repositories", {
            "name": f"timed-{uuid.uuid4().hex[:8]}", "project_id": ADMIN_PROJECT,
            "sync_mode": "lazy", "driver_spec": {"kind": "nginx", "url": "http://127.0.0.1:9/"}})
        assert repo.status == 201, repo
        wait_status(admin, f"/v1/repo/repositories/{repo.json['uuid']}", "ERROR",
                    timeout=FIRST_USE_SECONDS)
        deadline = time.monotonic() + FIRST_USE_SECONDS + 60
        while is_active(box, unit) != "inactive":
            assert time.monotonic() < deadline, "the builder never went to sleep"
            time.sleep(1)
        asleep_at = time.monotonic()
        starts = starts_of(box, unit)
        timer_starts = journal_count(box, unit, TIMER_START)
        state = daemon_state(box, unit, admin)
        assert state["state"] == "waiting" and state["since"], state
        # it said when its timer wakes it (the entry may be consumed already: a short retry)
        said = box.ssh(f"journalctl -b -o cat -u {unit} | grep 'its timer wakes it at' "
                       "| tail -n 1").stdout.strip()
        assert said, "no timed sleep in the builder's journal"
        # no write since: its timer, through appliance-wake, starts it again
        while starts_of(box, unit) == starts:
            assert time.monotonic() < asleep_at + FIRST_USE_SECONDS + 60, \
                f"its timer never started it again ({said})"
            time.sleep(1)
        print(f"\nbuilder: asleep with its retry's timer ({said}); started again by it "
              f"{time.monotonic() - asleep_at:.1f} s after it stopped")
        woke = box.ssh("journalctl -b -o cat -u appliance-wake.service").stdout
        assert "woke appliance-builder" in woke, woke
        # no write brought it: it knows, and stops once its pass is done (daemons/base.py)
        # (counted: the lines after it, a failed retry's among them, are not bounded)
        while journal_count(box, unit, TIMER_START) == timer_starts:
            assert time.monotonic() < asleep_at + FIRST_USE_SECONDS + 120, \
                "the builder's start by its timer was taken for a write's"
            time.sleep(1)
        # the manager's start and end lines of the loop are filtered (LogLevelMax=notice)
        assert "Deactivated successfully" not in woke, woke
        assert box.ssh(f"systemctl show -p NRestarts --value {unit}").stdout.strip() == "0"
    finally:
        box.ssh(f"rm -rf {drop_in} && systemctl daemon-reload", check=False)


def test_libvirt_answers_the_appliance_user(box):
    """issue 12: libvirtd works in the image and the appliance user (group libvirt, as the
    compute daemon runs) reaches qemu:///system; nothing of libvirt listens on the network
    nor takes port 53 from the appliance's DNS."""
    # the first connection starts libvirtd (socket activation), which probes QEMU's
    # capabilities by running it: minutes under TCG on a loaded host (>120 s seen)
    out = box.ssh("runuser -u appliance -- virsh -c qemu:///system version",
                  timeout=LIBVIRT_FIRST_SECONDS).stdout
    assert "Running hypervisor: QEMU" in out, out
    assert "default" in box.ssh("virsh -c qemu:///system pool-list --all --name").stdout
    assert box.ssh("virsh -c qemu:///system net-list --all --name").stdout.split() == []
    for socket_unit in ("libvirtd-tls.socket", "libvirtd-tcp.socket"):
        state = box.ssh(f"systemctl is-enabled {socket_unit}", check=False).stdout.strip()
        assert state == "masked", (socket_unit, state)
    owners = box.ssh("ss -Hlnptu 'sport = :53'").stdout
    dns_pid = box.main_pid("appliance-dns")
    assert owners.strip() and all(f"pid={dns_pid}," in line for line in owners.splitlines()), \
        owners
    assert not re.search(r":16514|:16509", box.ssh("ss -Hlnt").stdout)


def compute_records(box):
    """The compute kinds as the store holds them (read as the appliance user)."""
    probe = ("import json; from state import Store; s = Store('/var/lib/appliance'); "
             "print(json.dumps({k: s.collection(k).records() "
             "for k in ('compute_hypervisors', 'compute_nodes')}))")
    return json.loads(box.ssh(f'cd / && runuser -u appliance -- '
                              f'/opt/appliance/venv/bin/python -P -c "{probe}"').stdout)


def test_first_boot_registered_the_hypervisor_and_the_node(box):
    records = compute_records(box)
    [hypervisor] = records["compute_hypervisors"]
    assert hypervisor["driver_spec"]["kind"] == "libvirt"
    assert hypervisor["driver_spec"]["connection_uri"] == "qemu:///system"
    # IN_PROGRESS until the compute daemon has asked libvirt; ERROR would say why it failed
    assert hypervisor["status"] in ("IN_PROGRESS", "ACTIVE"), hypervisor
    [node] = records["compute_nodes"]
    hostname = box.ssh("hostname").stdout.strip()
    assert (node["name"], node["node_type"], node["status"], node["project_id"]) == (
        hostname, "HW", "ACTIVE", ADMIN_PROJECT)
    # the first NIC's address, as the guest sees it (QEMU user networking: 10.0.2.15/24)
    address = box.ssh("ip -4 -o addr show dev eth0").stdout.split()[3]
    assert f"{node['default_network']['ipv4']}/{node['default_network']['mask']}" == address
    mac = box.ssh("cat /sys/class/net/eth0/address").stdout.strip()
    assert node["default_network"]["mac"] == mac
    # the image runs under TCG here: the compute daemon's KVM probe says so, and why
    admin, path = box.admin(), f"/v1/compute/hypervisors/{hypervisor['uuid']}"
    deadline = time.monotonic() + LIBVIRT_FIRST_SECONDS
    probed = admin.get(path).json
    while probed["status"] == "IN_PROGRESS" and time.monotonic() < deadline:
        time.sleep(1)
        probed = admin.get(path).json
    assert probed["status"] == "ACTIVE", probed
    assert probed["accel"] == "tcg" and probed["accel_reason"], probed


def sigkill_and_wait(box, unit, bound):
    """SIGKILL the unit's main process; the seconds until systemd has it active again
    under a new pid (the API's unit is active once it accepts connections)."""
    before = box.main_pid(unit)
    box.ssh(f"kill -KILL {before}")
    started = time.monotonic()
    while True:
        pid = box.main_pid(unit)
        state = box.ssh(f"systemctl is-active {unit}", check=False).stdout.strip()
        if pid not in (0, before) and state == "active":
            return time.monotonic() - started
        assert time.monotonic() - started < bound, (unit, state)
        time.sleep(0.2)


def test_a_daemon_killed_with_sigkill_is_back_within_seconds(box, made):
    seconds = sigkill_and_wait(box, "appliance-dns", RESTART_BOUND_SECONDS)
    box.wait_answer(made["name"], made["address"], timeout=RESTART_BOUND_SECONDS)
    print(f"\nappliance-dns: SIGKILL -> active again in {seconds:.1f} s")
    # The API imports every capability and runs bootstrap before it listens: under TCG
    # on a busy machine that is 30-40 s, so its bound is only "it comes back"
    seconds = sigkill_and_wait(box, "appliance-api", API_BACK_SECONDS)
    assert box.client.get("/v1/health").status == 200
    print(f"appliance-api: SIGKILL -> serving again in {seconds:.1f} s")
    # a process that opened every kind and died, then one that opened them again, wrote
    # nothing: the daemons started on first use still wait for their first write
    for unit in ("appliance-certificates", "appliance-sqldb"):
        assert is_active(box, unit) == "inactive", unit


def test_idle_memory_of_the_appliance_processes(box):
    """Printed, not asserted (the issue's goal is a benchmark: < 150 MB RSS in total)."""
    time.sleep(10)                      # let the restarts above settle
    running = [u for u in APPLIANCE_UNITS if box.ssh(f"systemctl is-active {u}",
                                                     check=False).stdout.strip() == "active"]
    memory = unit_memory(lambda command: box.ssh(command).stdout, running)
    total_rss = sum(rss for rss, _ in memory.values())
    total_pss = sum(pss for _, pss in memory.values())
    assert total_rss > 0 and 0 < total_pss <= total_rss
    print("\nidle memory of the appliance's processes:\n" + "\n".join(
        f"  {unit}: RSS {rss / 1024:.1f} MB, PSS {pss / 1024:.1f} MB"
        for unit, (rss, pss) in memory.items())
        + f"\n  total: RSS {total_rss / 1024:.1f} MB, PSS {total_pss / 1024:.1f} MB"
        + f"\n  not running: {', '.join(sorted(set(APPLIANCE_UNITS) - set(memory))) or '-'}")


def test_a_flood_through_nginx_leaves_a_normal_get_answered(box):
    """Issue 25's goal in the image: while one address holds 1,000 TLS connections that
    trickle a header line every 5 s and 1,000 idle keep-alive ones (through the image's
    nginx on the forwarded 443), an authenticated GET is answered, not kept waiting for
    the flood's deadlines.

    Under TCG the GET alone takes what the emulated CPU makes of it, so what is bounded
    is what the flood adds: the worst flooded answer against the worst of the same GETs
    just before, plus TCG_FLOOD_BOUND_SECONDS (why not the issue's second: there).
    Every host connection reaches the guest from slirp's one address (10.0.2.2): the GET shares the flood's address, so a 429 with
    Retry-After (nginx's rate per address) also counts as answered; the second address
    is shown on the host (tests/firstboot/test_nginx_flood.py)."""
    admin = box.admin()
    path = "/api/core/v1/iam/projects"

    def timed():
        started = time.monotonic()
        resp = admin.get(path)
        took = time.monotonic() - started
        assert resp.status == 200 or (resp.status == 429 and resp.header("Retry-After")
                                      and resp.json["code"] == 429), resp
        return resp.status, took

    baseline = max(timed()[1] for _ in range(5))
    own_descriptors(2 * FLOOD + 300)
    port = box.vm.port(443)

    def connect():
        return box.client.ssl_context.wrap_socket(
            socket.create_connection(("127.0.0.1", port), timeout=60))

    flood = Flood(port, connect=connect)
    try:
        flooded = []
        deadline = time.monotonic() + nginx_site.HEADER_TIMEOUT + 2 * TRICKLE_SECONDS
        while time.monotonic() < deadline:
            flooded.append(timed())
            time.sleep(1)
        worst = max(took for _, took in flooded)
        print(f"\nimage: {len(flooded)} authenticated GETs beside {FLOOD} trickling and "
              f"{FLOOD} idle TLS connections through nginx: worst {worst * 1000:.0f} ms "
              f"(unflooded worst {baseline * 1000:.0f} ms), statuses "
              f"{sorted({status for status, _ in flooded})}, flood answered "
              f"{flood.answered}/{FLOOD}")
        assert worst < baseline + TCG_FLOOD_BOUND_SECONDS, flooded
        flood.stop_trickling()
        held = [s for s in flood.trickling if not closed_by_server(s, 0.01)]
        assert not held, f"{len(held)} trickling connections still open past nginx's deadline"
    finally:
        flood.close()
    assert admin.get("/v1/health").status == 200
    errors = box.ssh("cat /var/log/nginx/error.log", check=False).stdout
    assert "worker_connections are not enough" not in errors
    # the nginx that held it runs the image's nginx.conf and first boot's limits
    served = box.ssh("nginx -T 2>/dev/null").stdout
    connections, nofile = image_worker_limits()
    assert f"worker_connections {connections};" in served
    assert f"worker_rlimit_nofile {nofile};" in served
    assert f"client_header_timeout {nginx_site.HEADER_TIMEOUT}s;" in served
    assert "limit_req zone=appliance_req" in served


# after the idle checks above (on-demand daemons inactive, idle memory): this test's
# instance starts the DBaaS daemon, which then runs until the next boot
def test_a_database_made_with_the_cli_answers_psql_on_the_forwarded_port(box, workdir):
    """docs/boot.md, step 5: logged in with the banner's fingerprint as above, the CLI
    places a DBaaS instance on the appliance's own node (`--node appliance`: the node first
    boot registered under the hostname), adds a user and a database, each with --wait;
    then the host's psql reaches it through the port forwarded to the guest's sqldb_port
    and creates, fills and reads a table. No client network is set: the default covers
    the node's own network, 10.0.2.0/24 under QEMU user networking, where the forwarded
    connections come from (10.0.2.2). The instance is deleted at the end, and the test
    waits until no PostgreSQL runs: tests/image/test_guest_sqldb.py places its own on the
    same node of the same boot, and starts from none."""
    env = cli_env(workdir)
    fingerprint = banner_fingerprint(box)
    run_cli(env, "login", "--endpoint", f"https://127.0.0.1:{box.vm.port(443)}",
            "--fingerprint", fingerprint)
    name, user, database = "boot-psql", "boot_user", "boot_db"
    password = "boot-Pass-" + uuid.uuid4().hex[:8]
    started = time.monotonic()
    instance = json.loads(run_cli(env, "--json", "sqldb", "instances", "add", "-n", name,
                                  "-v", str(NODE_IMAGE_MAJOR), "--node", "appliance", "--wait",
                                  timeout=SQLDB_ADD_SECONDS + 60).stdout)
    try:
        print(f"\nsqldb through the CLI: instance on the appliance's node ACTIVE in "
              f"{time.monotonic() - started:.1f} s")
        assert instance["status"] == "ACTIVE", instance
        assert "10.0.2.0/24" in instance["effective_client_networks"], instance
        made_user = json.loads(run_cli(env, "--json", "sqldb", "users", "add", name, "-n",
                                       user, "--password-stdin", "--wait",
                                       stdin=password + "\n", timeout=660).stdout)
        assert made_user["status"] == "ACTIVE", made_user
        made_db = json.loads(run_cli(env, "--json", "sqldb", "databases", "add", name,
                                     "-n", database, "--owner", user, "--wait",
                                     timeout=660).stdout)
        assert made_db["status"] == "ACTIVE", made_db

        port = box.vm.port(SQLDB_PORT)
        for sql in ("CREATE TABLE boot (id int PRIMARY KEY, note text)",
                    "INSERT INTO boot VALUES (1, 'from the host'), (2, 'through QEMU')"):
            done = host_psql(port, user, password, database, sql)
            assert done.returncode == 0, done.stderr
        done = host_psql(port, user, password, database,
                         "SELECT count(*), min(note) FROM boot")
        assert (done.returncode, done.stdout.strip()) == (0, "2|from the host"), done.stderr
        wrong = host_psql(port, user, password + "x", database, "SELECT 1")
        assert wrong.returncode != 0 and "password authentication failed" in wrong.stderr
    finally:
        run_cli(env, "sqldb", "instances", "delete", name, check=False)
        deadline = time.monotonic() + SQLDB_GONE_SECONDS
        while box.ssh("pgrep -x postgres", check=False).returncode == 0:
            assert time.monotonic() < deadline, "the instance's PostgreSQL still runs"
            time.sleep(2)
    assert run_cli(env, "sqldb", "instances", "show", name, check=False).returncode != 0


def is_active(box, unit):
    return box.ssh(f"systemctl is-active {unit}", check=False).stdout.strip()


@pytest.mark.ends_the_boot
def test_a_reboot_keeps_the_state(box, made):
    host_key = box.ssh("cat /etc/ssh/ssh_host_ed25519_key.pub").stdout
    registered = compute_records(box)
    mark = box.vm.mark()
    # the machine comes back by a cold start at the guest's reset, not QEMU's warm reset
    # through OVMF (restart_at_reset says why); the guest's own reboot is what is tested
    box.vm.restart_at_reset()
    box.ssh("systemctl --no-block reboot", check=False)
    rebooted = Box(box.vm, box.workdir, box.ssh_key, box.known_hosts, since=mark)
    # the restarted QEMU forwards new host ports: the tests after this one (the upgrade)
    # reach the guest through the rebooted box's shell and client
    box.shell, box.client = rebooted.shell, rebooted.client
    assert rebooted.fingerprint == box.fingerprint
    assert_state_kept(rebooted, made)
    # first boot started the on-demand daemons whose kinds hold work (a secret; the
    # repository of the test above), not the mirror: the domain made is not synced
    # (or they ran and already sleep: a minute without a write)
    for unit in ("appliance-delivery", "appliance-builder"):
        assert ran_this_boot(rebooted, unit), unit
    assert is_active(rebooted, "appliance-mirror") == "inactive"
    assert daemon_state(rebooted, "appliance-mirror")["since"] is None
    assert rebooted.ssh("cat /etc/ssh/ssh_host_ed25519_key.pub").stdout == host_key
    # registration is idempotent: the same hypervisor and node records, no new ones
    after = compute_records(rebooted)
    for kind, records in registered.items():
        assert [r["uuid"] for r in after[kind]] == [r["uuid"] for r in records], kind


# ---- the upgrade: a newer build with the old state disk ------------------------------------

@pytest.mark.ends_the_boot
def test_an_upgrade_keeps_the_state_and_migrates_it(box, made, workdir, state_disk):
    # the schema half needs the backup part's appliance/migrations (schema version,
    # migrate(store) run by bootstrap); everything else is checked without it
    migrations = os.path.isdir(os.path.join(ROOT, "appliance", "migrations"))
    old_version = json.loads(box.ssh("cat /etc/appliance/build-info.json").stdout)["version"]
    box.vm.shutdown()
    newer = build_image("appliance", version_suffix="upgrade-test",
                        extra_migrations=TEST_MIGRATIONS if migrations else None)
    assert newer.version != old_version
    # a newer build keeps only its compressed qcow2 (build.py --no-raw), and boots from it
    assert newer.disk == newer.qcow2 and not os.path.exists(newer.raw)
    # fw_cfg gives another password and no SSH key: the kept password must win, and the
    # kept key must reach the new root's authorized_keys. This boot takes the disk's BIOS
    # path (the shared boot took UEFI): the Debian 13 appliance boots both ways in a run
    vm = appliance_vm(newer.disk, workdir, state_disk, {FW_PASSWORD: "not-the-kept-one"},
                      name="new", firmware="bios")
    with vm:
        upgraded = Box(vm, workdir, box.ssh_key, box.known_hosts)
        print(f"\nupgrade boot (BIOS): healthy HTTPS API {upgraded.healthy_seconds:.1f} s "
              f"after QEMU started")
        assert upgraded.ssh("test -d /sys/firmware/efi", check=False).returncode == 1
        assert upgraded.fingerprint == box.fingerprint
        assert_state_kept(upgraded, made)
        wrong = upgraded.client.post(TOKEN_PATH, {"grant_type": "password",
                                                  "username": "admin",
                                                  "password": "not-the-kept-one",
                                                  "scope": ""})
        assert 400 <= wrong.status < 500
        info = json.loads(upgraded.ssh("cat /etc/appliance/build-info.json").stdout)
        assert info["version"] == newer.version
        assert f"appliance {newer.version}" in vm.serial()
        units = upgraded.ssh("systemctl is-active " + " ".join(UNITS), check=False)
        assert units.stdout.split() == ["active"] * len(UNITS), units.stdout
        if not migrations:
            pytest.skip("the state survived the upgrade; the schema version check waits "
                        "for appliance/migrations (merge branch backup)")
        probe = ("from state import Store; from appliance.migrations import latest; "
                 "s = Store('/var/lib/appliance'); "
                 "m = s.collection('upgrade_test_marks').find_one("
                 "uuid='00000000-0000-4000-8000-000000009000'); "
                 "print(s.schema_version(), latest(), m is not None)")
        out = upgraded.ssh("runuser -u appliance -- /opt/appliance/venv/bin/python -P -c "
                           f"\"{probe}\"").stdout.split()
        assert out == [str(MARKER_VERSION), str(MARKER_VERSION), "True"], out
