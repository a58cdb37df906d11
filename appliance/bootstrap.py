"""Every start: the state brought to the current schema (appliance.migrations), then what
must exist before any process serves (admin password, every capability's seed).

Idempotent and safe to run from several processes at once: every step goes through the
store's locks, and a file that already exists wins.
"""

import secrets

from appliance.migrations import MigrationError, check, latest, migrate
from state import Store

ADMIN_PASSWORD_FILE = "admin-password"


def admin_password(store, settings):
    """The admin password: APPLIANCE_ADMIN_PASSWORD when set, else generated once and
    kept in <state-dir>/admin-password (mode 0600). Returns (password, file or None)."""
    if settings.get("admin_password"):
        return settings["admin_password"], None
    generated = secrets.token_urlsafe(18).encode()
    stored = store.write_private(ADMIN_PASSWORD_FILE, generated, exclusive=True)
    return stored.decode().strip(), store.private_path(ADMIN_PASSWORD_FILE)


def bootstrap(settings):
    """Prepare the state directory. Returns a line telling where the admin password is."""
    store = Store(settings["state_dir"])
    try:
        # first: the seeds below write records of the current schema
        migrate(store)
        password, path = admin_password(store, settings)
        # every capability's seed, in the list's order (IAM's first: the admin user)
        from appliance.capabilities import descriptors  # noqa: PLC0415
        from appliance.capability import load  # noqa: PLC0415
        seeded = {**settings, "admin_password": password}
        for capability in descriptors():
            if capability.seed:
                load(capability.seed)(store, seeded)
    finally:
        store.close()
    if path:
        return f"admin password of user 'admin' is in {path}"
    return "admin password of user 'admin' is the value of APPLIANCE_ADMIN_PASSWORD"


def require_bootstrapped(settings):
    """Refuse a state that bootstrap has not brought to this code's schema version (newer
    or older): what a process that skips bootstrap checks instead."""
    store = Store(settings["state_dir"])
    try:
        version, newest = check(store), latest()
    finally:
        store.close()
    if version != newest:
        raise MigrationError(
            f"the state in {settings['state_dir']} has schema version {version}, this code's "
            f"is {newest}: bootstrap has not migrated it (set api_bootstrap to true, or run "
            "the first-boot unit)")
