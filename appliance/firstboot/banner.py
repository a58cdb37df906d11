"""The console banner: the API's URL, the certificate's fingerprint, where the admin
password is, and the version. Printed on stdout (the unit sends it to the journal and
the console) and written to /etc/issue.d, which getty shows above each login prompt (agetty reads
/run/issue.d only when there is no /etc/issue, and Debian has one; /etc/issue.d is on the
root file system, so it is written again at every boot like the rest)."""

import fcntl
import json
import logging
import os
import socket
import struct

import appliance

log = logging.getLogger("appliance.firstboot")

ISSUE_FILE = "50-appliance.issue"


def version(build_info_path):
    """The build's version label (/etc/appliance/build-info.json, written by the image
    build), else the package's."""
    try:
        with open(build_info_path) as f:
            info = json.load(f)
        label = info.get("version") if isinstance(info, dict) else None
        if isinstance(label, str) and label:
            return label
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as e:
        log.warning("cannot read %s: %s", build_info_path, e)
    return appliance.__version__


SIOCGIFADDR = 0x8915
# bridges and taps of libvirt and containers: never the address users reach the box at
LOCAL_INTERFACES = ("lo", "virbr", "vnet", "docker", "veth")


def interface_address(name):
    """The IPv4 address of interface `name`, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR,
                                 struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def primary_address():
    """The IPv4 address other machines reach this one at: the source address of the
    default route (a UDP connect sends nothing), else, on a network without a router (QEMU
    user networking with restrict=on gives none), the first interface's address."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))     # TEST-NET-1: any routed address will do
            return s.getsockname()[0]
        except OSError:
            pass
    for _, name in socket.if_nameindex():
        if not name.startswith(LOCAL_INTERFACES):
            address = interface_address(name)
            if address:
                return address
    return None


def text(address, fingerprint, password_line, version_label):
    host = address or "<this machine's address>"
    return ("\n"
            f"appliance {version_label}\n"
            f"  API:                      https://{host}/\n"
            f"  TLS certificate SHA-256:  {fingerprint}\n"
            f"  {password_line}\n"
            "\n")


def show(paths, banner):
    """Print the banner and write the issue file; a failure here is only logged."""
    print(banner, flush=True)
    if paths.console:
        try:
            with open(paths.console, "w") as f:
                f.write(banner)
        except OSError as e:
            log.warning("cannot write the banner to %s: %s", paths.console, e.strerror or e)
    try:
        os.makedirs(paths.issue_dir, exist_ok=True)
        # agetty reads backslash escapes in issue files; the banner means none
        with open(os.path.join(paths.issue_dir, ISSUE_FILE), "w") as f:
            f.write(banner.replace("\\", "\\\\"))
        os.chmod(os.path.join(paths.issue_dir, ISSUE_FILE), 0o644)
    except OSError as e:
        log.warning("cannot write the issue banner: %s", e.strerror or e)
