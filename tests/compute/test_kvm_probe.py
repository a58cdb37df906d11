"""The KVM probe (appliance/compute/kvm_probe.py) leaves nothing behind and reports what runs.

Two hypervisors: libvirt's test:///default for the logic, and a real libvirtd (QEMU) in a
test network namespace (tests/compute/netns.py, root only) for what the test driver cannot
show: a guest's firmware really executing, AUTODESTROY when a killed process's connection
closes. The test driver refuses the AUTODESTROY flag and has no KVM: `KvmOnTestDriver`
stands in for those two (and only those), recording the flags it was given.
"""

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

libvirt = pytest.importorskip("libvirt")

from appliance.compute import kvm_probe  # noqa: E402
from appliance.compute.hypervisors import discover  # noqa: E402
from appliance.compute.kvm_probe import PREFIX, probe_name  # noqa: E402
from tests.compute import netns as netns_mod  # noqa: E402

KVM_CAPS = "<capabilities><guest><arch><domain type='qemu'/><domain type='kvm'/></arch></guest></capabilities>"


def leftover_xml(name):
    return (f"<domain type='test'><name>{name}</name><memory unit='MiB'>32</memory>"
            "<vcpu>1</vcpu><os><type arch='x86_64'>hvm</type></os><devices/></domain>")


def dead_pid():
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def probe_domains(conn):
    return sorted(d.name() for d in conn.listAllDomains(0) if d.name().startswith(PREFIX))


@pytest.fixture
def conn():
    conn = libvirt.open("test:///default")
    yield conn
    for dom in conn.listAllDomains(0):      # test:///default is shared by the process
        if dom.name().startswith(PREFIX):
            persistent = dom.isPersistent()
            if dom.isActive():
                dom.destroy()
            if persistent:
                dom.undefine()
    conn.close()


class KvmOnTestDriver:
    """The test driver seen as a KVM host: capabilities offer 'kvm', a 'kvm' domain is
    made as a 'test' one, and the AUTODESTROY flag (refused by the test driver) is
    recorded and dropped. `peek` replaces what the guest's memory reads as."""

    def __init__(self, conn, peek=None):
        self.conn = conn
        self.flags = []
        self.peek = peek

    def getCapabilities(self):
        return KVM_CAPS

    def listAllDomains(self, flags):
        return self.conn.listAllDomains(flags)

    def createXML(self, xml, flags):
        self.flags.append(flags)
        dom = self.conn.createXML(xml.replace("type='kvm'", "type='test'"),
                                  flags & ~libvirt.VIR_DOMAIN_START_AUTODESTROY)
        return Peeked(dom, self.peek) if self.peek else dom


class Peeked:
    def __init__(self, dom, peek):
        self.dom, self.peek = dom, peek

    def __getattr__(self, name):
        return getattr(self.dom, name)

    def memoryPeek(self, start, size, flags):
        return self.peek(start, size)


def test_leftover_probe_domains_of_dead_processes_are_removed_before_probing(conn):
    host = socket.gethostname()
    gone = dead_pid()
    dead_running = probe_name(gone, host)                  # a running leftover (transient)
    dead_defined = probe_name(dead_pid(), host)
    old_form = f"{PREFIX}{gone}"                              # an older daemon's name
    mine = probe_name(os.getpid(), host)                      # this process is alive
    elsewhere = probe_name(gone, "another-host")              # not ours to judge
    conn.createXML(leftover_xml(dead_running), 0)
    conn.defineXML(leftover_xml(dead_defined)).create()      # persistent and running
    conn.defineXML(leftover_xml(old_form))                   # persistent, off
    conn.createXML(leftover_xml(mine), 0)
    conn.createXML(leftover_xml(elsewhere), 0)

    assert kvm_probe.probe_accel(conn) == (None, "not a QEMU hypervisor")

    assert probe_domains(conn) == sorted([mine, elsewhere])
    assert not [n for n in conn.listDefinedDomains() if n.startswith(PREFIX)]


def test_a_probe_uses_a_transient_autodestroy_domain_and_leaves_nothing(conn):
    kvm = KvmOnTestDriver(conn)        # the test driver's memory reads non-zero: "ran"

    accel, reason = kvm_probe.probe_accel(kvm)

    assert accel == "kvm", reason
    assert "ran its firmware" in reason
    assert kvm.flags == [libvirt.VIR_DOMAIN_START_AUTODESTROY]
    assert probe_domains(conn) == []
    assert not [n for n in conn.listDefinedDomains() if n.startswith(PREFIX)]


class LocalKvmOnTestDriver(KvmOnTestDriver):
    """As KvmOnTestDriver, on this machine's own libvirt (qemu:///system)."""

    def getURI(self):
        return "qemu:///system"


