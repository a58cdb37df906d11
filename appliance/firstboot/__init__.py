"""First boot of the image: run by appliance-firstboot.service as root at every boot,
before nginx, sshd and the appliance's units. Idempotent: what is kept in the state
directory (password, keys, certificate) is made once; what lives on the root file system,
which an upgrade replaces (nginx site, host keys, root's authorized keys, banner), is
written again each time. The state migrations run inside appliance.bootstrap, as at
every start of `appliance up`. See docs/appliance-image.md.
"""

import logging
import os
import pwd
import socket

from appliance import daemon_state, metrics
from appliance.files import write_file
from appliance.agent.credentials import API_CA_FILE
from appliance.bootstrap import ADMIN_PASSWORD_FILE, bootstrap
from appliance.capabilities import descriptors
from state import Store, wake

from . import backup_timer, banner, nginx, ondemand, register, sources, ssh, tls
from .paths import Paths
from .steps import Steps

log = logging.getLogger("appliance.firstboot")

SERVICE_USER = "appliance"
# owned by root, not the service user: host keys and the keys to root's account, and the
# TLS key (nginx's master reads it as root); anything the appliance user may write, a
# compromised API could replace
ROOT_ONLY = ("ssh", "tls")
# neither root's nor the service user's: a capability's folder that another user owns
# (its descriptor's state_dir_owner: the DBaaS data is PostgreSQL's)
OTHER_USERS = tuple(c.name for c in descriptors() if c.state_dir_owner)

__all__ = ["Paths", "run"]


# where the admin password came from, written beside it when it is set (at first boot), so
# that every later boot's banner can still say it
ADMIN_PASSWORD_ORIGIN_FILE = "admin-password-origin"
GENERATED = "generated at first boot"


def admin_password(store, given, settings=None):
    """Keep a given password in <state>/admin-password unless that file exists already (it
    wins: a deployment's fw_cfg is read at every boot, the password is set once). Without
    one, bootstrap generates it there. Returns where the kept password came from, for the
    banner (None when APPLIANCE_ADMIN_PASSWORD sets it: bootstrap's line says so)."""
    if (settings or {}).get("admin_password"):
        return None
    path = store.private_path(ADMIN_PASSWORD_FILE)
    was_set = os.path.exists(path)
    ignored = None
    if given.admin_password is not None:
        kept = store.write_private(ADMIN_PASSWORD_FILE, given.admin_password.encode(),
                                   exclusive=True)
        if kept.decode().strip() != given.admin_password:
            log.warning("an admin password was given but %s exists: it is kept", path)
            ignored = given.admin_password_source
    if not was_set:
        origin = given.admin_password_source or GENERATED
        store.write_private(ADMIN_PASSWORD_ORIGIN_FILE, origin.encode())
        return origin
    recorded = store.read_private(ADMIN_PASSWORD_ORIGIN_FILE)
    origin = recorded.decode(errors="replace").strip() if recorded else "set at an earlier boot"
    if ignored:
        origin += f"; a different password {ignored} at this boot is ignored: it is set once"
    return origin


def register_node(store, paths, settings):
    """This box as a compute node and its libvirt as a hypervisor, and its node agent
    enrolled (register.py). A failure is logged, not fatal: the appliance still boots,
    and the next boot tries again."""
    try:
        node = register.register(store, paths.libvirt_socket)
        register.enroll_self(store, node, settings, paths.agent_credential)
    except Exception:
        log.exception("node registration failed; tried again at the next boot")


def hand_over(state_dir, uid, gid):
    """Give the state directory to the service user (the units run as it), except
    ROOT_ONLY. Only what is not already its own is changed, so a boot costs one walk."""
    for top, dirs, files in os.walk(state_dir):
        if top == state_dir:
            dirs[:] = [d for d in dirs if d not in ROOT_ONLY + OTHER_USERS
                       and d != "lost+found"]
        for name in [top] + [os.path.join(top, f) for f in dirs + files]:
            st = os.lstat(name)
            if (st.st_uid, st.st_gid) != (uid, gid):
                os.lchown(name, uid, gid)
    # traversable, not listable: PostgreSQL (user postgres) reaches its data under
    # <state>/sqldb; what the units write here is 0600 or in 0700 folders (UMask=0077)
    os.chmod(state_dir, 0o711)


def mark_done(path):
    """The mark the API's process waits for (as the appliance user): its folder and the
    file readable by all, whatever the unit's UMask (0077)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.chmod(os.path.dirname(path), 0o755)
    write_file(os.path.abspath(path), b"", 0o644)


def service_user():
    try:
        entry = pwd.getpwnam(SERVICE_USER)
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def run(settings, paths=None, owner=None, systemctl=backup_timer.systemctl):
    """Do the whole first boot. `owner` = (uid, gid) of the state directory's owner
    (default: the appliance user when it exists); `systemctl(*args)` reloads and starts
    units (the backup timer, the on-demand daemons with work; a fake in tests). Returns the banner's text."""
    steps = Steps()
    paths = paths or Paths()
    state_dir = settings["state_dir"]
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    # the API makes its metric files only after the mark below, the daemons start after
    # this unit: nothing of this boot is there yet (docs/metrics.md)
    metrics.clear(state_dir)
    daemon_state.clear(state_dir)       # the daemons' states are this boot's
    # before this boot's first write: no daemon sleeps yet, and a wake mark of the last
    # boot would start its daemon for nothing once its path unit watches (state/wake.py)
    wake.clear(state_dir)
    given = sources.read(paths)
    store = Store(state_dir)
    try:
        password_origin = admin_password(store, given, settings)
    finally:
        store.close()
    steps.done("password")
    ssh.host_keys(os.path.join(state_dir, "ssh"), paths.etc_ssh)
    count = ssh.authorized_keys(os.path.join(state_dir, "ssh"), paths.root_ssh, given.ssh_keys)
    log.info("root's authorized SSH keys: %d", count)
    steps.done("ssh")
    address = banner.primary_address()
    addresses = banner.addresses(address)
    cert_path, key_path, cert = tls.ensure(os.path.join(state_dir, "tls"),
                                           socket.gethostname(), [address] if address else [])
    upstream = f"{settings['api_host']}:{settings['api_port']}"
    max_body = max(settings["max_body_bytes"], settings["max_upload_bytes"])
    nginx.write(paths.nginx_sites, nginx.site(cert_path, key_path, upstream, max_body))
    steps.done("tls")
    password_line = bootstrap(settings)
    steps.done("bootstrap")
    store = Store(state_dir)
    try:
        # the certificate, readable by the daemons (tls/ is root's): VM seeds pin it
        with open(cert_path, "rb") as f:
            store.write_private(API_CA_FILE, f.read())
        register_node(store, paths, settings)
        steps.done("node")
        # after first boot's last write; nothing else writes before the mark
        ondemand.prepare(store)
        with_work = ondemand.wanted(store)
    finally:
        store.close()
    owner = owner or service_user()
    if owner is not None:
        hand_over(state_dir, *owner)
    if not ondemand.watch(systemctl):
        with_work = list(ondemand.ON_DEMAND)
    mark_done(paths.done_mark)
    steps.done("mark")
    backup_timer.apply(settings, paths.systemd_runtime, systemctl)
    ondemand.start(with_work, systemctl)
    if password_origin:
        password_line += f" ({password_origin})"
    text = banner.text(addresses, tls.pin(cert), password_line,
                       banner.version(paths.build_info))
    banner.show(paths, text)
    steps.done("after-mark")
    log.info("%s", steps.line())
    return text
