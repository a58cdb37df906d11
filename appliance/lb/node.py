"""The node side of load balancers: the agent's driver of kind `lb` (docs/lb-dataplane.md).

One nginx instance per node serves every LB placed on it, apart from any other nginx
(the appliance's own API nginx, Debian's nginx.service). Its configuration is a
*generation*: a directory `CONF_DIR/gen-<n>` holding `nginx.conf`, each LB's
`lb-<lb>.http.conf` / `lb-<lb>.stream.conf` and `certs/<lb>/<vhost>.{crt,key}` (0600).
`CONF_DIR/current` is a symlink to the live one, and nginx runs with
`-c CONF_DIR/current/nginx.conf`, so its relative includes follow the symlink.

An apply renders the LB (nothing is shipped when it cannot be rendered), builds a
candidate generation (the live files of the other LBs plus this LB's new ones), checks it
with `nginx -t`, swaps `current` to it with one rename, and reloads (SIGHUP: new workers
take the new config, old ones finish their connections). The reload is confirmed from
nginx's error log; when nginx refuses it (a port taken), `current` goes back to the
previous generation. On any failure the LB is ERROR with nginx's message, and the last
good generation keeps serving.

The instance: a systemd unit (`appliance-lb.service`, written here) on a node with
systemd, else the driver starts `nginx -c ... -p RUN_DIR` itself. Either way nginx runs as
its own daemon (pid file in RUN_DIR), so an agent restart leaves it serving.

Runs on a node from the agent: stdlib and this package only.
"""

import datetime
import errno
import hashlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tarfile
import time

from appliance.tenancy import addresses, fetch

from . import nginx

CONF_DIR = "/etc/appliance/lb"
RUN_DIR = "/var/lib/appliance/lb"
UNIT = "appliance-lb.service"
UNIT_PATH = "/etc/systemd/system/" + UNIT
NGINX_BINARIES = ("/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx")
STREAM_MODULE = "/usr/lib/nginx/modules/ngx_stream_module.so"
OUTPUT_TAIL = 4096
RELOAD_SECONDS = 15.0
GEN = re.compile(r"^gen-(\d+)$")
LB_FILE = re.compile(r"^lb-([0-9a-f-]{36})\.(http|stream)\.conf$")
SETTING_LISTEN = "agent_lb_listen"
SETTING_STATS = "agent_lb_stats_seconds"
STATS_SECONDS = 30.0                    # the default: each reading is a report per LB
STATUS_SOCKET = "status.sock"
SUN_PATH_MAX = 107                      # sockaddr_un's path, less its final NUL
STUB = re.compile(rb"Active connections:\s*(\d+)\s+server accepts handled requests\s+"
                  rb"(\d+)\s+(\d+)\s+(\d+)\s+Reading:\s*(\d+)\s+Writing:\s*(\d+)\s+"
                  rb"Waiting:\s*(\d+)")
DOWNLOAD_TIMEOUT = 60
DOWNLOAD_DEADLINE = 1800                # seconds for one archive, all of it
DOWNLOAD_LIMIT = 2 * 1024 ** 3          # bytes of an archive, and of what it unpacks to


class Failed(Exception):
    """An expected failure: ERROR with this message (nginx's, where it has one)."""

    def __init__(self, reason, output=None):
        super().__init__(reason)
        self.output = output


def _now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def tail(text, limit=OUTPUT_TAIL):
    data = (text or "").encode("utf-8", "replace")
    return data[-limit:].decode("utf-8", "ignore")


def nginx_message(output):
    """nginx's own complaint in its output: the [emerg]/[alert]/[crit] lines."""
    lines = [ln.strip() for ln in (output or "").splitlines()]
    bad = [ln for ln in lines if re.search(r"\[(emerg|alert|crit)\]", ln)]
    return "; ".join(bad or [ln for ln in lines if ln][-1:]) or "nginx failed"


def unit_text(binary, conf, run_dir):
    return (
        "[Unit]\n"
        "Description=Load balancers of this node (nginx; the appliance agent writes its "
        "config)\n"
        "After=network-online.target\nWants=network-online.target\n\n"
        "[Service]\nType=forking\n"
        f"PIDFile={run_dir}/nginx.pid\n"
        # a killed nginx leaves its unix socket behind, and a new one cannot bind it
        f"ExecStartPre=-/bin/rm -f {run_dir}/{STATUS_SOCKET}\n"
        f"ExecStart={binary} -c {conf} -p {run_dir}/\n"
        "ExecReload=/bin/kill -HUP $MAINPID\n"
        "ExecStop=/bin/kill -QUIT $MAINPID\n"
        "TimeoutStopSec=10\nKillMode=mixed\nRestart=on-failure\n\n"
        "[Install]\nWantedBy=multi-user.target\n")


