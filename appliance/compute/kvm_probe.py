"""Whether a KVM guest really runs on a hypervisor, asked of the hypervisor itself.

Why a probe, not a look at /dev/kvm or at libvirt's capabilities: both can say "kvm" while
guests hang or abort on it (the build host; a TCG guest that advertises nested
virtualisation). So a tiny guest is started and counts only once its firmware has visibly
run: SeaBIOS's first act is to write the interrupt vector table at guest-physical address
0, which starts zeroed; virDomainMemoryPeek reads it back. No disk, no file on the
hypervisor, nothing to upload: it works on a remote libvirt as well.

Why it must leave nothing: a leftover probe domain once held a poweroff for 300 s
(libvirt-guests waits for every running domain). So the domain is
- transient (createXML): nothing is ever written to libvirt's configuration;
- started with VIR_DOMAIN_START_AUTODESTROY: libvirtd destroys it when the connection that
  made it closes, which happens when the process dies, SIGKILL included;
- destroyed in `finally`, and at the caller's timeout the probe is told to stop;
- named `appliance-kvm-probe-<host>-<pid>`, and before each probe any such domain whose
  process is gone (same host, dead pid; or the older `appliance-kvm-probe-<pid>` form) is
  destroyed and undefined: left by an older daemon, or by a libvirtd that lost the
  connection's end.
"""

import logging
import os
import socket
import subprocess
import threading
import time

try:
    import libvirt
except ImportError:     # the API server imports nothing of this; only the daemon needs it
    libvirt = None

from appliance.processes import alive

log = logging.getLogger("appliance.compute")

PREFIX = "appliance-kvm-probe-"
# SeaBIOS writes its vector table within a fraction of a second under KVM (~0.2 s under TCG
# here); a guest that has not done so in this time does not run
PROBE_SECONDS = 10.0
# the caller gives up on a probe stuck in libvirt (createXML can take ~50 s while libvirt
# re-probes QEMU on a broken /dev/kvm): it then counts as no KVM
CALL_SECONDS = 30.0
IVT_BYTES = 1024


def probe_name(pid=None, host=None):
    return f"{PREFIX}{host or socket.gethostname()}-{pid or os.getpid()}"


def _owner(name):
    """(host or None, pid) of a probe domain's name, None when the name is not one."""
    if not name.startswith(PREFIX):
        return None
    host, _sep, pid = name[len(PREFIX):].rpartition("-")
    if not pid.isdigit():
        return None
    return host or None, int(pid)


def clean_leftovers(conn, host=None):
    """Destroy (and undefine, if persistent) the probe domains of this host whose process
    is gone; names of what was removed. Another host's probes are left to that host: a pid
    means nothing here."""
    host = host or socket.gethostname()
    removed = []
    for dom in conn.listAllDomains(0):
        owner = _owner(dom.name())
        if owner is None or owner[0] not in (None, host) or alive(owner[1]):
            continue
        try:
            persistent = dom.isPersistent()     # a transient one is gone once destroyed
            if dom.isActive():
                dom.destroy()
            if persistent:
                dom.undefine()
        except libvirt.libvirtError as e:
            log.warning("leftover KVM probe domain %s could not be removed: %s",
                        dom.name(), _reason(e))
            continue
        log.warning("removed the leftover KVM probe domain %s (its process %d is gone)",
                    dom.name(), owner[1])
        removed.append(dom.name())
    return removed


def probe_xml(name, domain_type):
    # no disk and no NIC: SeaBIOS finds nothing to boot and waits; a reset or a crash
    # ends the domain rather than looping
    return (f"<domain type='{domain_type}'><name>{name}</name>"
            "<memory unit='MiB'>32</memory><vcpu>1</vcpu>"
            "<os><type arch='x86_64'>hvm</type></os>"
            "<on_poweroff>destroy</on_poweroff><on_reboot>destroy</on_reboot>"
            "<on_crash>destroy</on_crash>"
            "<devices><memballoon model='none'/></devices></domain>")


