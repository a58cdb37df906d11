"""A network namespace with its own libvirtd, for tests that boot real VMs (docs/testing-vms.md).

    with Netns() as ns:
        conn = ns.connect()                      # libvirt-python on ns.uri
        ns.run(["ip", "route", "get", "1.1.1.1"])      # a command inside the namespace
        with ns.inside():                        # this thread's sockets are made in there
            urllib.request.urlopen("http://127.0.0.1:8080/")

The namespace has only `lo` and the bridges libvirt makes: nothing in it routes out, so
no packet of a guest, of libvirtd's dnsmasq or of a process run inside ever leaves it.
libvirtd and virtlogd run inside it with private copies of libvirt's directories
(bind mounts in their own mount namespace), so they never meet the host's libvirt nor
another test's. A second Netns reached from the first stands for a second machine:
`link()` joins two namespaces by a veth pair (their only way to each other), and
`start_sshd()` runs an sshd beside libvirtd (in its mount namespace, so the remote
libvirt URI `qemu+ssh://root@ADDRESS/system` finds this libvirtd's socket), root login by
key only. Everything is stopped and removed on exit, after a failure too:
every process in the namespace, its mounts (they live in a mount namespace that ends
with its last process), the namespace, the temp directory.
"""

import contextlib
import ctypes
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import textwrap
import time

CLONE_NEWNET = 0x40000000
TOOLS = ("ip", "libvirtd", "virtlogd", "mount", "dnsmasq")
SSH_TOOLS = ("sshd", "ssh-keygen", "ssh-keyscan", "nsenter")
# the directories libvirt writes or reads its configuration from: each gets a private copy
LIBVIRT_DIRS = {"run": "/run/libvirt", "etc": "/etc/libvirt", "lib": "/var/lib/libvirt",
                "log": "/var/log/libvirt", "cache": "/var/cache/libvirt"}
POOL = "default"      # the storage pool a hypervisor's driver_spec names by default


def unavailable():
    """Why a Netns cannot be made here (a reason to skip), or None."""
    if os.geteuid() != 0:
        return ("needs root: it creates a network namespace and bind mounts, and runs "
                "libvirtd (CI runs as root)")
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"missing tools {', '.join(missing)}: `make setup` as root installs them"
    try:
        import libvirt  # noqa: F401
    except ImportError:
        return "libvirt-python is not installed: `make setup` (needs libvirt-dev, pkg-config)"
    return None


def sshd_unavailable():
    """Why a Netns cannot run an sshd here (a reason to skip), or None."""
    missing = [t for t in SSH_TOOLS if shutil.which(t) is None
               and not os.path.exists(f"/usr/sbin/{t}")]
    if missing:
        return (f"missing tools {', '.join(missing)}: `make setup` as root installs "
                "openssh-server")
    return None


def require(sshd=False):
    """Skip the calling test with the reason when a Netns cannot be made here."""
    import pytest
    reason = unavailable() or (sshd_unavailable() if sshd else None)
    if reason:
        pytest.skip(reason)