class Driver:
    def __init__(self, host):
        self.host = host
        settings = getattr(host, "settings", None) or {}
        self.listen = (settings.get(SETTING_LISTEN) or "").strip() or None
        # a node whose allowed roots leave these out gets its LBs in ERROR, while the
        # agent's other capabilities go on
        try:
            self.conf_dir, self.run_dir = host.path(CONF_DIR), host.path(RUN_DIR)
            self.refused = None
        except ValueError as e:
            self.conf_dir = self.run_dir = os.devnull
            self.refused = str(e)
        self.binary = next((b for b in NGINX_BINARIES if os.path.exists(b)), None) \
            or shutil.which("nginx")
        # a node booted with systemd gets a unit; a host test (a root prefix, no systemd)
        # gets nginx started by this driver
        self.systemd = host.root == "/" and os.path.isdir("/run/systemd/system")
        self._modules = None
        self.stats_seconds = float(settings.get(SETTING_STATS) or STATS_SECONDS)
        self._stats_due = 0.0

    # ---- paths -------------------------------------------------------------------------

    @property
    def conf_path(self):
        return os.path.join(self.conf_dir, "current", "nginx.conf")

    @property
    def pid_path(self):
        return os.path.join(self.run_dir, "nginx.pid")

    @property
    def error_log(self):
        return os.path.join(self.run_dir, "logs", "error.log")

    @property
    def status_socket(self):
        """The unix socket of nginx's stub_status, or None where its path would not fit
        in a socket address (a deep test root): then there are no nginx numbers."""
        path = os.path.join(self.run_dir, STATUS_SOCKET)
        return path if len(path.encode()) <= SUN_PATH_MAX and self.refused is None else None

    def nginx_status(self, timeout=1.0):
        """{active, accepted, handled, requests, reading, writing, waiting, read_at} from
        stub_status on the instance's unix socket, or None (no instance, no socket)."""
        path = self.status_socket
        if path is None or not os.path.exists(path):
            return None
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(timeout)
                s.connect(path)
                s.sendall(b"GET /stub_status HTTP/1.0\r\nHost: localhost\r\n\r\n")
                data = b""
                while len(data) < 4096:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
        except OSError:
            return None
        found = STUB.search(data)
        if found is None:
            return None
        names = ("active", "accepted", "handled", "requests", "reading", "writing",
                 "waiting")
        return {**dict(zip(names, map(int, found.groups()))), "read_at": _now_iso()}

    def live_generation(self):
        """The directory `current` points at, or None."""
        try:
            target = os.readlink(os.path.join(self.conf_dir, "current"))
        except OSError:
            return None
        return os.path.join(self.conf_dir, target) if GEN.match(target) else None

    # ---- the driver contract -------------------------------------------------------------

    def apply(self, item, applied):
        if self.refused:
            return {"status": "ERROR", "reason": self.refused,
                    "value": {"nginx_check": None, "applied_at": None}}
        try:
            # the LB's uuid names its files: nothing else may
            lb = nginx.lb_uuid(item.get("master"))
            wanted = nginx.downloads(item.get("value"))
        except nginx.RenderError as e:
            return {"status": "ERROR", "reason": f"not rendered: {e}",
                    "value": {"nginx_check": None, "applied_at": None}}
        try:
            dirs = self.fetch_downloads(lb, wanted, item.get("value"))
            rendered = nginx.render_lb(item.get("value"), listen=self.listen,
                                       local_root=self.host.root, download_dirs=dirs)
        except nginx.RenderError as e:
            return {"status": "ERROR", "reason": f"not rendered: {e}",
                    "value": {"nginx_check": None, "applied_at": None}}
        except Failed as e:
            return {"status": "ERROR", "reason": str(e),
                    "value": {"nginx_check": None, "applied_at": None}}
        try:
            self.prepare_local_dirs(item["value"])
            check = self.ship(lb, rendered)
            self.prune_downloads(lb, dirs)
        except Failed as e:
            return {"status": "ERROR", "reason": str(e),
                    "value": {"nginx_check": tail(e.output) or None, "applied_at": None}}
        refused = (item.get("value") or {}).get("refused")
        if refused:
            # served without them, but not as the owner asked: the LB says why
            return {"status": "ERROR", "reason": "; ".join(str(r) for r in refused),
                    "value": {"nginx_check": tail(check) or None,
                              "applied_at": _now_iso()}}
        return {"status": "ACTIVE", "reason": None,
                "value": {"nginx_check": tail(check) or None, "applied_at": _now_iso()}}

    def prepare_local_dirs(self, value):
        """A writable local_dir (dav_methods) exists and belongs to the workers' user,
        who write into it; a read-only one is only served."""
        for path, dav in nginx.local_dirs(value):
            if not dav:
                continue
            real = self.host.root.rstrip("/") + path
            try:
                os.makedirs(real, mode=0o755, exist_ok=True)
                user = self.worker_user()
                if user and os.geteuid() == 0:
                    entry = pwd.getpwnam(user)
                    os.chown(real, entry.pw_uid, entry.pw_gid)
            except OSError as e:
                raise Failed(f"local_dir {path}: {e.strerror or e}") from None

    # ---- local_dir_download: archives unpacked on the node --------------------------------

    def download_root(self, lb):
        return os.path.join(self.run_dir, "downloads", lb)

    def fetch_downloads(self, lb, wanted, value=None):
        """{route: directory} holding each wanted archive unpacked. A directory is named
        by its route and URL and appears whole (renamed into place when complete), so an
        unchanged URL is not fetched again and the live config keeps its own until the
        new one is shipped. Every fetch goes through the guarded fetcher with the address
        rule the platform sent for the LB's project (`reach`; none sent: nothing is
        fetched), and an archive already here is kept only while its URL still passes."""
        dirs = {}
        reach = None
        if wanted:
            try:
                reach = addresses.Reach.from_dict((value or {}).get("reach"))
            except ValueError as e:
                raise Failed(f"local_dir_download: no address rule from the platform "
                             f"({e}); nothing is fetched") from None
        for route, url in sorted(wanted.items()):
            if not isinstance(url, str) or not url.startswith(("http://", "https://")) \
                    or not url.endswith((".tar.gz", ".tar.zst")):
                raise Failed(f"local_dir_download {url!r}: an http(s) URL of a .tar.gz or "
                             ".tar.zst is needed")
            tag = hashlib.sha256(url.encode()).hexdigest()[:16]
            final = os.path.join(self.download_root(lb), f"{route}-{tag}")
            try:
                fetch.check_url(url, reach)
            except fetch.FetchError as e:
                raise Failed(f"local_dir_download {e}") from None
            if not os.path.isdir(final):
                unpack_url(url, final, reach)
            dirs[route] = final
        return dirs

    def prune_downloads(self, lb, dirs):
        root = self.download_root(lb)
        keep = {os.path.basename(d) for d in dirs.values()}
        for name in (os.listdir(root) if os.path.isdir(root) else []):
            if name not in keep:
                path = os.path.join(root, name)
                shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) \
                    else os.unlink(path)

    def remove(self, applied):
        if self.refused:
            return
        try:
            lb = nginx.lb_uuid(applied.get("master"))
        except nginx.RenderError:
            return                      # never shipped under that name
        live = self.live_generation()
        others = [f for f in self._lb_files(live) if LB_FILE.match(f).group(1) != lb] \
            if live else []
        if not others:
            self.stop_instance()
            shutil.rmtree(self.conf_dir, ignore_errors=True)
        else:
            self.ship(lb, None)
        shutil.rmtree(self.download_root(lb), ignore_errors=True)

    def tick(self, items):
        """An instance that died while LBs are applied (a node rebooted without systemd, a
        kill) is started again from the live generation. At most every
        `agent_lb_stats_seconds`, nginx's stub_status numbers go into each LB item's
        reported value as `readings.nginx` (the node's one instance serves them all;
        `readings` stay out of the LB's node_status, appliance/agent/status.py)."""
        if not items or self.refused:
            return []
        if not self.systemd and not self.running() and self.live_generation() is not None:
            self.host.log.warning("the LB nginx is not running; starting it again")
            try:
                self.start()
            except Failed as e:
                self.host.log.warning("LB nginx: %s", e)
            return []
        return self.stats_updates(items)

    def stats_updates(self, items, now=None):
        """[{uuid, value_update: {readings: {nginx}}}] of every item when a reading is
        due, else []."""
        now = time.monotonic() if now is None else now
        if now < self._stats_due:
            return []
        self._stats_due = now + self.stats_seconds
        stats = self.nginx_status()
        if stats is None:
            return []
        update = {"readings": {"nginx": stats}}
        return [{"uuid": item["uuid"], "value_update": update} for item in items]

    # ---- check, swap, reload -----------------------------------------------------------

    def ship(self, lb, rendered):
        """Make the live configuration the current one with `lb`'s part replaced by
        `rendered` (None: removed). Returns the output of `nginx -t`; Failed leaves the
        live generation as it was."""
        if self.binary is None:
            raise Failed("nginx is not installed on this node")
        if rendered is not None and rendered.stream and not self.stream_ready():
            raise Failed("this node's nginx has no stream module (Debian: install "
                         "libnginx-mod-stream) for the tcp/udp vhosts")
        os.makedirs(self.conf_dir, mode=0o755, exist_ok=True)
        for d in ("logs", "temp"):
            os.makedirs(os.path.join(self.run_dir, d), mode=0o755, exist_ok=True)
        live = self.live_generation()
        candidate = self._new_generation(live, lb, rendered)
        try:
            code, output = self.host.run([self.binary, "-t", "-c",
                                          os.path.join(candidate, "nginx.conf"),
                                          "-p", self.run_dir + "/"])
            if code != 0:
                raise Failed(nginx_message(output), output)
            self._point_current(candidate)
            try:
                if self.running():
                    self.reload()
                else:
                    self.start()
            except Failed:
                if live is None:
                    os.unlink(os.path.join(self.conf_dir, "current"))
                else:
                    self._point_current(live)
                raise
        except BaseException:
            shutil.rmtree(candidate, ignore_errors=True)
            raise
        for name in os.listdir(self.conf_dir):
            path = os.path.join(self.conf_dir, name)
            if GEN.match(name) and path != candidate:
                shutil.rmtree(path, ignore_errors=True)
        return output

    def _lb_files(self, generation):
        try:
            return sorted(f for f in os.listdir(generation) if LB_FILE.match(f))
        except (FileNotFoundError, TypeError):
            return []

    def _new_generation(self, live, lb, rendered):
        numbers = [int(GEN.match(n).group(1)) for n in os.listdir(self.conf_dir)
                   if GEN.match(n)]
        candidate = os.path.join(self.conf_dir, f"gen-{max(numbers, default=0) + 1}")
        os.mkdir(candidate, 0o755)
        try:
            # the other LBs' live files, unchanged
            for name in self._lb_files(live):
                if LB_FILE.match(name).group(1) != lb:
                    self._copy(os.path.join(live, name), os.path.join(candidate, name), 0o644)
            certs = os.path.join(live, "certs") if live else None
            for other in (os.listdir(certs) if certs and os.path.isdir(certs) else []):
                if other != lb:
                    for name in os.listdir(os.path.join(certs, other)):
                        self._copy(os.path.join(certs, other, name),
                              os.path.join(candidate, "certs", other, name), 0o600)
            if rendered is not None:
                for part in ("http", "stream"):
                    text = getattr(rendered, part)
                    if text:
                        self._write(os.path.join(candidate, f"lb-{lb}.{part}.conf"),
                               text.encode(), 0o644)
                for rel, data in rendered.files.items():
                    self._write(os.path.join(candidate, rel), data, 0o600)
            files = self._lb_files(candidate)
            main = nginx.render_main(
                [f for f in files if f.endswith(".http.conf")],
                [f for f in files if f.endswith(".stream.conf")],
                prefix=self.run_dir, user=self.worker_user(), modules=self.modules(),
                status_socket=self.status_socket)
            self._write(os.path.join(candidate, "nginx.conf"), main.encode(), 0o644)
        except BaseException:
            shutil.rmtree(candidate, ignore_errors=True)
            raise
        return candidate

    def _point_current(self, generation):
        link = os.path.join(self.conf_dir, "current")
        tmp = link + ".new"
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        os.symlink(os.path.basename(generation), tmp)
        os.replace(tmp, link)

    def worker_user(self):
        """The workers' user: www-data (Debian's nginx user) on a node; in a host test
        (a root prefix in a private temporary directory) the agent's own user, since
        another could not read the test's files."""
        if self.host.root != "/":
            return pwd.getpwuid(os.geteuid()).pw_name if os.geteuid() == 0 else None
        for name in ("www-data", "nobody"):
            try:
                pwd.getpwnam(name)
                return name
            except KeyError:
                continue
        return None

    def modules(self):
        if self._modules is None:
            code, out = self.host.run([self.binary, "-V"])
            dynamic = "--with-stream=dynamic" in (out or "")
            self._modules = [STREAM_MODULE] if dynamic and os.path.exists(STREAM_MODULE) \
                else []
            self._stream = "--with-stream" in (out or "") and (
                not dynamic or bool(self._modules))
        return self._modules

    def stream_ready(self):
        self.modules()
        return self._stream

    # ---- the instance ------------------------------------------------------------------

    def pid(self):
        try:
            with open(self.pid_path) as f:
                pid = int(f.read().strip())
        except (OSError, ValueError):
            return None
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return None
        # a recycled pid is someone else's
        return pid if "nginx" in cmdline else None

    def running(self):
        return self.pid() is not None

    def start(self):
        if self.systemd:
            self._write_unit()
            offset = _size(self.error_log)
            code, out = self.host.systemctl("enable", "--now", UNIT)
            if code != 0:
                # nginx's own words are in its log, systemd's only say that it failed
                logged = _read_from(self.error_log, offset)
                said = nginx_message(logged) if "[emerg]" in logged else tail(out, 400)
                raise Failed(f"{UNIT} did not start: {said}", logged + (out or ""))
            return
        # a killed nginx leaves its unix socket behind, and a new one cannot bind it
        if self.status_socket is not None:
            try:
                os.unlink(self.status_socket)
            except FileNotFoundError:
                pass
        # nginx daemonizes itself (its own session), so it outlives this agent
        code, out = self.host.run([self.binary, "-c", self.conf_path,
                                   "-p", self.run_dir + "/"])
        if code != 0:
            raise Failed(nginx_message(out), out)

    def _write_unit(self):
        self.host.ensure_unit(UNIT, unit_text(
            self.binary, os.path.join(CONF_DIR, "current", "nginx.conf"), RUN_DIR))

    # ---- files ------------------------------------------------------------------------

    def _write(self, path, data, mode):
        """The file at the real path `path` (under the node's root prefix), through the
        node toolbox. Keys (0600) in folders only their owner enters; the rest readable,
        for nginx's workers."""
        path = self.host.node_path(path)
        private = (os.path.dirname(path), None, 0o700) if mode == 0o600 else None
        self.host.write_file(path, data, mode, private=private)

    def _copy(self, src, dst, mode):
        with open(src, "rb") as f:
            self._write(dst, f.read(), mode)

    def reload(self):
        """SIGHUP, then wait until the error log says how it went: new workers started
        (applied) or an [emerg] (nginx kept the old configuration)."""
        offset = _size(self.error_log)
        pid = self.pid()
        old = _children(pid)
        if self.systemd:
            code, out = self.host.systemctl("reload", UNIT)
            if code != 0:
                raise Failed(f"systemctl reload {UNIT}: {tail(out, 400)}", out)
        else:
            try:
                os.kill(pid, signal.SIGHUP)
            except (TypeError, ProcessLookupError):
                return self.start()
        deadline = time.monotonic() + RELOAD_SECONDS
        while time.monotonic() < deadline:
            said = reload_said(_read_from(self.error_log, offset), old)
            if said == "applied":
                return None
            if said is not None:
                raise Failed("nginx refused the reload: " + nginx_message(said), said)
            time.sleep(0.02)
        raise Failed(f"nginx did not confirm the reload within {RELOAD_SECONDS:.0f} s "
                     f"(see {self.error_log})")

    def stop_instance(self, grace=5.0):
        """Stop the instance: graceful (SIGQUIT) for `grace` seconds, then fast (SIGTERM:
        open connections are closed), then SIGKILL; returns when it is gone."""
        if self.systemd:
            self.host.systemctl("disable", "--now", UNIT)
            return
        pid = self.pid()
        for signum in (signal.SIGQUIT, signal.SIGTERM, signal.SIGKILL):
            if pid is None or self.pid() != pid:
                return
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and self.pid() == pid:
                time.sleep(0.05)


