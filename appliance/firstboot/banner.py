"""The console banner: the API's URL, the certificate's fingerprint, where the admin
password is, and the version. Printed on stdout (the unit sends it to the journal and
the console) and written to /run/issue.d, which getty shows above each login prompt."""

import json
import logging
import os
import socket

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


def primary_address():
    """The IPv4 address other machines reach this one at: the source address of the
    default route (a UDP connect sends nothing). None without a route."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))     # TEST-NET-1: any routed address will do
            return s.getsockname()[0]
        except OSError:
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
