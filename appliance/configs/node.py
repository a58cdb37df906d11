"""The node side of configs: the driver the agent's runner hands `config` items to.

Files are written under `host.root` (a prefix directory in host tests, "/" on a node) and
only inside `host.allowed_roots`. The walk from the root to the file's directory goes one
component at a time through directory descriptors opened with O_NOFOLLOW, so what is
checked is what is written to (no check-then-use race): a symlink met on the way is
followed only when it points inside the allowed roots, and the file itself is created as a
temporary file in its directory (O_EXCL|O_NOFOLLOW), chowned, chmodded, fsynced and renamed
over the old one. Readers see the old file or the new one, never a part; a symlink at the
file's own name is replaced, never followed.

on_change runs once per changed delivery: when this apply changed the file's bytes, mode
or owner. A delivery that finds the file already right (a resync after a restart) runs
nothing.
"""

import datetime
import errno
import os
import posixpath
import secrets
import stat

from .paths import path_key

OUTPUT_TAIL = 4096
MAX_HOPS = 40       # symlinks followed in one path, as the kernel allows


class Refused(Exception):
    """An expected failure, reported as ERROR with this message."""


def _now_iso(ts=None):
    moment = datetime.datetime.fromtimestamp(ts, datetime.timezone.utc) if ts else \
        datetime.datetime.now(datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def inside(path, roots):
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def split(path):
    """Components of an absolute node path; Refused for a relative one or `.`/`..`."""
    if not path.startswith("/"):
        raise Refused(f"path {path!r} is not absolute")
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise Refused(f"path {path!r} has a '.' or '..' component")
    # the API refuses them too (configs/resources.py PATH): a node writes no "x\n"
    if any(c < " " or c == "\x7f" for c in path):
        raise Refused(f"path {path!r} holds a control character (a NUL, a newline, ...)")
    return parts


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


# ---- safe paths ---------------------------------------------------------------------------

class SafeDir:
    """An open directory of the node reached without leaving the allowed roots."""

    def __init__(self, host, path, create=False, private=None):
        """`create`: make missing directories inside the allowed roots, 0755 and the
        agent's, except those at or under `private` = (path, (uid, gid), mode)."""
        self.host = host
        self.private = private
        self.path, self.fd = self._open(path, create)

    def close(self):
        os.close(self.fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _made(self, path):
        """(mode, owner or None) of a directory this walk creates."""
        if self.private and inside(path, [self.private[0]]):
            return self.private[2], self.private[1]
        return 0o755, None

    def _open(self, path, create):
        roots = self.host.allowed_roots
        hops = 0
        while True:
            parts = split(path)
            fd = os.open(self.host.root, os.O_RDONLY | os.O_DIRECTORY)
            here = "/"
            try:
                for i, name in enumerate(parts):
                    nxt = posixpath.join(here, name)
                    try:
                        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                                        dir_fd=fd)
                    except FileNotFoundError:
                        if not create or not inside(nxt, roots):
                            raise Refused(f"directory {nxt} does not exist") from None
                        mode, owner = self._made(nxt)
                        os.mkdir(name, mode, dir_fd=fd)
                        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                                        dir_fd=fd)
                        os.fchmod(child, mode)      # whatever the umask
                        if owner is not None:
                            os.fchown(child, *owner)
                    except OSError as e:
                        if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                            raise
                        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                        if not stat.S_ISLNK(st.st_mode):
                            raise Refused(f"{nxt} is not a directory") from None
                        hops += 1
                        if hops > MAX_HOPS:
                            raise Refused(f"{path}: too many symlinks") from None
                        target = os.readlink(name, dir_fd=fd)
                        resolved = posixpath.normpath(posixpath.join(here, target))
                        if not inside(resolved, roots):
                            raise Refused(f"{nxt} is a symlink to {target}, outside the "
                                          "allowed roots") from None
                        path = "/".join([resolved] + parts[i + 1:])
                        break
                    os.close(fd)
                    fd, here = child, nxt
                else:
                    return here, fd
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)


def check_allowed(host, path):
    split(path)
    if not inside(posixpath.dirname(path), host.allowed_roots) or path in host.allowed_roots:
        raise Refused(f"path {path} is outside the allowed roots "
                      f"({', '.join(host.allowed_roots)})")


def write_atomic(dirfd, name, data, mode, uid, gid):
    """Write `name` in the open directory as a whole or not at all; True when what was
    there (bytes, mode, owner) differed."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dirfd)
    except OSError as e:
        if e.errno not in (errno.ENOENT, errno.ELOOP):
            raise
    else:
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == mode \
                    and st.st_uid == uid and st.st_gid == gid and st.st_size == len(data):
                with os.fdopen(os.dup(fd), "rb") as f:
                    if f.read() == data:
                        return False
        finally:
            os.close(fd)
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                 dir_fd=dirfd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchown(fd, uid, gid)
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dirfd)
        except OSError:
            pass
        raise
    os.fsync(dirfd)
    return True


def read_file(dirfd, name):
    """Bytes of a regular file in the open directory; None when absent. A symlink at that
    name is not followed (Refused)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dirfd)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Refused(f"{name} is a symlink") from None
        raise
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise Refused(f"{name} is not a regular file")
        return f.read()


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
            with SafeDir(self.host, posixpath.dirname(path), create=True) as d:
                changed = write_atomic(d.fd, posixpath.basename(path),
                                       value["content"].encode("utf-8"),
                                       int(value["mode"], 8), uid, gid)
                mtime = os.stat(posixpath.basename(path), dir_fd=d.fd,
                                follow_symlinks=False).st_mtime
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
            check_allowed(self.host, path)
            with SafeDir(self.host, posixpath.dirname(path)) as d:
                os.unlink(posixpath.basename(path), dir_fd=d.fd)
        except (Refused, FileNotFoundError):
            pass        # never written (refused) or already gone: nothing to undo
