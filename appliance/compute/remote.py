"""Remote hypervisors over `qemu+ssh://` (docs/compute.md, "Remote hypervisors"): the
platform's SSH key pair, the pinned host key, and the libvirt URI the compute daemon opens.

Why pinned: libvirt's ssh transport runs OpenSSH, which by default asks whether to trust an
unknown host, or (with `no_verify`) trusts anything. A daemon cannot answer a question,
and a hypervisor whose key is not checked is whoever answers on its address: it would get
every guest's disks, seeds (SSH keys, the node agents' credentials) and consoles. So a
remote hypervisor's `driver_spec` carries its host's public key (`host_key`, what
`ssh-keyscan` prints), and the daemon connects with StrictHostKeyChecking on a
known_hosts file holding that key alone, never interactively (BatchMode).

Why one platform key: the appliance is the only client of its hypervisors; one key pair,
made once and kept with the state (a private file, mode 0600, carried by backups like the
token key), is what an operator installs in each hypervisor host's authorized_keys. Its
public half is readable by platform callers only (a hypervisor's read-only
`ssh_public_key`): hypervisors are the platform's.

No import of the API framework: the API checks a spec with `check_spec` (400s are raised
by its caller, hypervisor_rules.py) and the daemon calls `libvirt_uri`. cryptography is
imported where a key is made or read, never at import: the compute daemon of a deployment
without remote hypervisors does not load it (tests/supervisor/test_imports.py).
"""

import base64
import binascii
import hashlib
import os
import re
import shlex
import urllib.parse

from appliance import files

KEY_FILE = "hypervisor-ssh-key"         # a private file of the state directory
KEY_COMMENT = "appliance-hypervisors"
SSH_TRANSPORTS = ("ssh",)
# transports that reach a host over SSH by another library: their host key checks are
# not OpenSSH's, so they are refused rather than left unpinned
OTHER_SSH_TRANSPORTS = ("libssh", "libssh2")
# URI parameters the daemon sets itself (or that would undo the pinning)
RESERVED_PARAMS = ("command", "keyfile", "known_hosts", "known_hosts_verify", "no_verify",
                   "no_tty", "sshauth")
HOST_KEY_TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
                  "ecdsa-sha2-nistp521", "ssh-rsa")
HOST_KEY = re.compile(r"(?P<type>[a-z0-9-]+) (?P<blob>[A-Za-z0-9+/]+={0,2})( [^\x00-\x1f\x7f]*)?")
KEYSCAN_HINT = ("get it on a trusted path with `ssh-keyscan -t ed25519 HOST` (drop the "
                "host name it prints first) or read /etc/ssh/ssh_host_ed25519_key.pub on "
                "the host")
# lines of ssh's warning about a changed host key that say nothing the others do not
BANNER = ("^@", "IT IS POSSIBLE", "^Someone could", "^It is also possible",
          "^Please contact", "^Add correct host key", "^Offending", "remove with:",
          "ssh-keygen -f")
CONNECT_TIMEOUT = 10        # seconds for ssh to reach the host
ALIVE_INTERVAL, ALIVE_COUNT = 5, 3    # a silent host is dropped after ~15 s


class SpecError(ValueError):
    """A remote hypervisor's spec is not usable; the message says what to do."""


# -- the platform's key pair --------------------------------------------------------------

