"""A booted appliance seen from the host, shared by the tests of tests/image: the Box
(its VM, the certificate fingerprint its console shows, an HTTPS client pinned to it, SSH
as root into the guest), booted once per test session by the `box` fixture of
tests/image/conftest.py. Every test that needs a running appliance (the boot test, the
real-systemd tests of issue 14) takes `box`, so CI pays for one boot of the image."""

import hashlib
import os
import re
import ssl
import subprocess
import sys
import time
import uuid

import dns.exception
import dns.message
import dns.query

from appliance.config import DEFAULTS
from tests.apiserver import TOKEN_PATH, Client
from tests.image.qemu import VM

PASSWORD = "boot-test-" + uuid.uuid4().hex[:12]
FW_PASSWORD = "opt/appliance/admin-password"
FW_SSH_KEY = "opt/appliance/ssh-key"
# the banner's line; the fingerprint in the form `appliance login --fingerprint` takes
FINGERPRINT = re.compile(r"TLS certificate:\s+(SHA256:(?:[0-9A-F]{2}:){31}[0-9A-F]{2})")
BANNER_SECONDS = 900            # a cold first boot on a busy 2-core machine under TCG
HEALTHY_SECONDS = 300
SSH_ATTEMPTS, SSH_RETRY_SECONDS = 6, 5
# One SSH connection per boot, reused by every command (OpenSSH's connection sharing):
# a new connection's key exchange and login cost ~3 s of the TCG guest's emulated CPU,
# and the image tests run hundreds of commands. The shared connection ends by itself
# after CONTROL_PERSIST idle seconds, or when the guest stops answering its keep-alives.
CONTROL_PERSIST, SERVER_ALIVE = 300, 30
# ssh's words for a connection that failed before the key exchange (nothing ran)
PRE_LOGIN = ("kex_exchange_identification", "Connection refused", "Connection timed out",
             "timed out during banner exchange")


# the guest ports the appliance's VM forwards to 127.0.0.1: the API, DNS (over TCP: with
# restrict=on QEMU drops every UDP datagram the guest sends), SSH, and PostgreSQL of a DBaaS
# instance placed on the appliance's own node (the setting sqldb_port: every instance
# listens there; the image keeps the default)
SQLDB_PORT = DEFAULTS["sqldb_port"]
FORWARDED_TCP = (443, 53, 22, SQLDB_PORT)


def appliance_vm(disk, workdir, state_disk, fw_cfg, firmware="uefi", **options):
    """The QEMU of an appliance: its root disk, the state disk, fw_cfg entries and the
    forwards of FORWARDED_TCP, booted by UEFI (what machines bought today do; the node
    image's boot test takes the BIOS path of the same kind of disk). docs/boot.md's line is
    this VM's command (tests/image/test_boot_doc.py compares them)."""
    return VM(disk, workdir, tcp=list(FORWARDED_TCP), extra_disks=[state_disk], fw_cfg=fw_cfg,
              firmware=firmware, **options)


def served_fingerprint(port):
    pem = ssl.get_server_certificate(("127.0.0.1", port), timeout=30)
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest(), pem


def pinned_client(vm, workdir, expected_fingerprint):
    """An HTTPS client that trusts exactly the certificate whose fingerprint the console
    showed (hostname checks off: the certificate names the guest, not 127.0.0.1:<port>)."""
    digest, pem = served_fingerprint(vm.port(443))
    assert digest.upper() == expected_fingerprint.removeprefix("SHA256:").replace(":", "")
    cafile = os.path.join(workdir, f"{vm.name}-cert.pem")
    with open(cafile, "w") as f:
        f.write(pem)
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.check_hostname = False
    return Client("127.0.0.1", vm.port(443), ssl_context=ctx)


