"""Stand-ins for a VM's NIC on a hypervisor's bridge, for the network namespace tests: a
network namespace of its own with one veth, whose other end is a port of a bridge inside a
hypervisor's namespace (tests/compute/netns.py), with the MAC of a node's port. What runs
in it are small Python programs (this host has no ping, dhclient nor tcpdump): a DHCP
DISCOVER, a UDP echo server and client, a raw frame listener, a VXLAN packet sender.
Nothing leaves the namespaces: they have no route out.
"""

import secrets
import subprocess
import sys
import textwrap

PYTHON = sys.executable

DHCP = textwrap.dedent("""
    import os, socket, struct, sys
    mac = bytes.fromhex(sys.argv[1].replace(":", ""))
    xid = os.urandom(4)
    # BOOTREQUEST with the broadcast flag: the offer comes back to an address-less NIC
    packet = (b"\\x01\\x01\\x06\\x00" + xid + b"\\x00\\x00\\x80\\x00" + b"\\x00" * 16 + mac
              + b"\\x00" * 10 + b"\\x00" * 192 + b"\\x63\\x82\\x53\\x63"
              + b"\\x35\\x01\\x01" + b"\\x37\\x03\\x01\\x03\\x06" + b"\\xff")
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"eth0")
    s.bind(("0.0.0.0", 68))
    s.settimeout(2)
    for attempt in range(int(sys.argv[2])):
        s.sendto(packet, ("255.255.255.255", 67))
        try:
            while True:
                reply = s.recv(4096)
                if reply[4:8] == xid and reply[0] == 2:
                    break
        except socket.timeout:
            continue
        options, i = {}, 240
        while i < len(reply) and reply[i] != 255:
            if reply[i] == 0:
                i += 1
                continue
            options[reply[i]] = reply[i + 2:i + 2 + reply[i + 1]]
            i += 2 + reply[i + 1]
        print(socket.inet_ntoa(reply[16:20]),
              socket.inet_ntoa(options[6][:4]) if 6 in options else "-",
              socket.inet_ntoa(options[3][:4]) if 3 in options else "-")
        sys.exit(0)
    print("no-offer")
""")

ECHO_SERVER = textwrap.dedent("""
    import socket, sys
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", int(sys.argv[1])))
    print("ready", flush=True)
    while True:
        data, peer = s.recvfrom(2048)
        s.sendto(b"echo " + data, peer)
""")

ECHO_CLIENT = textwrap.dedent("""
    import socket, sys
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1)
    for attempt in range(int(sys.argv[3])):
        s.sendto(b"hello", (sys.argv[1], int(sys.argv[2])))
        try:
            data = s.recv(2048)
        except (socket.timeout, OSError):
            continue
        print(data.decode())
        sys.exit(0)
    print("no-reply")
""")

# a raw listener: prints "seen" once a frame of EtherType 0x88b5 (IEEE's local
# experimental type) carrying the marker arrives on eth0
LISTEN = textwrap.dedent("""
    import socket, sys, time
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x88b5))
    s.bind(("eth0", 0))
    s.settimeout(0.5)
    print("ready", flush=True)
    deadline = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < deadline:
        try:
            frame = s.recv(2048)
        except socket.timeout:
            continue
        if sys.argv[1].encode() in frame:
            print("seen", flush=True)
            sys.exit(0)
    print("not-seen", flush=True)
""")

# a VXLAN packet by hand: header (flags 0x08, VNI) and an inner broadcast frame of
# EtherType 0x88b5 holding the marker, sent to host:4789 a few times
VXLAN_SEND = textwrap.dedent("""
    import socket, struct, sys, time
    vni, marker = int(sys.argv[2]), sys.argv[3].encode()
    inner = b"\\xff" * 6 + bytes.fromhex("020000000001") + b"\\x88\\xb5" + marker
    packet = struct.pack("!II", 0x08000000, vni << 8) + inner
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(5):
        s.sendto(packet, (sys.argv[1], 4789))
        time.sleep(0.2)
""")


class Endpoint:
    """A namespace `ep-<hex>` whose eth0 (MAC `mac`, MTU 1450 as libvirt gives a spanning
    network's nodes) is plugged into `bridge` inside the hypervisor namespace `hv`."""

    def __init__(self, hv, bridge, mac):
        self.name = f"ep-{secrets.token_hex(4)}"
        self.hv, self.bridge, self.mac = hv, bridge, mac
        self.port = f"vh{secrets.token_hex(4)}"
        self.processes = []

    def __enter__(self):
        try:
            _ip("netns", "add", self.name)
            _ip("-n", self.name, "link", "set", "lo", "up")
            _ip("link", "add", self.port, "netns", self.hv.name, "type", "veth",
                "peer", "name", "eth0", "netns", self.name)
            _ip("-n", self.hv.name, "link", "set", self.port, "master", self.bridge, "up")
            _ip("-n", self.name, "link", "set", "eth0", "address", self.mac, "mtu", "1450",
                "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        from tests import processes
        for process in self.processes:
            processes.stop(process)
        self.processes = []
        subprocess.run(["ip", "netns", "delete", self.name], capture_output=True)

    def command(self, argv):
        return ["ip", "netns", "exec", self.name, *argv]

    def run(self, argv, timeout=60):
        return subprocess.run(self.command(argv), capture_output=True, text=True,
                              timeout=timeout)

    def python(self, script, *args, timeout=60):
        done = self.run([PYTHON, "-c", script, *map(str, args)], timeout=timeout)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def start(self, script, *args):
        """A Python program left running in the namespace once it printed its first line
        ("ready"); stopped on close."""
        process = subprocess.Popen(self.command([PYTHON, "-u", "-c", script, *map(str, args)]),
                                   stdout=subprocess.PIPE, text=True)
        self.processes.append(process)
        assert process.stdout.readline().strip() == "ready"
        return process

    def address(self, cidr):
        _ip("-n", self.name, "addr", "add", cidr, "dev", "eth0")

    def dhcp(self, attempts=5):
        """(address offered, DNS server, router) of a DHCP DISCOVER from this MAC, or
        ("no-offer",)."""
        return tuple(self.python(DHCP, self.mac, attempts).split())

    def echo(self, ip, port=7777, attempts=3):
        """True when a UDP echo server at ip:port answers from here."""
        return self.python(ECHO_CLIENT, ip, port, attempts).startswith("echo")


def _ip(*argv):
    done = subprocess.run(["ip", *argv], capture_output=True, text=True)
    assert done.returncode == 0, f"ip {' '.join(argv)}: {done.stderr}"
