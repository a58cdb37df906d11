"""The console banner: where the API is (this machine's addresses, port 443, or the host
port a hypervisor forwards to it), the certificate's fingerprint in the form `appliance
login --fingerprint` takes, the whole login line to copy, where the admin password is and
where it came from, and the version with its build's recipe. Printed on stdout (the unit sends it to the journal and
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
from appliance.files import PathRefused, write_file

log = logging.getLogger("appliance.firstboot")

ISSUE_FILE = "50-appliance.issue"


def version(build_info_path):
    """The build's version label with its recipe: `<version>+<recipe_hash>`, or
    `<version>.<recipe_hash>` when the version has a local part already (a build with
    --version-suffix), from /etc/appliance/build-info.json (written by the image build;
    docs/image.md); else the package's version."""
    try:
        with open(build_info_path) as f:
            info = json.load(f)
        label = info.get("version") if isinstance(info, dict) else None
        if isinstance(label, str) and label:
            recipe = info.get("recipe_hash")
            if isinstance(recipe, str) and recipe:
                label += ("." if "+" in label else "+") + recipe
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


def addresses(primary=None):
    """This machine's IPv4 addresses that users may reach: `primary` first, then those of
    the other interfaces (bridges and taps of libvirt and containers left out)."""
    found = [primary] if primary else []
    for _, name in socket.if_nameindex():
        if not name.startswith(LOCAL_INTERFACES):
            address = interface_address(name)
            if address and address not in found:
                found.append(address)
    return found


HTTPS_PORT = 443


def text(addresses, fingerprint, password_line, version_label):
    """The banner. `fingerprint` is the form `appliance login --fingerprint` takes
    (tls.pin); `addresses` those of addresses(), the first one in the login line."""
    host = addresses[0] if addresses else "<this machine's address>"
    where = ", ".join(addresses) if addresses else "this machine's addresses"
    return ("\n"
            f"appliance {version_label}\n"
            f"  API:              https://{host}/  (port {HTTPS_PORT} of {where};\n"
            f"                    or the host port forwarded to {HTTPS_PORT}, such as\n"
            f"                    https://127.0.0.1:<port>/ under QEMU user networking)\n"
            f"  Web console:      https://{host}/console/\n"
            f"  TLS certificate:  {fingerprint}\n"
            f"  {password_line}\n"
            "  Log in from a machine with the appliance CLI (the host port instead of the\n"
            "  address when the port is forwarded):\n"
            f"    appliance login --endpoint https://{host} --fingerprint {fingerprint}\n"
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
        # agetty reads backslash escapes in issue files; the banner means none
        write_file(os.path.abspath(os.path.join(paths.issue_dir, ISSUE_FILE)),
                   banner.replace("\\", "\\\\"), 0o644)
    except (OSError, PathRefused) as e:
        log.warning("cannot write the issue banner: %s", getattr(e, "strerror", None) or e)
