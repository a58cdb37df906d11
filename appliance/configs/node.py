"""The node side of configs: the driver the agent's runner hands `config` items to.

Files are written with the node toolbox, `host.write_file` (appliance/files.py,
docs/node-toolbox.md): under `host.root` (a prefix directory in host tests, "/" on a
node), only inside `host.allowed_roots`, through a walk that follows no symlink out of
them, as a whole (a temporary file renamed over the old one) and not at all when the
file is already right. A symlink at the file's own name is replaced, never followed.

on_change runs once per changed delivery: when this apply changed the file's bytes, mode
or owner. A delivery that finds the file already right (a resync after a restart) runs
nothing.
"""

import datetime
import os

from appliance import files
from appliance.files import PathRefused

from .paths import path_key

OUTPUT_TAIL = 4096
# an expected failure, reported as ERROR with this message
Refused = PathRefused


def _now_iso(ts=None):
    moment = datetime.datetime.fromtimestamp(ts, datetime.timezone.utc) if ts else \
        datetime.datetime.now(datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# ---- users and groups of the node ---------------------------------------------------------

def _table(root, name):
    """Rows of <root>/etc/<name> split on ':'; None when the file is absent."""
    try:
        with open(os.path.join(root, "etc", name), encoding="utf-8") as f:
            return [line.rstrip("\n").split(":") for line in f if line.strip()
                    and not line.startswith("#")]
    except FileNotFoundError:
        return None


def user_entry(root, owner):
    """(uid, gid, home) of a user of the node (its passwd, else the host's when the root
    prefix has none); Refused when unknown."""
    rows = _table(root, "passwd") if root != "/" else None
    if rows is None:
        import pwd
        try:
            entry = pwd.getpwuid(int(owner)) if owner.isdigit() else pwd.getpwnam(owner)
            return entry.pw_uid, entry.pw_gid, entry.pw_dir
        except (KeyError, OverflowError):
            if owner.isdigit():
                return int(owner), None, None
            raise Refused(f"owner {owner}: no such user on this node") from None
    for row in rows:
        if len(row) >= 6 and (row[0] == owner or (owner.isdigit() and row[2] == owner)):
            return int(row[2]), int(row[3]), row[5]
    if owner.isdigit():
        return int(owner), None, None
    raise Refused(f"owner {owner}: no such user on this node")


def group_id(root, group):
    rows = _table(root, "group") if root != "/" else None
    if group.isdigit():
        return int(group)
    if rows is None:
        import grp
        try:
            return grp.getgrnam(group).gr_gid
        except KeyError:
            raise Refused(f"group {group}: no such group on this node") from None
    for row in rows:
        if len(row) >= 3 and row[0] == group:
            return int(row[2])
    raise Refused(f"group {group}: no such group on this node")


def check_allowed(host, path):
    files.check_allowed(path, host.allowed_roots)


def tail(text, limit=OUTPUT_TAIL):
    data = text.encode("utf-8", "replace")
    return data[-limit:].decode("utf-8", "ignore")


class Driver:
    def __init__(self, host):
        self.host = host

    def claim(self, item):
        """The file an item writes, as the runner compares them: of two items that claim
        one file (configs/paths.py), removing or refusing one must not undo the other."""
        value = (item or {}).get("value")
        return path_key(value["path"]) if value else None

    def apply(self, item, applied):
        value = item["value"]
        path = value["path"]
        actual = {"exit_code": None, "output": "", "changed_at": None}
        try:
            check_allowed(self.host, path)
            uid, _, _ = user_entry(self.host.root, value["owner"])
            gid = group_id(self.host.root, value["group"])
            changed = self.host.write_file(path, value["content"].encode("utf-8"),
                                           int(value["mode"], 8), (uid, gid))
            mtime = self.host.stat_file(path).st_mtime
        except Refused as e:
            return {"status": "ERROR", "reason": str(e), "value": actual}
        except OSError as e:
            return {"status": "ERROR", "reason": f"{path}: {e.strerror or e}",
                    "value": actual}
        actual["changed_at"] = _now_iso(mtime)
        on_change = value.get("on_change") or {}
        if changed and on_change.get("kind") == "shell":
            code, output = self.host.run(["/bin/sh", "-c", on_change["command"]])
            actual.update(exit_code=code, output=tail(output or ""))
            if code != 0:
                return {"status": "ERROR", "reason": f"on_change exited with {code}",
                        "value": actual}
        return {"status": "ACTIVE", "reason": None, "value": actual}

    def remove(self, applied):
        value = (applied or {}).get("value")
        if not value:
            return
        path = value["path"]
        try:
            self.host.remove_file(path)
        except Refused:
            pass        # never written (refused): nothing to undo
