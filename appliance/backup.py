"""Backups of the appliance: what `appliance backup` / `restore` and the backup daemon
share. The files themselves are state/backup.py's business (docs/backup.md).

The schedule, `backup_schedule`, is read by appliance/backup_schedule.py.
"""

from appliance import __version__
from appliance.migrations import latest
from state import backup as archive


def take(settings, path, progress=None):
    """Back the state up to `path`; returns the manifest."""
    return archive.create(settings["state_dir"], path, {"appliance_version": __version__},
                          progress or (lambda *_: None))


def scheduled(settings):
    """A scheduled backup with its pruning: (path, manifest, names removed)."""
    return archive.scheduled(settings["state_dir"], settings["backup_dir"],
                             settings["backup_keep"], {"appliance_version": __version__})


def check(path, progress=None):
    """Read and validate a backup for this code (BackupError says why not)."""
    return archive.read(path, latest(), progress or (lambda *_: None))


def restore(settings, backup, progress=None):
    archive.restore(settings["state_dir"], backup, progress or (lambda *_: None))
