"""`appliance backup FILE` and `appliance restore FILE`: local commands on the state
directory (no API, no login), found as `appliance up` finds it: --state-dir, else
$APPLIANCE_STATE_DIR, else the config file's state_dir (--config, $APPLIANCE_CONFIG,
/etc/appliance/appliance.yaml). See docs/backup.md.
"""

from __future__ import annotations

import argparse

from appliance.cli import CliError, UsageError, output
from appliance.cli.common import option

EPILOG_BACKUP = """\
The backup is one gzip-compressed tar file (mode 0600: it holds the keys and password
hashes): a manifest (versions, kinds, record counts, sha256 of every member), every kind
and every private file. It is taken under the store's locks while the appliance runs:
writers wait a moment, readers do not, and no write is half in it.

examples:
  appliance backup /var/backups/appliance-$(date +%F).tar.gz
  appliance backup --state-dir ./var backup.tar.gz

exit codes: 0 written, 1 failed (nothing is left at FILE), 2 bad command line"""

EPILOG_RESTORE = """\
Stop the appliance first (systemctl stop appliance.target, or end `appliance up`): a
restore is refused while any of its processes has the state open. The whole file is
checked before anything changes; a truncated, corrupted (checksum), newer (schema or
format) backup, or a file that is no backup, is refused, saying which, and the state is
left as it was. Then the state becomes exactly the backup's, as one step. A backup of an
older schema is migrated when the appliance next starts.

examples:
  systemctl stop appliance.target
  appliance restore /var/backups/appliance-2026-11-22.tar.gz
  systemctl start appliance.target

exit codes: 0 restored, 1 refused (the reason is printed; nothing changed), 2 bad command
line"""


def add_commands(commands, common, make_parser):
    backup = commands.add_parser(
        "backup", help="back the local state up to a file (while the appliance runs)",
        description="Write a consistent, compressed backup of the whole local state "
                    "(every kind and the keys) to FILE.",
        epilog=EPILOG_BACKUP, parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    backup.add_argument("file", metavar="FILE", help="the backup file to write (replaced "
                                                     "if it exists)")
    restore = commands.add_parser(
        "restore", help="restore the local state from a backup (appliance stopped)",
        description="Check the backup FILE whole, then make the local state exactly its "
                    "content.",
        epilog=EPILOG_RESTORE, parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    restore.add_argument("file", metavar="FILE", help="a file written by `appliance backup`")
    for sub, handler in ((backup, cmd_backup), (restore, cmd_restore)):
        sub.add_argument("--state-dir", metavar="DIR",
                         help="state directory (APPLIANCE_STATE_DIR; else the config "
                              "file's; default ./var)")
        sub.add_argument("--config", metavar="FILE",
                         help="config file (APPLIANCE_CONFIG; default "
                              "/etc/appliance/appliance.yaml if present)")
        sub.add_argument("--quiet", action="store_true", help="no progress on stderr")
        sub.set_defaults(handler=handler)


def _settings(args, env):
    from appliance import config  # noqa: PLC0415 (only the local commands need it)
    try:
        return config.load(config_file=args.config, environ=env.environ,
                           overrides={"state_dir": args.state_dir})
    except config.ConfigError as e:
        raise UsageError(str(e)) from None


def _progress(args, env, verb):
    if args.quiet:
        return None

    def show(done, total, what):
        env.stderr.write(f"{verb} [{done:>{len(str(total))}}/{total}] {what}\n")
        env.stderr.flush()
    return show


def cmd_backup(args, env):
    from appliance import backup  # noqa: PLC0415 (pulls in the store)
    from state import StoreError  # noqa: PLC0415
    settings = _settings(args, env)
    if not args.quiet:      # loading every kind comes before the first member
        env.stderr.write(f"backup: reading {settings['state_dir']}\n")
    try:
        manifest = backup.take(settings, args.file, _progress(args, env, "backup"))
    except (StoreError, OSError) as e:
        raise CliError(f"backup failed: {e}") from None
    return _report(args, env, settings, manifest, {},
                   f"backup of {settings['state_dir']} written to {args.file}")


def cmd_restore(args, env):
    from appliance import backup  # noqa: PLC0415 (pulls in the store)
    from state import StoreError  # noqa: PLC0415
    settings = _settings(args, env)
    try:
        checked = backup.check(args.file, _progress(args, env, "check"))
        backup.restore(settings, checked, _progress(args, env, "restore"))
    except (StoreError, OSError) as e:
        raise CliError(f"restore refused: {e}") from None
    manifest = checked.manifest
    taken = {"created_at": manifest["created_at"],
             "appliance_version": manifest.get("appliance_version")}
    return _report(args, env, settings, manifest, taken,
                   f"restored {args.file} (taken {taken['created_at']} by appliance "
                   f"{taken['appliance_version']}) into {settings['state_dir']}")


def _report(args, env, settings, manifest, extra, headline):
    """The summary of a backup or a restore: a JSON object with --json, else one line."""
    records = sum(manifest["kinds"].values())
    if option(args, "json"):
        output.write_json(env.stdout, {"file": args.file, "state_dir": settings["state_dir"],
                                       **extra, "schema_version": manifest["schema_version"],
                                       "kinds": manifest["kinds"], "records": records})
    else:
        env.stdout.write(f"{headline}: {len(manifest['kinds'])} kinds, {records} records, "
                         f"schema version {manifest['schema_version']}\n")
    return 0
