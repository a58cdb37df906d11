"""SSH: the host keys (made once, kept in <state>/ssh/ so that an upgrade keeps the box's
identity, installed into /etc/ssh at every boot) and root's authorized keys (those a
deployment gave, kept there too, so the root file system may be replaced).

<state>/ssh/ stays root's (0700): the appliance user owns the rest of the state
directory, and a key it could write there would be a key to root."""

import logging
import os

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from appliance.files import write_file

log = logging.getLogger("appliance.firstboot")

AUTHORIZED_KEYS = "authorized_keys"
HOST_KEYS = {
    "ed25519": lambda: ed25519.Ed25519PrivateKey.generate(),
    "ecdsa": lambda: ec.generate_private_key(ec.SECP256R1()),
}


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def host_keys(kept_dir, etc_ssh):
    """Make the missing host keys in `kept_dir`, copy them into `etc_ssh`, and remove any
    other host key there (one baked into the image would be every appliance's)."""
    os.makedirs(kept_dir, mode=0o700, exist_ok=True)
    os.makedirs(etc_ssh, exist_ok=True)
    names = []
    for kind, generate in HOST_KEYS.items():
        name = f"ssh_host_{kind}_key"
        names += [name, name + ".pub"]
        kept = os.path.join(kept_dir, name)
        private, public = _read(kept), _read(kept + ".pub")
        if private is None or public is None:
            key = generate()
            private = key.private_bytes(serialization.Encoding.PEM,
                                        serialization.PrivateFormat.OpenSSH,
                                        serialization.NoEncryption())
            public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                   serialization.PublicFormat.OpenSSH)
            public += b" root@appliance\n"
            write_file(kept + ".pub", public, 0o644)
            write_file(kept, private, 0o600)
            log.info("made the SSH host key %s", name)
        write_file(os.path.join(etc_ssh, name), private, 0o600)
        write_file(os.path.join(etc_ssh, name + ".pub"), public, 0o644)
    for entry in os.listdir(etc_ssh):
        if entry.startswith("ssh_host_") and entry not in names:
            os.unlink(os.path.join(etc_ssh, entry))


def authorized_keys(kept_dir, root_ssh, given):
    """Add the `given` keys to those kept, and write root's authorized_keys: the lines it
    already had plus every kept key, each once. Returns the number of kept keys."""
    os.makedirs(kept_dir, mode=0o700, exist_ok=True)
    kept_path = os.path.join(kept_dir, AUTHORIZED_KEYS)
    kept = (_read(kept_path) or b"").decode().splitlines()
    for key in given:
        if key not in kept:
            kept.append(key)
    if not kept:
        return 0
    write_file(kept_path, "".join(k + "\n" for k in kept).encode(), 0o600)
    os.makedirs(root_ssh, mode=0o700, exist_ok=True)
    os.chmod(root_ssh, 0o700)
    path = os.path.join(root_ssh, AUTHORIZED_KEYS)
    lines = (_read(path) or b"").decode().splitlines()
    lines += [k for k in kept if k not in lines]
    write_file(path, "".join(line + "\n" for line in lines).encode(), 0o600)
    return len(kept)
