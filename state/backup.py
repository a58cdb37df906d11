"""Backups of the whole state directory: one gzip-compressed tar file.

Members, in this order:
- `manifest.json`: format, its version, when, the appliance's version (given by the
  caller), the schema version, every kind with its record count, and the size and sha256
  of every other member;
- `kinds/<kind>.json`: each kind as a stock TinyDB base (no journal);
- `private/<name>`: each private file (keys, admin password, the schema version).

The kinds are read with every kind's lock held at once, so no write is half in it and all
kinds show the same moment; the locks are held only while the records are taken from
memory (each kind is loaded before), then serialization and compression run without them.
Reading validates the whole file before anything is restored: see read() for what is
refused and why. See docs/backup.md.
"""

import datetime
import gzip
import hashlib
import io
import os
import re
import tarfile
import zlib

import orjson

from .collection import JOURNAL_SUFFIX, base_payload, format_time, utcnow, valid_kind
from .errors import StoreError
from .storage import fsync_dir
from .store import Store

FORMAT = "appliance-backup"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
KINDS = "kinds/"
PRIVATE = "private/"
SUFFIX = ".tar.gz"
# names of scheduled backups: the time sorts them, and nothing else in the folder matches
SCHEDULED = re.compile(r"^appliance-backup-\d{8}T\d{6}\.\d{6}Z" + re.escape(SUFFIX) + "$")

TRUNCATED, CORRUPTED, NEWER, NOT_A_BACKUP, UNREADABLE = (
    "truncated", "corrupted", "newer", "not a backup", "unreadable")
_WHAT = {
    TRUNCATED: "the backup is truncated",
    CORRUPTED: "the backup is corrupted",
    NEWER: "the backup is newer than this appliance",
    NOT_A_BACKUP: "not an appliance backup",
    UNREADABLE: "cannot read the file",
}


class BackupError(StoreError):
    """A backup that cannot be restored; `reason` is one of the constants above."""

    def __init__(self, path, reason, detail):
        super().__init__(f"{path}: {_WHAT[reason]}: {detail}")
        self.path = path
        self.reason = reason
        self.detail = detail


def _quiet(*_):
    pass


# ---- taking a backup ---------------------------------------------------------------------

def capture(store):
    """(schema version, {kind: records}, {private name: bytes}) of one moment."""
    kinds = store.kinds()
    for kind in kinds:
        # loaded before the locks: under them, each kind reads only its journal's tail
        store.collection(kind).count()
    with store.all_locked(changed=False):
        records = {kind: store.collection(kind).snapshot().ordered() for kind in kinds}
        private = {name: store.read_private(name) for name in store.private_names()}
        schema = store.schema_version()
    return schema, records, {n: data for n, data in private.items() if data is not None}


def create(directory, path, about=None, progress=_quiet):
    """Write a backup of the state in `directory` to `path` (atomically: a temporary file
    renamed at the end, mode 0600). `about` goes into the manifest (the appliance's
    version). progress(done, total, member) is called as each member is compressed into
    the file. Returns the manifest."""
    if not os.path.isdir(directory):
        raise StoreError(f"no state directory at {directory}")
    store = Store(directory)
    try:
        schema, records, private = capture(store)
    finally:
        store.close()
    members = [(KINDS + kind + ".json", lambda k=kind: base_payload(k, records[k]))
               for kind in records]
    members += [(PRIVATE + name, lambda n=name: private[n]) for name in private]
    made, entries = [], {}
    for name, serialize in members:
        data = serialize()
        made.append((name, data))
        entries[name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION,
                "created_at": format_time(utcnow()), **(about or {}),
                "schema_version": schema,
                "kinds": {kind: len(recs) for kind, recs in records.items()},
                "members": entries}
    _write_archive(path, [(MANIFEST, orjson.dumps(manifest, option=orjson.OPT_INDENT_2))]
                   + made, progress)
    return manifest


def _write_archive(path, members, progress):
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    now = int(utcnow().timestamp())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as raw:
            # level 6 (gzip's default): 15% smaller than level 1 for 2.5x its time, which
            # is still less than loading the kinds (docs/backup.md, figures)
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=now) as gz:
                with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                    for i, (name, data) in enumerate(members, 1):
                        info = tarfile.TarInfo(name)
                        info.size, info.mode, info.mtime = len(data), 0o600, now
                        tar.addfile(info, io.BytesIO(data))     # compressed here
                        progress(i, len(members), name)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(folder)


