"""The appliance image, booted under QEMU (TCG), seen from the host as a user sees it.

One VM boots the built image with a blank second disk for the state, the admin password
and root's SSH key in fw_cfg, and ports 443, 53 (UDP and TCP) and 22 forwarded on
127.0.0.1. DNS over UDP cannot be asked from the host: with `restrict=on` libslirp drops
every UDP datagram the guest sends except DHCP and TFTP (udp_input: `if
(slirp->restricted) goto bad;`), forwarded replies included; the guest is seen to answer
(its UDP counters move) but the reply never leaves QEMU. So DNS is asked from the host
over TCP, and over UDP from inside the guest at its eth0 address. Most checks share that boot (each boot costs 20-60 s under TCG); then it is
rebooted in place, and finally a newer build boots with the same state disk (the upgrade).
The tests run in file order and build on each other's records (`made`).

Figures (boot to a healthy API, idle memory, restart after SIGKILL) are printed with
`-s`; docs/appliance-image.md quotes them. Bounds asserted are the issue's "within
seconds" for a restart (generous: 60 s on a busy machine under TCG; 4-15 s measured) and the timeouts.
"""

import hashlib
import json
import os
import re
import ssl
import subprocess
import time
import uuid

import dns.exception
import dns.message
import dns.query
import dns.rcode
import pytest

from appliance.iam.builtin import ADMIN_PROJECT
from daemons import DAEMONS
from tests.apiserver import TOKEN_PATH, Client
from tests.image.qemu import VM, blank_disk, build_image, require_root, unit_memory

# a cold image build alone passes the suite's 300 s per test (it happens in the first
# test's set-up): the bound here covers build, boots and upgrade
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEST_MIGRATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations")
MARKER_VERSION = 9000           # tests/image/migrations/9000_upgrade_test_marker.py
PASSWORD = "boot-test-" + uuid.uuid4().hex[:12]
FW_PASSWORD = "opt/appliance/admin-password"
FW_SSH_KEY = "opt/appliance/ssh-key"
DAEMON_UNITS = ["appliance-api"] + [f"appliance-{name}" for name in DAEMONS]
UNITS = ["appliance-firstboot", *DAEMON_UNITS, "nginx", "ssh"]
FINGERPRINT = re.compile(r"TLS certificate SHA-256:\s+((?:[0-9A-F]{2}:){31}[0-9A-F]{2})")
BANNER_SECONDS = 900            # a cold first boot on a busy 2-core machine under TCG
HEALTHY_SECONDS = 300
RESTART_BOUND_SECONDS = 60      # "back within seconds": RestartSec=1 + a Python start on TCG, on a busy host
API_BACK_SECONDS = 300          # the API's start under TCG (see the SIGKILL test)
LIBVIRT_FIRST_SECONDS = 900     # libvirtd's first start probes QEMU (see the libvirt test)


# ---- helpers ------------------------------------------------------------------------------

def served_fingerprint(port):
    pem = ssl.get_server_certificate(("127.0.0.1", port), timeout=30)
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest(), pem


def pinned_client(vm, workdir, expected_fingerprint):
    """An HTTPS client that trusts exactly the certificate whose fingerprint the console
    showed (hostname checks off: the certificate names the guest, not 127.0.0.1:<port>)."""
    digest, pem = served_fingerprint(vm.port(443))
    assert digest.upper() == expected_fingerprint.replace(":", "")
    cafile = os.path.join(workdir, f"{vm.name}-cert.pem")
    with open(cafile, "w") as f:
        f.write(pem)
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.check_hostname = False
    return Client("127.0.0.1", vm.port(443), ssl_context=ctx)