def key_pair(store):
    """(private key in OpenSSH PEM, public key line), made on first use. The file wins
    over a concurrent first use (the API and the daemon may both ask)."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415 (see above)
    from cryptography.hazmat.primitives.asymmetric import ed25519  # noqa: PLC0415
    private = store.read_private(KEY_FILE)
    if private is None:
        key = ed25519.Ed25519PrivateKey.generate()
        private = store.write_private(KEY_FILE, key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption()), exclusive=True)
    loaded = serialization.load_ssh_private_key(private, password=None)
    public = loaded.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                              serialization.PublicFormat.OpenSSH).decode()
    return private, f"{public} {KEY_COMMENT}"


def public_key(store):
    return key_pair(store)[1]


def key_path(store):
    """The private key's file, made if missing (ssh reads it: mode 0600, the daemon's)."""
    key_pair(store)
    return store.private_path(KEY_FILE)


# -- the spec -----------------------------------------------------------------------------

def transport(uri):
    """The transport of a libvirt URI (`qemu+ssh://...` -> "ssh"), or None."""
    scheme = uri.split(":", 1)[0] if ":" in uri else ""
    return scheme.split("+", 1)[1].lower() if "+" in scheme else None


def is_remote_ssh(uri):
    return transport(uri) in SSH_TRANSPORTS


def check_spec(spec):
    """The spec with `host_key` normalized (type and key, no comment); SpecError when a
    `qemu+ssh` URI lacks a valid pinned key, names no host, sets a parameter the daemon
    owns, or when another transport carries a host key."""
    uri, host_key = spec["connection_uri"], spec.get("host_key")
    kind = transport(uri)
    if kind in OTHER_SSH_TRANSPORTS:
        raise SpecError(f"driver_spec.connection_uri: transport {kind} is not supported: "
                        "use qemu+ssh://USER@HOST[:PORT]/system (OpenSSH, with the host "
                        "key pinned in driver_spec.host_key)")
    if kind not in SSH_TRANSPORTS:
        if host_key is not None:
            raise SpecError("driver_spec.host_key: only for a qemu+ssh:// connection_uri "
                            "(a remote hypervisor)")
        return spec
    parts = urllib.parse.urlsplit(uri)
    try:
        host, _port = parts.hostname, parts.port
    except ValueError as e:
        raise SpecError(f"driver_spec.connection_uri: {e}") from None
    if not host:
        raise SpecError("driver_spec.connection_uri: a qemu+ssh URI names the host: "
                        "qemu+ssh://USER@HOST[:PORT]/system")
    given = {k.lower() for k, _ in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)}
    reserved = sorted(given & set(RESERVED_PARAMS))
    if reserved:
        raise SpecError(f"driver_spec.connection_uri: parameter(s) {', '.join(reserved)} "
                        "are set by the appliance (its key, the pinned host key, no "
                        "prompts): leave them out")
    if host_key is None:
        raise SpecError("driver_spec.host_key: required for a qemu+ssh:// hypervisor: the "
                        "host's SSH public key, pinned (the appliance never trusts a host "
                        "key it was not given); " + KEYSCAN_HINT)
    return {**spec, "host_key": normal_host_key(host_key)}


def normal_host_key(line):
    """`type base64` of an OpenSSH public key line (`type base64 [comment]`)."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415 (see above)
    if not isinstance(line, str):
        raise SpecError("driver_spec.host_key: a string, an OpenSSH public key line")
    match = HOST_KEY.fullmatch(line.strip(" "))
    hint = f"; {KEYSCAN_HINT}"
    if match is None:
        raise SpecError("driver_spec.host_key: not an OpenSSH public key line "
                        "(`ssh-ed25519 AAAA... [comment]`, one line)" + hint)
    key_type, blob = match["type"], match["blob"]
    if key_type not in HOST_KEY_TYPES:
        raise SpecError(f"driver_spec.host_key: key type {key_type!r} is not one of "
                        f"{', '.join(HOST_KEY_TYPES)}" + hint)
    try:
        raw = base64.b64decode(blob, validate=True)
        serialization.load_ssh_public_key(f"{key_type} {blob}".encode())
    except (binascii.Error, ValueError):
        raise SpecError("driver_spec.host_key: the key does not decode as a "
                        f"{key_type} public key" + hint) from None
    named = raw[4:4 + int.from_bytes(raw[:4], "big")].decode("ascii", "replace")
    if named != key_type:
        raise SpecError(f"driver_spec.host_key: the key is a {named}, its line says "
                        f"{key_type}" + hint)
    return f"{key_type} {blob}"


# -- what the daemon opens ----------------------------------------------------------------

