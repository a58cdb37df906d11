"""The one writer of whole files on a node (docs/node-toolbox.md): the agent's drivers
(through `Host.write_file`), the agent's own state, first boot and the development node
all replace a file here, and nowhere else.

A file on a node may be read at the moment it is replaced (by nginx, PostgreSQL, sshd,
systemd, a user), and its directory may hold a symlink an unprivileged user placed to make
root write elsewhere. So every write:
- walks from the root to the file's directory one component at a time through directory
  descriptors opened with O_NOFOLLOW (`SafeDir`): what is checked is what is written to,
  with no check-then-use race; a symlink met on the way is followed only when it points
  inside the allowed roots;
- creates a temporary file beside the target with O_EXCL|O_NOFOLLOW, gives it its owner and
  mode before any byte is written (a key is never readable by others, not even for a
  moment), fsyncs it and renames it over the old name (a reader sees the old file or the
  new, never a part; a crash leaves the old file), then fsyncs the directory (the rename
  survives a power loss); a symlink at the file's own name is replaced, never followed;
- writes nothing when the file already has these bytes, this mode and this owner, and says
  so (False): a caller runs its "on change" action (a reload, a restart) only on True.

Store files are not written here: the store has its own writer (state/storage.py).
"""

import errno
import os
import posixpath
import stat

MAX_HOPS = 40       # symlinks followed in one path, as the kernel allows
EVERYWHERE = ("/",)


class PathRefused(ValueError):
    """A path that may not be written or read; its message says why."""


class MissingDirectory(FileNotFoundError, PathRefused):
    """A directory on the way does not exist (and was not to be made). Also an OSError:
    code that catches what the system says keeps catching it."""


class NotADirectory(NotADirectoryError, PathRefused):
    """Something other than a directory where the walk needs one."""


def inside(path, roots):
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def split(path):
    """Components of an absolute path; PathRefused for a relative one, `.`/`..`, or a
    control character."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise PathRefused(f"path {path!r} is not absolute")
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise PathRefused(f"path {path!r} has a '.' or '..' component")
    # the API refuses them too (configs/resources.py PATH): a node writes no "x\n"
    if any(c < " " or c == "\x7f" for c in path):
        raise PathRefused(f"path {path!r} holds a control character (a NUL, a newline, ...)")
    return parts


def check_allowed(path, allowed_roots):
    """PathRefused unless `path` names a file inside one of `allowed_roots` (a root itself
    is not a file to write)."""
    split(path)
    if not inside(posixpath.dirname(path), allowed_roots) or path in allowed_roots:
        raise PathRefused(f"path {path} is outside the allowed roots "
                          f"({', '.join(allowed_roots)})")


class SafeDir:
    """An open directory reached from `root` without leaving the allowed roots."""

    def __init__(self, root, allowed_roots, path, create=False, private=None):
        """`create`: make missing directories inside the allowed roots, 0755 and the
        writer's, except those at or under `private` = (path, (uid, gid) or None, mode)."""
        self.root = root
        self.allowed_roots = list(allowed_roots)
        self.private = private
        if create and root != "/":
            # a test's node: its root prefix is made with its first file
            os.makedirs(root, mode=0o755, exist_ok=True)
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
        roots = self.allowed_roots
        hops = 0
        while True:
            parts = split(path)
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
            here = "/"
            try:
                for i, name in enumerate(parts):
                    nxt = posixpath.join(here, name)
                    try:
                        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                                        dir_fd=fd)
                    except FileNotFoundError:
                        if not create or not inside(nxt, roots):
                            raise MissingDirectory(f"directory {nxt} does not exist") from None
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
                            raise NotADirectory(f"{nxt} is not a directory") from None
                        hops += 1
                        if hops > MAX_HOPS:
                            raise PathRefused(f"{path}: too many symlinks") from None
                        target = os.readlink(name, dir_fd=fd)
                        resolved = posixpath.normpath(posixpath.join(here, target))
                        if not inside(resolved, roots):
                            raise PathRefused(f"{nxt} is a symlink to {target}, outside "
                                              "the allowed roots") from None
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


def _same(dirfd, name, data, mode, owner):
    """True when `name` is a regular file with these bytes, mode and owner."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dirfd)
    except OSError as e:
        if e.errno not in (errno.ENOENT, errno.ELOOP):
            raise
        return False
    try:
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == mode
                and st.st_size == len(data)):
            return False
        if owner is not None and (st.st_uid, st.st_gid) != tuple(owner):
            return False
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read() == data
    finally:
        os.close(fd)


def _replace(dirfd, name, data, mode, owner, sync):
    tmp = f".{name}.{os.urandom(6).hex()}.tmp"   # not `secrets`: the agent stays small
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                 dir_fd=dirfd)
    try:
        try:
            if owner is not None:
                os.fchown(fd, *owner)
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if sync:
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
    if sync:
        os.fsync(dirfd)


def write_file(path, data, mode=0o644, owner=None, *, root="/", allowed_roots=EVERYWHERE,
               private=None, sync=True):
    """Make the file at the absolute `path` (under the directory `root`, inside
    `allowed_roots`) hold `data` (bytes, or str written as UTF-8) with `mode` and `owner`
    ((uid, gid); None: the writer's, and an existing file's owner is not compared).
    Missing directories are made (see SafeDir: `private`). True when the file changed,
    False when it was already so (nothing is written then). PathRefused for a path outside
    the allowed roots or through a symlink out of them; OSError as the system says.

    sync=False skips both fsyncs: a crash of the process still leaves a whole file, only a
    power loss may bring back the previous version. Only the agent's own state takes it
    (Host.write_state: one fsync for a batch of items); Host.write_file always syncs."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    elif not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"write_file wants bytes or str, not {type(data).__name__}")
    data = bytes(data)
    check_allowed(path, allowed_roots)
    directory, name = posixpath.split(path)
    with SafeDir(root, allowed_roots, directory, create=True, private=private) as d:
        if _same(d.fd, name, data, mode, owner):
            return False
        _replace(d.fd, name, data, mode, owner, sync)
    return True


def read_file(path, *, root="/", allowed_roots=EVERYWHERE):
    """Bytes of the regular file at `path`; None when it or its directory is absent.
    PathRefused when a symlink sits at its name (not followed) or on the way out of the
    allowed roots, or when it is not a regular file."""
    check_allowed(path, allowed_roots)
    directory, name = posixpath.split(path)
    try:
        d = SafeDir(root, allowed_roots, directory)
    except MissingDirectory:
        return None
    with d:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=d.fd)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise PathRefused(f"{path} is a symlink") from None
            raise
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise PathRefused(f"{path} is not a regular file")
            return f.read()


def stat_file(path, *, root="/", allowed_roots=EVERYWHERE):
    """os.stat of what is at `path` (a symlink there is not followed), reached as
    write_file reaches it; FileNotFoundError when absent."""
    check_allowed(path, allowed_roots)
    directory, name = posixpath.split(path)
    try:
        d = SafeDir(root, allowed_roots, directory)
    except MissingDirectory:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path) from None
    with d:
        return os.stat(name, dir_fd=d.fd, follow_symlinks=False)


def remove_file(path, *, root="/", allowed_roots=EVERYWHERE):
    """Unlink the file at `path` (a symlink there is unlinked, not followed); True when
    something was there."""
    check_allowed(path, allowed_roots)
    directory, name = posixpath.split(path)
    try:
        with SafeDir(root, allowed_roots, directory) as d:
            os.unlink(name, dir_fd=d.fd)
    except (FileNotFoundError, MissingDirectory):
        return False
    return True