class Box:
    """A booted appliance: its VM, the fingerprint from its console, a pinned client."""

    def __init__(self, vm, workdir, ssh_key, known_hosts, since=0):
        self.vm, self.workdir, self.ssh_key, self.known_hosts = vm, workdir, ssh_key, known_hosts
        self.banner_seconds = vm.wait_for("TLS certificate SHA-256:", BANNER_SECONDS,
                                          since=since)
        time.sleep(1)       # the banner's line may still be on its way to the log
        self.fingerprint = FINGERPRINT.search(vm.serial(since)).group(1)
        self.healthy_seconds = self.wait_healthy()
        self.client = pinned_client(vm, workdir, self.fingerprint)

    def wait_healthy(self):
        """Seconds from QEMU's start to the first 200 of /v1/health over HTTPS."""
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        probe = Client("127.0.0.1", self.vm.port(443), ssl_context=ctx)
        deadline = time.monotonic() + HEALTHY_SECONDS
        while True:
            try:
                if probe.get("/v1/health").status == 200:
                    return time.monotonic() - self.vm.started_at
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"no healthy API in {HEALTHY_SECONDS} s; console:\n"
                                     f"{self.vm.tail()}")
            time.sleep(1)

    def ssh(self, command, check=True, timeout=120):
        """Run `command` as root on the guest. The host key is pinned under one alias in a
        known_hosts of this test: a box that changed its key (new root, new port) fails."""
        res = subprocess.run(
            ["ssh", "-i", self.ssh_key, "-p", str(self.vm.port(22)),
             "-o", "BatchMode=yes", "-o", "ConnectTimeout=20", "-o", "LogLevel=ERROR",
             "-o", "HostKeyAlias=appliance-under-test",
             "-o", f"UserKnownHostsFile={self.known_hosts}",
             "-o", "StrictHostKeyChecking=accept-new",
             "root@127.0.0.1", command],
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check:
            assert res.returncode == 0, f"{command!r}: {res.returncode}\n{res.stderr}"
        return res

    def admin(self, password=PASSWORD):
        resp = self.client.post(TOKEN_PATH, {"grant_type": "password", "username": "admin",
                                             "password": password, "scope": ""})
        assert resp.status == 200, resp
        return self.client.with_token(resp.json["access_token"])

    def dns(self, name, rtype="A"):
        """Ask the guest's port 53 over TCP from the host (see the docstring for UDP)."""
        query = dns.message.make_query(name, rtype)
        return dns.query.tcp(query, "127.0.0.1", port=self.vm.port(53, "tcp"), timeout=5)

    def wait_answer(self, name, address, timeout=120):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = self.dns(name)
                if any(address in str(rr) for rr in last.answer):
                    return last
            # EOF: QEMU accepts on the host side and closes while nothing listens yet
            except (dns.exception.DNSException, OSError, EOFError) as e:
                last = e
            time.sleep(0.5)
        raise AssertionError(f"{name} not answered with {address} in {timeout} s: {last}")

    def guest_udp_answer(self, name):
        """The A records the DNS server gives over UDP at the guest's eth0 address, asked
        inside the guest with the venv's dnslib."""
        probe = ("import socket, fcntl, struct; from dnslib import DNSRecord; "
                 "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5); "
                 "a = socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, "
                 "struct.pack('256s', b'eth0'))[20:24]); "
                 f"s.sendto(DNSRecord.question('{name}', 'A').pack(), (a, 53)); "
                 "print(' '.join(str(r.rdata) for r in DNSRecord.parse(s.recv(4096)).rr))")
        return self.ssh(f'/opt/appliance/venv/bin/python -P -c "{probe}"').stdout.split()

    def main_pid(self, unit):
        return int(self.ssh(f"systemctl show -p MainPID --value {unit}").stdout.strip())


def listening_tcp(box):
    """{(address, port)} of the guest's listening TCP sockets, from /proc/net/tcp (the
    image need not have ss or netstat). IPv6 addresses are kept as their hex."""
    found = set()
    for line in box.ssh("cat /proc/net/tcp /proc/net/tcp6").stdout.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[3] != "0A":          # 0A: LISTEN
            continue
        address, port = fields[1].split(":")
        if len(address) == 8:
            address = ".".join(str(int(address[i:i + 2], 16)) for i in (6, 4, 2, 0))
        found.add((address, int(port, 16)))
    return found


def wait_status(admin, path, wanted, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        record = admin.get(path).json
        if record["status"] == wanted:
            return record
        assert time.monotonic() < deadline, f"{path} is {record['status']}, not {wanted}"
        time.sleep(0.5)


# ---- fixtures -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("appliance-boot"))


@pytest.fixture(scope="module")
def image():
    require_root()
    return build_image("appliance")


@pytest.fixture(scope="module")
def ssh_key(workdir):
    path = os.path.join(workdir, "id_ed25519")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "boot-test",
                    "-f", path], check=True)
    return path