# ---- archives -----------------------------------------------------------------------------

def unpack_url(url, final, reach):
    """Fetch a .tar.gz/.tar.zst through the guarded fetcher for `reach` and unpack it
    into `final` (made whole or not at all). Only directories and regular files are
    taken, each inside `final`: an archive with an absolute name, `..`, a link or a
    device is refused as a whole."""
    parent = os.path.dirname(final)
    os.makedirs(parent, mode=0o755, exist_ok=True)
    tmp = f"{final}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.mkdir(tmp, 0o755)
    try:
        with fetch.open_url(url, reach, DOWNLOAD_LIMIT, DOWNLOAD_DEADLINE,
                            timeout=DOWNLOAD_TIMEOUT) as resp:
            if url.endswith(".tar.zst"):
                zstd = shutil.which("zstd")
                if zstd is None:
                    raise Failed(f"local_dir_download {url}: zstd is not installed")
                proc = subprocess.Popen([zstd, "-dc"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                import threading
                feed = threading.Thread(target=_feed, args=(resp, proc.stdin), daemon=True)
                feed.start()
                try:
                    _untar(tarfile.open(fileobj=proc.stdout, mode="r|"), tmp, url)
                finally:
                    proc.kill()
                    proc.wait()
            else:
                _untar(tarfile.open(fileobj=_Limited(resp), mode="r|gz"), tmp, url)
        os.rename(tmp, final)
    except Failed:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    except fetch.FetchError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise Failed(f"local_dir_download {e}") from None
    except (OSError, tarfile.TarError, EOFError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise Failed(f"local_dir_download {url}: {e}") from None


class _Limited:
    """A response read up to DOWNLOAD_LIMIT bytes."""

    def __init__(self, resp):
        self.resp, self.read_bytes = resp, 0

    def read(self, n=-1):
        data = self.resp.read(n if n and n > 0 else 1 << 20)
        self.read_bytes += len(data)
        if self.read_bytes > DOWNLOAD_LIMIT:
            raise Failed(f"the archive is larger than {DOWNLOAD_LIMIT} bytes")
        return data


def _feed(resp, pipe):
    try:
        source = _Limited(resp)
        while chunk := source.read(1 << 20):
            pipe.write(chunk)
    except (OSError, Failed, fetch.FetchError):
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def _untar(tar, dest, url):
    total = 0
    with tar:
        for member in tar:
            name = member.name
            parts = [p for p in name.split("/") if p not in ("", ".")]
            if name.startswith("/") or ".." in parts or "\0" in name:
                raise Failed(f"local_dir_download {url}: {member.name!r} leaves the "
                             "directory")
            if not parts:
                continue
            path = os.path.join(dest, *parts)
            if member.isdir():
                os.makedirs(path, mode=0o755, exist_ok=True)
            elif member.isfile():
                total += member.size
                if total > DOWNLOAD_LIMIT:
                    raise Failed(f"local_dir_download {url}: unpacks to more than "
                                 f"{DOWNLOAD_LIMIT} bytes")
                os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                source = tar.extractfile(member)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                             0o644)
                with os.fdopen(fd, "wb") as out:
                    shutil.copyfileobj(source, out)
            else:
                raise Failed(f"local_dir_download {url}: {member.name!r} is not a file "
                             "or directory (links are refused)")


# ---- the reload, as nginx's error log tells it ------------------------------------------------

# the master's loop taking the new configuration up. Its signal handler's line ("signal 1
# (SIGHUP) received from N, reconfiguring") comes first, and can come before the first
# workers of a start still under way: their "start worker process" lines are then the
# old configuration's, not the reload's (a quick run at load 15 got "connection refused"
# on the port the reload added, 2026-11-28).
RECONFIGURING = re.compile(r"^.*#\d+: reconfiguring$", re.M)
STARTED = re.compile(r"start worker process (\d+)")


def reload_said(text, old, alive=lambda pid: os.path.exists(f"/proc/{pid}")):
    """What the error log since a SIGHUP (`text`) says of it: None while it is under way,
    "applied" once new workers run and every old one (`old`, the master's children at the
    SIGHUP, and any started before the master took the reload up) has stopped accepting
    (it says so, or is gone): from then on every new connection gets the new
    configuration. nginx's words from the reload on when it refused it (an [emerg])."""
    taken = RECONFIGURING.search(text)
    if taken is None:
        return None
    after = text[taken.start():]
    if re.search(r"\[(emerg|alert|crit)\]", after):
        return after
    old = set(old) | {int(w) for w in STARTED.findall(text[:taken.start()])}
    if STARTED.search(after) and all(
            not alive(w) or re.search(rf"\b{w}#\d+: gracefully shutting down", after)
            for w in old):
        return "applied"
    return None


# ---- files --------------------------------------------------------------------------------

def _children(pid):
    """The child processes (workers) of nginx's master `pid`."""
    if pid is None:
        return []
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def _size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _read_from(path, offset):
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")
    except OSError as e:
        if e.errno == errno.ENOENT:
            return ""
        raise
