"""Schema migrations of the state directory (docs/migrations.md).

Each migration is a file of this package named `NNNN_name.py` (NNNN its number, which is
the schema version it brings the state to) with a docstring and `apply(store)`. They are
found by listing this directory, not by a list in code, so that an image build can add
one (the upgrade test does). `migrate(store)` runs at every start (appliance.bootstrap):
those past the state's version, in order, all of them or none.

A migration must be idempotent (a start that dies after it ran, before the version was
written, runs it again) and may only go through the store.
"""

import importlib
import logging
import os
import re
from collections import namedtuple

log = logging.getLogger("appliance.migrations")

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.py$")
LOCK = "schema"

Migration = namedtuple("Migration", "number name apply doc")


class MigrationError(Exception):
    """Start-up cannot go on: the state is newer than the code, or a migration failed."""


class SchemaTooNew(MigrationError):
    pass


class MigrationFailed(MigrationError):
    pass


def discover(directory=None, package=__name__):
    """Every migration of `directory` (this package's by default), in order."""
    directory = directory or os.path.dirname(os.path.abspath(__file__))
    found = {}
    for name in sorted(os.listdir(directory)):
        match = _FILE.match(name)
        if not match:
            continue
        number = int(match.group(1))
        if number == 0 or number in found:
            raise MigrationError(f"migration {name}: number {number} is zero or used twice")
        module = importlib.import_module(f"{package}.{name[:-3]}")
        if not callable(getattr(module, "apply", None)) or not (module.__doc__ or "").strip():
            raise MigrationError(f"migration {name} needs a docstring and apply(store)")
        found[number] = Migration(number, match.group(2), module.apply,
                                  module.__doc__.strip().splitlines()[0])
    return [found[n] for n in sorted(found)]


def latest(migrations=None):
    """The schema version this code writes: the number of its last migration."""
    migrations = discover() if migrations is None else migrations
    return migrations[-1].number if migrations else 0


def check(store, migrations=None):
    """Refuse a state newer than this code."""
    newest = latest(migrations)
    version = store.schema_version()
    if version > newest:
        raise SchemaTooNew(
            f"the state in {store.directory} has schema version {version}, newer than this "
            f"appliance knows (up to {newest}): it was written by a newer version. Run that "
            "version, or restore a backup taken by this one")
    return version


def migrate(store, migrations=None):
    """Bring the state to the latest schema version; returns the migrations run.

    Every kind's lock is held throughout (writers of other processes wait; readers do
    not, but at start-up there are none yet), and a rollback point put in place first
    makes it all-or-nothing: a migration that raises, or a process that dies, leaves the
    state as it was, at its old version."""
    migrations = discover() if migrations is None else migrations
    newest = latest(migrations)
    if check(store, migrations) == newest and not store.interrupted():
        return []
    with store.named_lock(LOCK), store.all_locked():
        store.recover()
        version = check(store, migrations)
        pending = [m for m in migrations if m.number > version]
        if not pending:
            return []
        with store.rollback_point():
            for migration in pending:
                log.info("migration %04d %s: %s", migration.number, migration.name,
                         migration.doc)
                try:
                    migration.apply(store)
                except Exception as e:
                    raise MigrationFailed(
                        f"migration {migration.number:04d} {migration.name} failed "
                        f"({type(e).__name__}: {e}); the state was left as it was, at schema "
                        f"version {version}") from e
            store.set_schema_version(newest)
    log.info("state schema version %d -> %d", version, newest)
    return pending