@pytest.fixture(scope="module")
def state_disk(workdir):
    """The state on a second disk: it outlives the root disk, as an upgrade needs."""
    return blank_disk(os.path.join(workdir, "state.qcow2"), "2G")


@pytest.fixture(scope="module")
def box(image, workdir, ssh_key, state_disk):
    with open(ssh_key + ".pub") as f:
        public = f.read().strip()
    vm = VM(image.raw, workdir, tcp=[443, 53, 22], udp=[53], extra_disks=[state_disk],
            fw_cfg={FW_PASSWORD: PASSWORD, FW_SSH_KEY: public}, name="old")
    with vm:
        b = Box(vm, workdir, ssh_key, os.path.join(workdir, "known_hosts"))
        print(f"\nfirst boot: banner {b.banner_seconds:.1f} s, healthy HTTPS API "
              f"{b.healthy_seconds:.1f} s after QEMU started ({image})")
        yield b


@pytest.fixture(scope="module")
def made(box):
    """What later boots must still show: a secret (its value) and a DNS record."""
    admin = box.admin()
    value = "boot-test-value-" + uuid.uuid4().hex
    secret = admin.post("/v1/secret/secrets", {
        "name": "boot-test", "project_id": ADMIN_PROJECT, "constructor": {"kind": "plain"},
        "value": value})
    assert secret.status == 201, secret
    domain = admin.post("/v1/dns/domains", {"name": "boot.test",
                                            "project_id": ADMIN_PROJECT})
    assert domain.status == 201, domain
    record = admin.post(f"/v1/dns/domains/{domain.json['uuid']}/records",
                        {"type": "A", "record": {"kind": "A", "name": "www",
                                                 "address": "10.77.0.7"}})
    assert record.status == 201, record
    return {"secret": secret.json["uuid"], "value": value, "name": "www.boot.test",
            "address": "10.77.0.7"}


def assert_state_kept(box, made, password=PASSWORD):
    admin = box.admin(password)
    secret = admin.get(f"/v1/secret/secrets/{made['secret']}")
    assert secret.status == 200, secret
    assert secret.json["value"] == made["value"]
    assert secret.json["status"] == "ACTIVE"
    box.wait_answer(made["name"], made["address"])


# ---- the first boot -----------------------------------------------------------------------

def test_https_health_is_200_with_the_certificate_the_console_shows(box):
    resp = box.client.get("/v1/health")          # the client pins the console's fingerprint
    assert resp.status == 200, resp
    for prefix in ("/api/core", "/api/dbaas"):
        assert box.client.get(prefix + "/v1/health").status == 200
    banner = box.vm.serial()
    assert "https://" in banner and "/var/lib/appliance/admin-password" in banner


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