def known_hosts_line(uri, host_key):
    """The known_hosts line of the URI's host: `host key`, `[host]:port key` off port 22."""
    parts = urllib.parse.urlsplit(uri)
    host, port = parts.hostname, parts.port
    pattern = host if port in (None, 22) else f"[{host}]:{port}"
    return f"{pattern} {host_key}\n"


def libvirt_uri(uri, spec, hv_uuid, ssh_dir, keyfile):
    """The URI to open: a non-ssh URI as given; a qemu+ssh one with the platform key, no
    prompts, and ssh run by a wrapper that checks the host against a known_hosts file
    holding the pinned key only (libvirt's ssh transport has no known_hosts parameter:
    that is libssh2's). The files are written under `ssh_dir/<hypervisor uuid>/`."""
    if not is_remote_ssh(uri):
        return uri
    host_key = spec.get("host_key")
    if not host_key:
        raise SpecError("no driver_spec.host_key pinned for this qemu+ssh hypervisor: "
                        "update it with the host's key; " + KEYSCAN_HINT)
    own = os.path.join(ssh_dir, hv_uuid)
    os.makedirs(own, mode=0o700, exist_ok=True)
    known_hosts = os.path.join(own, "known_hosts")
    files.write_file(known_hosts, known_hosts_line(uri, host_key), 0o600)
    options = [f"UserKnownHostsFile={known_hosts}", "GlobalKnownHostsFile=/dev/null",
               "StrictHostKeyChecking=yes", "CheckHostIP=no", "UpdateHostKeys=no",
               "BatchMode=yes", "IdentitiesOnly=yes", "PasswordAuthentication=no",
               "KbdInteractiveAuthentication=no", f"ConnectTimeout={CONNECT_TIMEOUT}",
               f"ServerAliveInterval={ALIVE_INTERVAL}", f"ServerAliveCountMax={ALIVE_COUNT}"]
    # ssh takes the first value it is given for an option: these win over anything the
    # transport adds after them; -F none: no user or system configuration. Its stderr
    # loses the banner of a changed host key: libvirt reads at most 1 KiB of it
    # ("Value too large" past that), and the fingerprint and verdict lines fit
    wrapper = os.path.join(own, "ssh")
    banner = " ".join(f"-e {shlex.quote(b)}" for b in BANNER)
    files.write_file(wrapper, "#!/bin/sh\n# written by the appliance's compute daemon "
           "(appliance/compute/remote.py)\n{ ssh -F none "
           + " ".join(f"-o {shlex.quote(o)}" for o in options)
           + f' "$@" 2>&1 1>&3 3>&- | grep -v {banner} 1>&2; }} 3>&1\n', 0o700)
    parts = urllib.parse.urlsplit(uri)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    query += [("keyfile", keyfile), ("no_tty", "1"), ("command", wrapper)]
    return urllib.parse.urlunsplit(parts._replace(
        query=urllib.parse.urlencode(query, safe="/")))


def pinned_digest(spec):
    """Changes when the pinned key does: a kept connection is reopened then."""
    return hashlib.sha256((spec.get("host_key") or "").encode()).hexdigest()[:16]


def explain(uri, message):
    """libvirt's message about a qemu+ssh connection, with what it means when ssh said
    why: the host key differs from the pinned one, or the host refuses our key."""
    if not is_remote_ssh(uri):
        return message
    host = urllib.parse.urlsplit(uri).hostname
    if "Host key verification failed" in message or "REMOTE HOST IDENTIFICATION" in message:
        # ssh's warning is a banner of @ lines; what it saw is the fingerprint line
        seen = [line.strip() for line in message.splitlines() if "fingerprint" in line
                or line.startswith("SHA256:")]
        return (f"the SSH host key of {host} does not match driver_spec.host_key (the "
                f"pinned key): the host was not trusted and nothing was sent to it. "
                f"Check the host, then pin its real key; {KEYSCAN_HINT}. "
                f"ssh: {' '.join(seen)} Host key verification failed.")
    if "Permission denied" in message:
        return (f"{host} refused the appliance's SSH key: add the hypervisor's "
                f"ssh_public_key to the authorized_keys of the URI's user there. "
                f"libvirt: {message}")
    return message