class Netns:
    """A network namespace named uniquely, with `lo` up and libvirtd inside (see above).

    uri: the libvirt URI of its libvirtd, usable from the host (the socket is a host path).
    pool_dir: the directory of its storage pool `default`.
    """

    def __init__(self, prefix="apt", start_timeout=60):
        self.name = f"{prefix}-{secrets.token_hex(4)}"
        self.start_timeout = start_timeout
        self.root = None
        self.libvirtd = None
        self.log_path = None
        self.sshd_address = None

    # -- life cycle

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def start(self):
        # 0755: the namespace's QEMU and dnsmasq must reach the pool and the lease files
        self.root = tempfile.mkdtemp(prefix=f"netns-{self.name}-")
        os.chmod(self.root, 0o755)
        self._private_copies()
        subprocess.run(["ip", "netns", "add", self.name], check=True, capture_output=True)
        self.run(["ip", "link", "set", "lo", "up"], check=True)
        for target in LIBVIRT_DIRS.values():
            os.makedirs(target, exist_ok=True)      # a mount point (empty; /run/libvirt may be absent)
        self.log_path = self.path("libvirtd.log")
        with open(self.log_path, "w") as log:
            self.libvirtd = subprocess.Popen(
                ["ip", "netns", "exec", self.name, "sh", "-ec", self._start_script()],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        self._wait_ready()
        self._define_pool()
        return self

    def _private_copies(self):
        for key, source in LIBVIRT_DIRS.items():
            if key in ("etc",) and os.path.isdir(source):
                shutil.copytree(source, self.path(key), symlinks=True)
            else:
                os.makedirs(self.path(key))
        etc = self.path("etc")
        # the host's defined networks (the NAT 192.168.122.0/24 "default" autostarts),
        # domains and pools are not this test's: start from none
        for sub in ("qemu", "storage", "nwfilter", "secrets"):
            shutil.rmtree(os.path.join(etc, sub), ignore_errors=True)
        os.makedirs(os.path.join(etc, "qemu", "networks"))
        with open(os.path.join(etc, "libvirtd.conf"), "a") as f:
            f.write(textwrap.dedent(f"""
                # tests/compute/netns.py: the socket on a host path, so clients outside the
                # namespace's mount namespace reach it (qemu:///system?socket=...)
                unix_sock_dir = "{self.path('run')}"
                unix_sock_rw_perms = "0700"
                auth_unix_rw = "none"
                auth_unix_ro = "none"
                """))
        with open(os.path.join(etc, "qemu.conf"), "a") as f:
            f.write(textwrap.dedent("""
                # tests/compute/netns.py:
                # /dev/kvm is covered by an empty mode-000 file in this mount namespace; a
                # private /dev per guest would try to move that mount and fail
                namespaces = [ ]
                # the tests' files live in root-only temp directories (pytest's tmp_path)
                user = "root"
                group = "root"
                # ownership marks are extended attributes, which the overlay /tmp may refuse
                remember_owner = 0
                """))
        # an empty file with no permissions, bind-mounted over /dev/kvm: libvirt sees no
        # usable KVM once, instead of re-probing QEMU (~50 s) on every lookup (machine-facts)
        kvm = self.path("kvm-blocker")
        open(kvm, "w").close()
        os.chmod(kvm, 0)

    def _start_script(self):
        mounts = "\n".join(f"mount --bind {self.path(key)} {target}"
                           for key, target in LIBVIRT_DIRS.items())
        kvm = (f"mount --bind {self.path('kvm-blocker')} /dev/kvm"
               if os.path.exists("/dev/kvm") else "")
        # `ip netns exec` gave this shell a mount namespace of its own; rprivate keeps the
        # mounts below from propagating back to the host's
        return textwrap.dedent(f"""\
            mount --make-rprivate /
            {mounts}
            {kvm}
            virtlogd -d -p {self.path('virtlogd.pid')}
            exec libvirtd -p {self.path('libvirtd.pid')}
            """)

    def _wait_ready(self):
        import libvirt
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.libvirtd.poll() is not None:
                raise RuntimeError(f"libvirtd exited ({self.libvirtd.returncode}):\n{self.log()}")
            if os.path.exists(self.socket):
                try:
                    self.connect().close()
                    return
                except libvirt.libvirtError:
                    pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"libvirtd did not answer in {self.start_timeout} s:\n{self.log()}")
            time.sleep(0.1)

    def _define_pool(self):
        os.makedirs(self.pool_dir)
        conn = self.connect()
        try:
            pool = conn.storagePoolDefineXML(
                f"<pool type='dir'><name>{POOL}</name>"
                f"<target><path>{self.pool_dir}</path></target></pool>")
            pool.create()
            pool.setAutostart(True)
        finally:
            conn.close()

    def close(self):
        """Stop every process of the namespace, delete it and the temp directory.
        Safe to call twice, and after a partial start."""
        if self.exists():
            self._stop_processes()
            subprocess.run(["ip", "netns", "delete", self.name], capture_output=True)
        if self.libvirtd is not None:
            from tests import processes
            processes.stop(self.libvirtd, group=True)
            self.libvirtd = None
        # virtlogd daemonised itself: it is in the namespace too, stopped above
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def _stop_processes(self, timeout=15):
        """SIGTERM to every process in the namespace (libvirtd, virtlogd, QEMU, dnsmasq, and
        whatever a test started inside), SIGKILL to what is left after `timeout` s."""
        for signum, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10)):
            pids = self.pids()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signum)
            deadline = time.monotonic() + wait
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.1)
            if not self.pids():
                return

    # -- a second machine: a link between two namespaces, an sshd

    def link(self, other, address, other_address, prefix_len=24):
        """A veth pair between this namespace (`address`) and `other`
        (`other_address`), both up: the one path between the two. Returns the
        names of the two ends (this side's, the other's)."""
        tag = secrets.token_hex(3)
        mine, theirs = f"vh{tag}a", f"vh{tag}b"
        subprocess.run(["ip", "link", "add", mine, "netns", self.name, "type", "veth",
                        "peer", "name", theirs, "netns", other.name],
                       check=True, capture_output=True)
        for ns, dev, addr in ((self, mine, address), (other, theirs, other_address)):
            ns.run(["ip", "addr", "add", f"{addr}/{prefix_len}", "dev", dev], check=True)
            ns.run(["ip", "link", "set", dev, "up"], check=True)
        return mine, theirs

    def set_link(self, dev, up):
        """A link of this namespace up or down (a cable pulled, and put back)."""
        self.run(["ip", "link", "set", dev, "up" if up else "down"], check=True)

    def start_sshd(self, address, authorized_keys, port=22):
        """An sshd on `address:port` in this namespace, in libvirtd's mount namespace
        (where /run/libvirt is this libvirtd's), root login with `authorized_keys` (the
        lines) only: no password, no keyboard-interactive. Its host key is made here;
        `host_key()` reads it. Started again by calling this again after `stop_sshd()`."""
        ssh = self.path("ssh")
        os.makedirs(ssh, exist_ok=True)
        host_key = os.path.join(ssh, "ssh_host_ed25519_key")
        if not os.path.exists(host_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
                            f"{self.name}-host", "-f", host_key], check=True,
                           capture_output=True)
        with open(os.path.join(ssh, "authorized_keys"), "w") as f:
            f.write("".join(line.rstrip("\n") + "\n" for line in authorized_keys))
        config = os.path.join(ssh, "sshd_config")
        with open(config, "w") as f:
            f.write(textwrap.dedent(f"""\
                # tests/compute/netns.py: the second machine's sshd
                ListenAddress {address}:{port}
                HostKey {host_key}
                PidFile {os.path.join(ssh, 'sshd.pid')}
                AuthorizedKeysFile {os.path.join(ssh, 'authorized_keys')}
                PermitRootLogin prohibit-password
                PubkeyAuthentication yes
                PasswordAuthentication no
                KbdInteractiveAuthentication no
                UsePAM no
                # the files live under /tmp (world-writable): the test's own tree
                StrictModes no
                """))
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)    # sshd's privilege separation
        done = subprocess.run(
            ["nsenter", "-t", str(self.libvirtd.pid), "-m", "-n", "--",
             shutil.which("sshd") or "/usr/sbin/sshd", "-f", config,
             "-E", os.path.join(ssh, "sshd.log")], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"sshd did not start: {done.stderr}{self.sshd_log()}")
        self.sshd_address = (address, port)
        return self

    def stop_sshd(self):
        try:
            with open(self.path("ssh", "sshd.pid")) as f:
                pid = int(f.read())
        except (OSError, ValueError):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)

    def host_key(self):
        """This sshd's public host key line (`ssh-ed25519 AAAA... comment`)."""
        with open(self.path("ssh", "ssh_host_ed25519_key.pub")) as f:
            return f.read().strip()

    def sshd_log(self):
        try:
            with open(self.path("ssh", "sshd.log"), errors="replace") as f:
                return f.read()[-4000:]
        except (OSError, TypeError):
            return ""

    # -- what tests use

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    @property
    def socket(self):
        return self.path("run", "libvirt-sock")

    @property
    def uri(self):
        return f"qemu:///system?socket={self.socket}"

    @property
    def pool_dir(self):
        return self.path("pool")

    def connect(self):
        import libvirt
        return libvirt.open(self.uri)

    def exists(self):
        return self.name in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                           text=True).stdout.split()

    def pids(self):
        """The processes (live, not zombies) in the namespace now."""
        out = subprocess.run(["ip", "netns", "pids", self.name], capture_output=True,
                             text=True).stdout.split()
        return [int(p) for p in out if alive(int(p))]

    def command(self, argv):
        """argv run inside the namespace (for Popen)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def run(self, argv, timeout=60, **kwargs):
        """subprocess.run of argv inside the namespace (text output captured by default)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.command(argv), timeout=timeout, **kwargs)

    def popen(self, argv, **kwargs):
        return subprocess.Popen(self.command(argv), **kwargs)

    @contextlib.contextmanager
    def inside(self):
        """The calling thread in the namespace's network (setns), back in its own after:
        sockets made meanwhile (an HTTP client's, a server's listening one) belong to the
        namespace for their whole life. Only this thread moves (the network namespace is
        per thread), so the rest of the test process stays on the host's."""
        with open("/proc/thread-self/ns/net") as own, open(f"/run/netns/{self.name}") as ns:
            _setns(ns.fileno())
            try:
                yield self
            finally:
                _setns(own.fileno())

    def ssh(self, ip, key_file, command, user="root", timeout=30):
        """Run `command` on a guest over SSH from inside the namespace (key only, no prompts)."""
        return self.run(["ssh", "-i", key_file, "-o", "BatchMode=yes",
                         "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                         "-o", "LogLevel=ERROR", "-o", f"ConnectTimeout={min(timeout, 10)}",
                         f"{user}@{ip}", command], timeout=timeout)

    def log(self, lines=40):
        try:
            with open(self.log_path, errors="replace") as f:
                return "\n".join(f.read().splitlines()[-lines:])
        except (OSError, TypeError):
            return ""

    def mounts_on_host(self):
        """Mounts of the host's mount namespace that involve this namespace's files."""
        with open("/proc/self/mountinfo") as f:
            return [line for line in f if self.name in line or (self.root and self.root in line)]


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd):
    # os.setns arrives in Python 3.12; the venv's is 3.11
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")