def guest_executes(conn, domain_type, seconds=PROBE_SECONDS, stop=None,
                   flags=None):
    """(True, how) once a transient `domain_type` guest has run its firmware, else
    (False, why). The domain is gone when this returns, whatever happened. `stop` (an
    Event) ends the wait early, as a failure."""
    flags = libvirt.VIR_DOMAIN_START_AUTODESTROY if flags is None else flags
    name = probe_name()
    dom = None
    try:
        dom = conn.createXML(probe_xml(name, domain_type), flags)
        # from here: creating can take long on its own (libvirt probing QEMU, once)
        started = time.monotonic()
        while True:
            state = dom.state()[0]
            if state != libvirt.VIR_DOMAIN_RUNNING:
                return False, f"the {domain_type} guest stopped running (state {state})"
            if any(dom.memoryPeek(0, IVT_BYTES, libvirt.VIR_MEMORY_PHYSICAL)):
                return True, (f"a {domain_type} guest ran its firmware in "
                              f"{time.monotonic() - started:.1f} s")
            if time.monotonic() - started > seconds or (stop is not None and stop.is_set()):
                return False, (f"a {domain_type} guest was running but executed nothing "
                               f"in {seconds:g} s")
            time.sleep(0.05)
    except libvirt.libvirtError as e:
        return False, f"the {domain_type} guest failed: {_reason(e)}"
    finally:
        if dom is not None:
            try:
                dom.destroy()
            except libvirt.libvirtError:
                pass        # gone already: on_crash/on_reboot, or autodestroyed


def own_virtualization():
    """What this machine runs under, as systemd-detect-virt names it ("kvm", "qemu" for
    QEMU without KVM, ...), "none" on bare metal, None when it cannot tell."""
    try:
        out = subprocess.run(["systemd-detect-virt", "--vm"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _is_this_machine(conn):
    try:
        uri = conn.getURI()
    except (AttributeError, libvirt.libvirtError):
        return False
    return uri.startswith(("qemu:///", "qemu+unix:///"))


def probe_accel(conn, call_seconds=CALL_SECONDS, probe=guest_executes,
                own_virt=own_virtualization):
    """("kvm" | "tcg" | None, reason): None when the driver is not QEMU (test:///)."""
    try:
        clean_leftovers(conn)
    except libvirt.libvirtError as e:
        log.warning("could not list domains to remove leftover KVM probes: %s", _reason(e))
    caps = conn.getCapabilities()
    if "<domain type='qemu'" not in caps and "<domain type='kvm'" not in caps:
        return None, "not a QEMU hypervisor"
    if "<domain type='kvm'" not in caps:
        return "tcg", "the hypervisor offers no KVM domain type"
    if _is_this_machine(conn) and own_virt() == "qemu":
        # this machine is itself a QEMU guest without KVM: its "KVM" is QEMU's emulation
        # of AMD-V/VT-x, which TCG offers (qemu64 carries svm). A probe guest on it took
        # a Debian 13 appliance's kernel down (an Oops in __schedule, then a panic), so
        # no probe is started
        return "tcg", ("this machine is itself a QEMU guest without KVM (systemd-detect-virt: "
                       "qemu): KVM here would be QEMU's emulation of it; no probe started")
    result = {}
    stop = threading.Event()

    def run():
        result["outcome"] = probe(conn, "kvm", stop=stop)
    thread = threading.Thread(target=run, daemon=True, name="kvm-probe")
    thread.start()
    thread.join(call_seconds)
    if thread.is_alive():
        # stuck inside libvirt: the thread destroys the domain once the call returns, and
        # AUTODESTROY covers the process dying first
        stop.set()
        return "tcg", f"the KVM probe did not return within {call_seconds:g} s"
    works, reason = result.get("outcome", (False, "the KVM probe failed"))
    return ("kvm" if works else "tcg"), reason


def _reason(error):
    return str(error.get_error_message() or error) if hasattr(error, "get_error_message") \
        else str(error)