# ---- reading and validating --------------------------------------------------------------

class Backup:
    """A backup read whole and found valid: its manifest and members' bytes."""

    def __init__(self, path, manifest, members):
        self.path = path
        self.manifest = manifest
        self.members = members

    def kinds(self):
        return {name[len(KINDS):-5]: data for name, data in self.members.items()
                if name.startswith(KINDS)}

    def private(self):
        return {name[len(PRIVATE):]: data for name, data in self.members.items()
                if name.startswith(PRIVATE)}


def read(path, newest_schema, progress=_quiet):
    """Read and check the whole backup at `path`; raise BackupError saying why it cannot
    be restored: not a backup (no gzip, no tar, no manifest first, another format),
    newer (a format or schema version past `newest_schema`), truncated (the compressed
    stream or the tar ends early, or listed members are missing), corrupted (gzip's CRC,
    a damaged tar header, a sha256 or size that differs from the manifest, a member the
    manifest does not list, a kind whose content or count does not match)."""
    try:
        raw = open(path, "rb")
    except OSError as e:
        raise BackupError(path, UNREADABLE, e.strerror) from None
    with raw:
        if raw.read(2) != b"\x1f\x8b":
            raise BackupError(path, NOT_A_BACKUP, "not a gzip-compressed file")
        raw.seek(0)
        manifest, members = _read_members(path, raw, newest_schema, progress)
    missing = sorted(set(manifest["members"]) - set(members))
    if missing:
        raise BackupError(path, TRUNCATED, f"{len(missing)} member(s) missing, the first "
                                           f"{missing[0]}")
    backup = Backup(path, manifest, members)
    _check_content(backup)
    return backup


def _read_members(path, raw, newest_schema, progress):
    manifest, members = None, {}
    gz = gzip.GzipFile(fileobj=raw, mode="rb")
    try:
        with tarfile.open(fileobj=gz, mode="r|") as tar:
            for info in tar:
                if manifest is None:
                    manifest = _manifest(path, tar, info, newest_schema)
                    continue
                entry = manifest["members"].get(info.name)
                if entry is None or not info.isreg() or info.name in members:
                    raise BackupError(path, CORRUPTED,
                                      f"member {info.name} is not in the manifest")
                data = tar.extractfile(info).read()
                if len(data) != info.size:
                    raise BackupError(path, TRUNCATED, f"member {info.name} is cut short")
                if len(data) != entry["size"] or \
                        hashlib.sha256(data).hexdigest() != entry["sha256"]:
                    raise BackupError(path, CORRUPTED, f"the checksum of {info.name} does "
                                                       "not match the manifest")
                members[info.name] = data
                progress(len(members), len(manifest["members"]), info.name)
        # the tar ends before gzip's trailer: read on, so its CRC and length are checked
        while gz.read(1 << 16):
            pass
    except EOFError:
        raise BackupError(path, TRUNCATED, "the compressed data ends early") from None
    except tarfile.ReadError as e:
        if isinstance(e.__context__, (zlib.error, gzip.BadGzipFile)) or "zlib" in str(e):
            # a valid gzip header with damaged data behind it
            raise BackupError(path, CORRUPTED, f"damaged compressed data ({e})") from None
        if manifest is None and "empty file" not in str(e):
            raise BackupError(path, NOT_A_BACKUP, f"not a tar archive ({e})") from None
        if "unexpected end" in str(e) or "empty file" in str(e):
            raise BackupError(path, TRUNCATED, "the archive ends early") from None
        raise BackupError(path, CORRUPTED, f"damaged archive ({e})") from None
    except (zlib.error, gzip.BadGzipFile) as e:
        raise BackupError(path, CORRUPTED, f"damaged compressed data ({e})") from None
    if manifest is None:
        raise BackupError(path, NOT_A_BACKUP, "an empty archive")
    return manifest, members


