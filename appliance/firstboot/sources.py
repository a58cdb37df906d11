"""What an automated deployment hands the first boot: QEMU fw_cfg entries, or a NoCloud
seed (a block device labelled cidata with a cloud-config user-data).

fw_cfg `opt/appliance/admin-password` and `opt/appliance/ssh-key` win over the seed's
`appliance: {admin_password: ...}` and `ssh_authorized_keys`. A value that is empty, not
UTF-8 or of the wrong type is logged and ignored, as is a seed that cannot be read: the
box still boots, with a generated password."""

import contextlib
import logging
import os
import subprocess
import tempfile

import yaml

log = logging.getLogger("appliance.firstboot")

FW_ADMIN_PASSWORD = "opt/appliance/admin-password"
FW_SSH_KEY = "opt/appliance/ssh-key"


def fw_cfg(paths, name):
    """The text of fw_cfg entry `name`, stripped; None when absent, empty or not UTF-8."""
    path = os.path.join(paths.fw_cfg, name, "raw")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("cannot read fw_cfg %s: %s", name, e.strerror or e)
        return None
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        log.warning("fw_cfg %s is not UTF-8 text: ignored", name)
        return None
    if not text:
        log.warning("fw_cfg %s is empty: ignored", name)
        return None
    return text


@contextlib.contextmanager
def mounted_seed(paths):
    """The directory of the NoCloud seed, or None: paths.seed_dir when given, else the
    cidata/CIDATA block device mounted read-only for the time of the block."""
    if paths.seed_dir is not None:
        yield paths.seed_dir
        return
    device = next((d for d in paths.seed_labels if os.path.exists(d)), None)
    if device is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="seed-") as mountpoint:
        res = subprocess.run(["mount", "-o", "ro", device, mountpoint],
                             capture_output=True, text=True, timeout=60)
        if res.returncode != 0:
            log.warning("cannot mount the seed %s: %s", device, res.stderr.strip())
            yield None
            return
        try:
            yield mountpoint
        finally:
            subprocess.run(["umount", mountpoint], capture_output=True, timeout=60)


def seed_user_data(seed_dir):
    """The seed's cloud-config as a dict; {} when there is none or it cannot be used."""
    if seed_dir is None:
        return {}
    path = os.path.join(seed_dir, "user-data")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as e:
        log.warning("cannot read the seed's user-data: %s", getattr(e, "strerror", None) or e)
        return {}
    if not text.startswith("#cloud-config"):
        log.warning("the seed's user-data is not a #cloud-config: ignored")
        return {}
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        log.warning("the seed's user-data is not valid YAML: %s", e)
        return {}
    if not isinstance(data, dict):
        log.warning("the seed's user-data is not a mapping: ignored")
        return {}
    return data


def _text(value, what):
    if value is None:
        return None
    if not isinstance(value, str):
        log.warning("%s must be a string, not %s: ignored", what, type(value).__name__)
        return None
    value = value.strip()
    if not value:
        log.warning("%s is empty: ignored", what)
        return None
    return value


class Given:
    """The deployment's inputs: admin_password (str or None), where it came from (words
    for the banner, None without a password) and ssh_keys (list)."""

    def __init__(self, admin_password=None, ssh_keys=(), admin_password_source=None):
        self.admin_password = admin_password
        self.admin_password_source = admin_password_source if admin_password else None
        self.ssh_keys = list(ssh_keys)


def read(paths):
    """Given from fw_cfg, then from the seed for what fw_cfg does not give."""
    with mounted_seed(paths) as seed_dir:
        data = seed_user_data(seed_dir)
    section = data.get("appliance") or {}
    if not isinstance(section, dict):
        log.warning("the seed's `appliance` must be a mapping: ignored")
        section = {}
    password = fw_cfg(paths, FW_ADMIN_PASSWORD)
    source = f"given through fw_cfg {FW_ADMIN_PASSWORD}"
    if password is None:
        password = _text(section.get("admin_password"), "the seed's appliance.admin_password")
        source = "given in the NoCloud seed's appliance.admin_password"
    fw_key = fw_cfg(paths, FW_SSH_KEY)
    if fw_key is not None:
        keys = fw_key.splitlines()
    else:
        keys = data.get("ssh_authorized_keys") or []
        if not isinstance(keys, list):
            keys = [keys]
    keys = [k for k in (_text(k, "an SSH key of the seed") for k in keys) if k]
    return Given(password, [k for k in keys if _valid_key(k)], source)


def _valid_key(line):
    """An authorized_keys line must be one line of `type base64 [comment]`: anything else
    would write options or garbage into root's authorized_keys."""
    parts = line.split()
    ok = ("\n" not in line and len(parts) >= 2
          and (parts[0].startswith(("ssh-", "ecdsa-", "sk-"))))
    if not ok:
        log.warning("not an SSH public key, ignored: %.40r", line)
    return ok