def test_every_unit_is_active_and_hardened(box):
    res = box.ssh("systemctl is-active " + " ".join(UNITS), check=False)
    assert res.stdout.split() == ["active"] * len(UNITS), res.stdout
    assert box.ssh("systemctl is-active appliance.target").stdout.strip() == "active"
    failed = box.ssh("systemctl list-units --failed --plain --no-legend").stdout
    assert "appliance" not in failed and "nginx" not in failed, failed
    for unit in DAEMON_UNITS:
        user = box.ssh(f"stat -c %U /proc/{box.main_pid(unit)}").stdout.strip()
        assert user == "appliance", unit
        assert box.ssh(f"systemctl show -p NRestarts --value {unit}").stdout.strip() == "0"
    # DNS on port 53 as the appliance user: its one capability is CAP_NET_BIND_SERVICE
    caps = box.ssh(f"grep CapEff /proc/{box.main_pid('appliance-dns')}/status").stdout
    assert int(caps.split()[1], 16) == 1 << 10, caps
    # nothing but nginx on 443, the API on loopback only
    listening = listening_tcp(box)
    assert ("127.0.0.1", 11010) in listening, listening
    assert {port for _, port in listening} & {80, 11010} == {11010}, listening
    assert [a for a, port in listening if port == 11010] == ["127.0.0.1"], listening


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


def test_idle_memory_of_the_appliance_processes(box):
    """Printed, not asserted (the issue's goal is a benchmark: < 150 MB RSS in total)."""
    time.sleep(10)                      # let the restarts above settle
    memory = unit_memory(lambda command: box.ssh(command).stdout, DAEMON_UNITS)
    total_rss = sum(rss for rss, _ in memory.values())
    total_pss = sum(pss for _, pss in memory.values())
    assert total_rss > 0 and 0 < total_pss <= total_rss
    print("\nidle memory of the appliance's processes:\n" + "\n".join(
        f"  {unit}: RSS {rss / 1024:.1f} MB, PSS {pss / 1024:.1f} MB"
        for unit, (rss, pss) in memory.items())
        + f"\n  total: RSS {total_rss / 1024:.1f} MB, PSS {total_pss / 1024:.1f} MB")


def test_a_reboot_keeps_the_state(box, made):
    host_key = box.ssh("cat /etc/ssh/ssh_host_ed25519_key.pub").stdout
    registered = compute_records(box)
    mark = box.vm.mark()
    box.ssh("systemctl --no-block reboot", check=False)
    rebooted = Box(box.vm, box.workdir, box.ssh_key, box.known_hosts, since=mark)
    assert rebooted.fingerprint == box.fingerprint
    assert_state_kept(rebooted, made)
    assert rebooted.ssh("cat /etc/ssh/ssh_host_ed25519_key.pub").stdout == host_key
    # registration is idempotent: the same hypervisor and node records, no new ones
    after = compute_records(rebooted)
    for kind, records in registered.items():
        assert [r["uuid"] for r in after[kind]] == [r["uuid"] for r in records], kind
    box.client = rebooted.client


# ---- the upgrade: a newer build with the old state disk ------------------------------------

def test_an_upgrade_keeps_the_state_and_migrates_it(box, made, workdir, state_disk):
    # the schema half needs the backup part's appliance/migrations (schema version,
    # migrate(store) run by bootstrap); everything else is checked without it
    migrations = os.path.isdir(os.path.join(ROOT, "appliance", "migrations"))
    old_version = json.loads(box.ssh("cat /etc/appliance/build-info.json").stdout)["version"]
    box.vm.shutdown()
    newer = build_image("appliance", version_suffix="upgrade-test",
                        extra_migrations=TEST_MIGRATIONS if migrations else None)
    assert newer.version != old_version
    # fw_cfg gives another password and no SSH key: the kept password must win, and the
    # kept key must reach the new root's authorized_keys
    vm = VM(newer.raw, workdir, tcp=[443, 53, 22], udp=[53], extra_disks=[state_disk],
            fw_cfg={FW_PASSWORD: "not-the-kept-one"}, name="new")
    with vm:
        upgraded = Box(vm, workdir, box.ssh_key, box.known_hosts)
        print(f"\nupgrade boot: healthy HTTPS API {upgraded.healthy_seconds:.1f} s "
              f"after QEMU started")
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