def _manifest(path, tar, info, newest_schema):
    if info.name != MANIFEST or not info.isreg():
        raise BackupError(path, NOT_A_BACKUP, f"no {MANIFEST} first (found {info.name})")
    try:
        manifest = orjson.loads(tar.extractfile(info).read())
    except orjson.JSONDecodeError:
        raise BackupError(path, CORRUPTED, f"{MANIFEST} is not JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(path, NOT_A_BACKUP, f"{MANIFEST} is not an appliance backup's")
    version, schema = manifest.get("format_version"), manifest.get("schema_version")
    if not isinstance(version, int) or not isinstance(schema, int) or \
            not isinstance(manifest.get("members"), dict) or \
            not isinstance(manifest.get("kinds"), dict):
        raise BackupError(path, CORRUPTED, f"{MANIFEST} lacks its versions, kinds or members")
    if version > FORMAT_VERSION:
        raise BackupError(path, NEWER, f"backup format {version}; this appliance reads up "
                                       f"to {FORMAT_VERSION}")
    if schema > newest_schema:
        raise BackupError(path, NEWER, f"state schema version {schema}; this appliance "
                                       f"knows up to {newest_schema} (upgrade it first)")
    for name, entry in manifest["members"].items():
        kind_name = name[len(KINDS):-5] if name.startswith(KINDS) and name.endswith(".json") \
            else None
        private_name = name[len(PRIVATE):] if name.startswith(PRIVATE) else None
        if not (kind_name and valid_kind(kind_name)) and not (
                private_name and "/" not in private_name and not private_name.startswith(".")):
            raise BackupError(path, CORRUPTED, f"{MANIFEST} lists a bad member name {name!r}")
        if not isinstance(entry, dict) or not isinstance(entry.get("size"), int) or \
                not isinstance(entry.get("sha256"), str):
            raise BackupError(path, CORRUPTED, f"{MANIFEST}: bad entry for {name}")
    return manifest


def _check_content(backup):
    """Every kind member is a TinyDB base of records whose count the manifest states."""
    path, counts = backup.path, backup.manifest["kinds"]
    kinds = backup.kinds()
    if set(kinds) != set(counts):
        raise BackupError(path, CORRUPTED, "the kinds listed do not match the members")
    for kind, data in kinds.items():
        try:
            table = orjson.loads(data)[kind]
            uuids = {record["uuid"] for record in table.values()}
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise BackupError(path, CORRUPTED, f"{KINDS}{kind}.json is not a kind's "
                                               "records") from None
        if len(table) != counts[kind] or len(uuids) != len(table):
            raise BackupError(path, CORRUPTED, f"{KINDS}{kind}.json holds {len(table)} "
                                               f"records, the manifest says {counts[kind]}")


# ---- restoring ---------------------------------------------------------------------------

def restore(directory, backup, progress=_quiet):
    """Make the state in `directory` exactly the (validated) backup: every kind and
    private file of it written, every other one removed, as one step (a rollback point
    puts the old files back if anything fails). Refused with StateInUse while any process
    has the state open (the appliance runs)."""
    store = Store(directory, exclusive=True)
    try:
        kinds, private = backup.kinds(), backup.private()
        total = len(kinds) + len(private)
        with store.rollback_point():
            store.remove_files(name for kind in store.kinds() if kind not in kinds
                               for name in (kind + ".json", kind + JOURNAL_SUFFIX))
            store.remove_files(n for n in store.private_names() if n not in private)
            for i, (kind, data) in enumerate(sorted(kinds.items()), 1):
                store.write_base(kind, data)
                progress(i, total, KINDS + kind + ".json")
            for i, (name, data) in enumerate(sorted(private.items()), len(kinds) + 1):
                store.write_private(name, data)
                progress(i, total, PRIVATE + name)
            # the feed's entries describe the replaced state: its readers resync
            store.feed.reset()
    finally:
        store.close()


# ---- scheduled backups -------------------------------------------------------------------

def scheduled_name(moment=None):
    moment = moment or datetime.datetime.now(datetime.timezone.utc)
    return f"appliance-backup-{moment.strftime('%Y%m%dT%H%M%S.%fZ')}{SUFFIX}"


def scheduled(directory, folder, keep, about=None):
    """One scheduled backup into `folder` (made 0700 if missing), then the oldest pruned
    down to `keep`. Returns (path, manifest, names removed)."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, scheduled_name())
    manifest = create(directory, path, about)
    return path, manifest, prune(folder, keep)


def prune(folder, keep):
    """Remove the oldest scheduled backups of `folder` beyond the newest `keep`; other
    files are never touched. Returns the names removed."""
    names = sorted(n for n in os.listdir(folder) if SCHEDULED.match(n))
    doomed = names[:-keep] if keep > 0 else names
    for name in doomed:
        try:
            os.unlink(os.path.join(folder, name))
        except FileNotFoundError:
            pass
    return doomed