def test_on_a_machine_emulated_by_qemu_no_kvm_probe_is_started(conn):
    """A TCG guest offers emulated AMD-V (qemu64 has svm): the guest's libvirt offers a
    kvm domain type, and a probe guest took a Debian 13 appliance's kernel down. The
    machine's own virtualization (systemd-detect-virt's word, given here) is asked first."""
    local = LocalKvmOnTestDriver(conn)
    accel, reason = kvm_probe.probe_accel(local, own_virt=lambda: "qemu")
    assert accel == "tcg" and "itself a QEMU guest without KVM" in reason
    assert local.flags == []            # no probe domain was made
    # under KVM, on bare metal, or a remote hypervisor: the probe runs as before
    for virt in ("kvm", "none", None):
        assert kvm_probe.probe_accel(LocalKvmOnTestDriver(conn), own_virt=lambda: virt)[0] \
            == "kvm"
    remote = KvmOnTestDriver(conn)      # no getURI: not this machine
    assert kvm_probe.probe_accel(remote, own_virt=lambda: "qemu")[0] == "kvm"
    assert remote.flags == [libvirt.VIR_DOMAIN_START_AUTODESTROY]


def test_a_guest_that_executes_nothing_is_tcg_and_is_destroyed(conn):
    kvm = KvmOnTestDriver(conn, peek=lambda start, size: bytes(size))   # an idle, hung guest

    works, reason = kvm_probe.guest_executes(kvm, "kvm", seconds=0.3)

    assert not works
    assert "executed nothing" in reason
    assert probe_domains(conn) == []


def test_an_interrupted_probe_destroys_its_domain(conn):
    class Interrupted(BaseException):
        pass

    def interrupt(start, size):
        raise Interrupted()
    kvm = KvmOnTestDriver(conn, peek=interrupt)

    with pytest.raises(Interrupted):
        kvm_probe.guest_executes(kvm, "kvm")

    assert probe_domains(conn) == []


def test_a_probe_past_the_callers_time_is_tcg_and_its_domain_still_goes(conn):
    inside = threading.Event()

    def hung(start, size):
        inside.set()
        return bytes(size)
    kvm = KvmOnTestDriver(conn, peek=hung)

    accel, reason = kvm_probe.probe_accel(kvm, call_seconds=0.2,
                                          probe=lambda c, t, stop: kvm_probe.guest_executes(
                                              c, t, seconds=3600, stop=stop))

    assert (accel, "did not return" in reason) == ("tcg", True)
    assert inside.is_set()
    deadline = time.monotonic() + 30      # the abandoned thread sees `stop` and destroys
    while probe_domains(conn) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert probe_domains(conn) == []


# -- a real libvirtd (QEMU) -------------------------------------------------------------

@pytest.fixture(scope="module")
def ns():
    netns_mod.require()
    with netns_mod.Netns() as ns:
        yield ns


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_real_qemu_the_probe_sees_a_guest_execute_and_reports_tcg_without_kvm(ns):
    conn = ns.connect()
    try:
        works, reason = kvm_probe.guest_executes(conn, "qemu")
        assert works, reason                       # TCG runs SeaBIOS: the probe sees it
        # the namespace's libvirtd has no usable /dev/kvm (netns.py covers it)
        accel, why = kvm_probe.probe_accel(conn)
        assert accel == "tcg", why
        # what the daemon writes on the hypervisor's record: the accel and its why
        found = discover(conn, ns.uri, {"storage_pool": netns_mod.POOL}, {}, {})
        assert (found["accel"], found["accel_reason"]) == ("tcg", why)
        assert probe_domains(conn) == []
        assert not [n for n in conn.listDefinedDomains() if n.startswith(PREFIX)]
    finally:
        conn.close()


KILLED_PROBE = """
import sys, time, libvirt
from appliance.compute.kvm_probe import probe_name, probe_xml
conn = libvirt.open(sys.argv[1])
conn.createXML(probe_xml(probe_name(), "qemu"), libvirt.VIR_DOMAIN_START_AUTODESTROY)
print(probe_name(), flush=True)
time.sleep(3600)
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_real_qemu_a_probe_killed_mid_way_leaves_no_domain(ns):
    proc = subprocess.Popen([sys.executable, "-c", KILLED_PROBE, ns.uri],
                            stdout=subprocess.PIPE, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    try:
        name = proc.stdout.readline().strip()
        conn = ns.connect()
        try:
            assert name in probe_domains(conn)          # the probe's guest runs
            proc.kill()                                  # SIGKILL: no finally runs
            proc.wait()
            deadline = time.monotonic() + 60
            while name in probe_domains(conn) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert name not in probe_domains(conn)
            assert name not in conn.listDefinedDomains()
        finally:
            conn.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