class GuestShell:
    """Root's shell on a guest, over SSH to its forwarded port: one connection shared by
    every command, the host key pinned under one alias in `known_hosts` (a guest that
    changed its key, a new root, fails). The image tests' Box and bench_boot both use it."""

    def __init__(self, port, ssh_key, known_hosts, workdir, attempts=SSH_ATTEMPTS):
        self.port, self.ssh_key, self.known_hosts = port, ssh_key, known_hosts
        self.attempts = attempts
        # by the forwarded port: each VM of the workdir has its own. Short: ssh binds the
        # path plus 17 characters, and a socket's path holds at most 107
        self.control_path = os.path.join(workdir, f"ssh-{port}")

    def run(self, command, check=True, timeout=120):
        """Run `command` as root on the guest. ssh's own failure to connect (exit 255
        before the key exchange: sshd not up yet, or a TCG guest on a loaded host
        answering late) is tried again up to `attempts` times; anything later (a refused
        key, a changed host key, a connection closed once the command may have run, as by
        a reboot) is not."""
        for attempt in range(self.attempts):
            res = subprocess.run(self._argv() + [command], capture_output=True, text=True,
                                 timeout=timeout, stdin=subprocess.DEVNULL)
            if res.returncode != 255 or not any(word in res.stderr for word in PRE_LOGIN):
                break
            print(f"ssh to the guest failed to connect ({res.stderr.strip()[-200:]}); "
                  f"again in {SSH_RETRY_SECONDS} s", file=sys.stderr)
            time.sleep(SSH_RETRY_SECONDS)
        if check:
            assert res.returncode == 0, f"{command!r}: {res.returncode}\n{res.stderr}"
        return res

    def close(self):
        """End the shared connection (a new boot of the same VM must not reuse it)."""
        subprocess.run(self._argv("-O", "exit"), capture_output=True, timeout=30,
                       stdin=subprocess.DEVNULL)

    def _argv(self, *options):
        return ["ssh", *options, "-i", self.ssh_key, "-p", str(self.port),
                "-o", "BatchMode=yes", "-o", "ConnectTimeout=20", "-o", "LogLevel=ERROR",
                "-o", "HostKeyAlias=appliance-under-test",
                "-o", f"UserKnownHostsFile={self.known_hosts}",
                "-o", "StrictHostKeyChecking=accept-new",
                "-o", "ControlMaster=auto", "-o", f"ControlPath={self.control_path}",
                "-o", f"ControlPersist={CONTROL_PERSIST}",
                "-o", f"ServerAliveInterval={SERVER_ALIVE}", "root@127.0.0.1"]


class Box:
    """A booted appliance: its VM, the fingerprint from its console, a pinned client."""

    def __init__(self, vm, workdir, ssh_key, known_hosts, since=0):
        self.vm, self.workdir, self.ssh_key, self.known_hosts = vm, workdir, ssh_key, known_hosts
        # a kernel panic under TCG (qemu.GuestPanicked) is the emulator's, not the boot's:
        # the guest is started once more, from its console's start
        started_at = vm.started_at
        self.banner_seconds = vm.wait_for("TLS certificate:", BANNER_SECONDS,
                                          since=since, restarts_after_panic=1)
        console_start = since if vm.started_at == started_at else 0   # started again
        time.sleep(1)       # the banner's line may still be on its way to the log
        self.fingerprint = FINGERPRINT.search(vm.serial(console_start)).group(1)
        # after the wait: a restart takes new host ports
        self.shell = GuestShell(vm.port(22), ssh_key, known_hosts, workdir)
        self.healthy_seconds = self.wait_healthy()
        self.client = pinned_client(vm, workdir, self.fingerprint)
        # a reboot of the same VM must not reuse the last boot's connection
        self.shell.close()

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
        """Run `command` as root on the guest (GuestShell.run)."""
        return self.shell.run(command, check=check, timeout=timeout)

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

    def show(self, unit, *properties):
        """{property: value} of `systemctl show` for a unit of the guest (systemd's own view:
        After=/Before= with what drop-ins and defaults add, ExecMainStatus, ...)."""
        out = self.ssh(f"systemctl show {unit} " + " ".join(f"-p {p}" for p in properties))
        return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)

    def main_pid(self, unit):
        return int(self.ssh(f"systemctl show -p MainPID --value {unit}").stdout.strip())


def os_release(box):
    """The guest's /etc/os-release as a dict (quotes taken off)."""
    lines = box.ssh("cat /etc/os-release").stdout.splitlines()
    return {k: v.strip('"') for k, v in (ln.split("=", 1) for ln in lines if "=" in ln)}


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


