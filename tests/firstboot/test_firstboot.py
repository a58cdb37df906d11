"""First boot on the host: a fake fw_cfg, seed, /etc and /root under tmp_path (Paths.root),
a real state directory, the real API and the real nginx serving the rendered site."""

import hashlib
import http.client
import json
import os
import re
import socket
import ssl
import stat
import subprocess
import sys

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from appliance import config
from appliance.firstboot import Paths, hand_over, nginx, run, sources, ssh, tls
from tests.apiserver import ApiServer, TOKEN_PATH
from tests.nginx import Nginx, free_port, nginx_binary, require_nginx

KEY_A = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBx5qZ8pZq9wLkQ0mJcBq4g8pE5rZ8e9G0kYd3t4u5v6 a@test"
KEY_B = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIO4y2b7cQ0q8Yv1mC3n5s9kLr0pW2xZ6dE7fH8jK9aB1 b@test"


def settings_for(state_dir):
    return config.load(environ={}, overrides={"state_dir": str(state_dir)})


def make_paths(tmp_path, fw=None, user_data=None, seed=True):
    """Paths under tmp_path/root, with fw_cfg entries `fw` (name -> bytes) and a seed
    directory holding `user_data` (text) when given."""
    root = tmp_path / "root"
    for name, raw in (fw or {}).items():
        entry = root / "sys/firmware/qemu_fw_cfg/by_name" / name
        entry.mkdir(parents=True)
        (entry / "raw").write_bytes(raw)
    seed_dir = tmp_path / "seed"
    seed_dir.mkdir(parents=True, exist_ok=True)
    if user_data is not None:
        (seed_dir / "user-data").write_text(user_data)
    return Paths(root=str(root), seed_dir=str(seed_dir) if seed else None)


def boot(tmp_path, paths, owner=None, systemctl=lambda *args: None):
    """First boot with systemctl a no-op (no systemd runs here): test_ondemand.py checks
    what it is asked."""
    return run(settings_for(tmp_path / "state"), paths, owner=owner, systemctl=systemctl)


def password_file(tmp_path):
    path = tmp_path / "state" / "admin-password"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    return path.read_text().strip()


def can_log_in(tmp_path, password):
    server = ApiServer(str(tmp_path / "state"), None).start()
    try:
        return server.token_response("admin", password).status == 200
    finally:
        server.stop()


# ---- inputs: fw_cfg, seed, generated ---------------------------------------------------

def test_fw_cfg_password_and_key_are_used_and_login_works(tmp_path):
    paths = make_paths(tmp_path, fw={"opt/appliance/admin-password": b"fw-secret-1\n",
                                     "opt/appliance/ssh-key": (KEY_A + "\n").encode()})
    boot(tmp_path, paths)
    assert password_file(tmp_path) == "fw-secret-1"
    assert can_log_in(tmp_path, "fw-secret-1")
    assert not can_log_in(tmp_path, "wrong")
    root_keys = (tmp_path / "root/root/.ssh/authorized_keys")
    assert root_keys.read_text() == KEY_A + "\n"
    assert stat.S_IMODE(root_keys.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "root/root/.ssh").stat().st_mode) == 0o700


def test_seed_password_and_keys_are_used(tmp_path):
    user_data = ("#cloud-config\n"
                 "appliance:\n  admin_password: seed-secret\n"
                 f"ssh_authorized_keys:\n  - {KEY_A}\n  - {KEY_B}\n")
    boot(tmp_path, make_paths(tmp_path, user_data=user_data))
    assert password_file(tmp_path) == "seed-secret"
    assert (tmp_path / "root/root/.ssh/authorized_keys").read_text() == f"{KEY_A}\n{KEY_B}\n"


def test_fw_cfg_wins_over_the_seed(tmp_path):
    user_data = ("#cloud-config\nappliance: {admin_password: seed-secret}\n"
                 f"ssh_authorized_keys: [{KEY_B}]\n")
    paths = make_paths(tmp_path, fw={"opt/appliance/admin-password": b"fw-secret",
                                     "opt/appliance/ssh-key": KEY_A.encode()},
                       user_data=user_data)
    given = sources.read(paths)
    assert (given.admin_password, given.ssh_keys) == ("fw-secret", [KEY_A])


def test_without_inputs_a_password_is_generated(tmp_path):
    boot(tmp_path, make_paths(tmp_path, seed=False))
    generated = password_file(tmp_path)
    assert len(generated) >= 20
    assert can_log_in(tmp_path, generated)
    assert not (tmp_path / "root/root/.ssh/authorized_keys").exists()


def test_an_existing_password_file_wins_over_a_later_fw_cfg(tmp_path):
    boot(tmp_path, make_paths(tmp_path / "first", seed=False))
    generated = password_file(tmp_path)
    later = make_paths(tmp_path / "second", fw={"opt/appliance/admin-password": b"late"})
    boot(tmp_path, later)
    assert password_file(tmp_path) == generated
    assert can_log_in(tmp_path, generated)
    assert not can_log_in(tmp_path, "late")


@pytest.mark.parametrize("raw", [b"", b"  \n", b"\xff\xfe not utf-8"])
def test_an_unusable_fw_cfg_value_is_ignored(tmp_path, raw):
    paths = make_paths(tmp_path, fw={"opt/appliance/admin-password": raw,
                                     "opt/appliance/ssh-key": raw})
    given = sources.read(paths)
    assert (given.admin_password, given.ssh_keys) == (None, [])
    boot(tmp_path, paths)
    assert len(password_file(tmp_path)) >= 20        # generated instead


@pytest.mark.parametrize("user_data", [
    "appliance: {admin_password: x}\n",                       # no #cloud-config header
    "#cloud-config\nappliance: [unclosed\n",                  # not YAML
    "#cloud-config\n- a list\n",                              # not a mapping
    "#cloud-config\nappliance: {admin_password: 12345}\n",    # not a string
    "#cloud-config\nappliance: {admin_password: '  '}\n",     # empty
    "#cloud-config\nappliance: just-a-string\n",              # section not a mapping
])
def test_a_bad_seed_password_is_ignored(tmp_path, user_data):
    assert sources.read(make_paths(tmp_path, user_data=user_data)).admin_password is None


def test_an_unreadable_seed_is_ignored(tmp_path):
    paths = make_paths(tmp_path)
    os.mkdir(os.path.join(paths.seed_dir, "user-data"))       # read() fails: a directory
    given = sources.read(paths)
    assert (given.admin_password, given.ssh_keys) == (None, [])
    (tmp_path / "seed" / "user-data").rmdir()
    (tmp_path / "seed" / "user-data").write_bytes(b"#cloud-config\n\xff\xfe\n")
    assert sources.read(paths).admin_password is None


def test_only_ssh_public_keys_reach_root(tmp_path):
    bad = ['command="/bin/sh" ' + KEY_B, "not-a-key", 42, ""]
    user_data = "#cloud-config\n" + json.dumps({"ssh_authorized_keys": [KEY_A] + bad})
    assert sources.read(make_paths(tmp_path, user_data=user_data)).ssh_keys == [KEY_A]


def test_no_seed_device_means_no_seed(tmp_path):
    paths = Paths(root=str(tmp_path))             # no /dev/disk/by-label/cidata there
    with sources.mounted_seed(paths) as seed_dir:
        assert seed_dir is None


# ---- idempotence and the root file system ------------------------------------------------

def test_a_second_boot_changes_nothing_kept_and_rewrites_the_root(tmp_path):
    paths = make_paths(tmp_path, fw={"opt/appliance/ssh-key": KEY_A.encode()})
    etc_ssh = tmp_path / "root/etc/ssh"
    etc_ssh.mkdir(parents=True)
    (etc_ssh / "ssh_host_rsa_key").write_text("baked into the image")
    (etc_ssh / "sshd_config").write_text("# kept\n")
    root_ssh = tmp_path / "root/root/.ssh"
    root_ssh.mkdir(parents=True)
    (root_ssh / "authorized_keys").write_text(KEY_B + "\n")
    first = boot(tmp_path, paths)
    host_key = (etc_ssh / "ssh_host_ed25519_key").read_bytes()
    password = password_file(tmp_path)
    # an upgrade: a new root without the site, the host keys or root's keys
    for path in [tmp_path / "root/etc/nginx/sites-enabled/appliance",
                 etc_ssh / "ssh_host_ed25519_key", root_ssh / "authorized_keys"]:
        path.unlink()
    second = boot(tmp_path, paths)
    assert second == first                          # same fingerprint, same password line
    assert (etc_ssh / "ssh_host_ed25519_key").read_bytes() == host_key
    assert password_file(tmp_path) == password
    assert (root_ssh / "authorized_keys").read_text() == KEY_A + "\n"
    assert (tmp_path / "root/etc/nginx/sites-enabled/appliance").exists()
    assert sorted(p.name for p in etc_ssh.iterdir()) == [
        "ssh_host_ecdsa_key", "ssh_host_ecdsa_key.pub", "ssh_host_ed25519_key",
        "ssh_host_ed25519_key.pub", "sshd_config"]
    third = boot(tmp_path, paths)
    assert third == first
    assert (root_ssh / "authorized_keys").read_text() == KEY_A + "\n"   # no duplicate


def test_host_keys_are_valid_openssh_keys(tmp_path):
    ssh.host_keys(str(tmp_path / "kept"), str(tmp_path / "etc"))
    for kind in ("ed25519", "ecdsa"):
        private = tmp_path / "etc" / f"ssh_host_{kind}_key"
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
        res = subprocess.run(["ssh-keygen", "-y", "-f", str(private)], capture_output=True,
                             text=True)
        if res.returncode == 127:
            pytest.skip("no ssh-keygen")
        assert res.returncode == 0, res.stderr
        public = (tmp_path / "etc" / f"ssh_host_{kind}_key.pub").read_text().split()[:2]
        assert res.stdout.split()[:2] == public


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_the_state_is_handed_to_the_service_user_but_keys_stay_roots(tmp_path):
    nobody = (65534, 65534)
    boot(tmp_path, make_paths(tmp_path, fw={"opt/appliance/ssh-key": KEY_A.encode()}),
         owner=nobody)
    state = tmp_path / "state"
    for top, dirs, files in os.walk(state):
        for name in [top] + [os.path.join(top, n) for n in dirs + files]:
            st = os.lstat(name)
            root_only = os.path.relpath(name, state).split(os.sep)[0] in ("ssh", "tls")
            assert (st.st_uid, st.st_gid) == ((0, 0) if root_only else nobody), name
    assert stat.S_IMODE(state.stat().st_mode) == 0o711
    assert stat.S_IMODE((state / "tls").stat().st_mode) == 0o700
    assert stat.S_IMODE((state / "tls/key.pem").stat().st_mode) == 0o600
    assert stat.S_IMODE((state / "ssh/authorized_keys").stat().st_mode) == 0o600
    hand_over(str(state), *nobody)                  # again: nothing left to change
    assert os.lstat(state / "admin-password").st_uid == nobody[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_the_dbaas_data_keeps_its_owner(tmp_path):
    """<state>/sqldb is PostgreSQL's (an instance on the appliance's own node): a boot's
    hand-over must not give it to the service user (PostgreSQL refuses a data directory
    that is not its own)."""
    state = tmp_path / "state"
    data = state / "sqldb" / "i1" / "data"
    data.mkdir(parents=True)
    (data / "PG_VERSION").write_text("15\n")
    os.chown(data, 100, 103)
    os.chown(data / "PG_VERSION", 100, 103)
    (state / "store.json").write_text("{}")
    hand_over(str(state), 65534, 65534)
    assert os.lstat(state / "store.json").st_uid == 65534
    assert (os.lstat(data).st_uid, os.lstat(data / "PG_VERSION").st_uid) == (100, 100)
    assert os.lstat(state / "sqldb").st_uid == 0


def test_the_mark_the_api_waits_for_comes_after_the_state_is_ready(tmp_path):
    paths = make_paths(tmp_path)
    mark = tmp_path / "root/run/appliance/firstboot-done"
    assert paths.done_mark == str(mark) and not mark.exists()
    umask = os.umask(0o077)                 # the unit's UMask: the mark must still be seen
    try:
        boot(tmp_path, paths, owner=(65534, 65534))
    finally:
        os.umask(umask)
    assert stat.S_IMODE(mark.parent.stat().st_mode) == 0o755
    assert stat.S_IMODE(mark.stat().st_mode) == 0o644
    # made after the hand-over: the API (api_wait_for) finds the state its user's
    assert mark.exists() and os.lstat(tmp_path / "state").st_uid == 65534
    assert os.lstat(tmp_path / "state" / "admin-password").st_mtime_ns <= \
        os.lstat(mark).st_mtime_ns


# ---- certificate -----------------------------------------------------------------------

def test_certificate_fingerprint_and_reuse(tmp_path):
    cert_path, key_path, cert = tls.ensure(str(tmp_path / "tls"), "box", ["10.0.2.15"])
    der = x509.load_pem_x509_certificate(open(cert_path, "rb").read()).public_bytes(
        serialization.Encoding.DER)
    expected = hashlib.sha256(der).hexdigest().upper()
    assert tls.fingerprint(cert).replace(":", "") == expected
    assert len(tls.fingerprint(cert).split(":")) == 32
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(a) for a in san.get_values_for_type(x509.IPAddress)} == {"127.0.0.1",
                                                                         "10.0.2.15"}
    assert stat.S_IMODE(os.stat(key_path).st_mode) == 0o600
    again = tls.ensure(str(tmp_path / "tls"), "box", ["10.9.9.9"])[2]
    assert tls.fingerprint(again) == tls.fingerprint(cert)      # kept, not made anew


@pytest.mark.parametrize("damage", ["garbage key", "other key", "no certificate"])
def test_an_unusable_certificate_is_replaced(tmp_path, damage):
    directory = str(tmp_path / "tls")
    cert_path, key_path, cert = tls.ensure(directory, "box")
    if damage == "garbage key":
        open(key_path, "w").write("not a key")
    elif damage == "other key":
        other = tls.make("box")[1]
        open(key_path, "wb").write(other.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
    else:
        os.unlink(cert_path)
    new = tls.ensure(directory, "box")[2]
    assert tls.fingerprint(new) != tls.fingerprint(cert)
    assert tls.ensure(directory, "box")[2] == new


# ---- banner ----------------------------------------------------------------------------

def test_banner_names_url_fingerprint_password_and_version(tmp_path):
    paths = make_paths(tmp_path)
    paths = Paths(root=paths.root, seed_dir=paths.seed_dir,
                  console=str(tmp_path / "console"))
    info = tmp_path / "root/etc/appliance/build-info.json"
    info.parent.mkdir(parents=True)
    info.write_text(json.dumps({"version": "0.1.0+test\\x", "recipe": "abc"}))
    text = boot(tmp_path, paths)
    fingerprint = tls.fingerprint(x509.load_pem_x509_certificate(
        (tmp_path / "state/tls/cert.pem").read_bytes()))
    assert fingerprint in text
    assert "appliance 0.1.0+test\\x" in text
    assert f"{tmp_path}/state/admin-password" in text
    assert "https://" in text
    assert (tmp_path / "console").read_text() == text
    # agetty reads backslash escapes: the issue file doubles the banner's backslashes
    issue = (tmp_path / "root/etc/issue.d/50-appliance.issue").read_text()
    assert issue == text.replace("\\", "\\\\")


def test_a_bad_build_info_falls_back_to_the_package_version(tmp_path):
    from appliance import __version__
    from appliance.firstboot import banner
    info = tmp_path / "build-info.json"
    for content in ("{not json", "[1]", '{"version": 3}'):
        info.write_text(content)
        assert banner.version(str(info)) == __version__
    assert banner.version(str(tmp_path / "missing")) == __version__


def test_the_address_is_found_without_a_default_route(monkeypatch):
    from appliance.firstboot import banner

    class Unrouted(socket.socket):
        def connect(self, address):
            raise OSError(101, "Network is unreachable")

    monkeypatch.setattr(banner.socket, "socket", Unrouted)
    monkeypatch.setattr(banner.socket, "if_nameindex", lambda: [(1, "lo"), (2, "nosuch0")])
    assert banner.primary_address() is None
    # this host's interfaces: whatever the first non-loopback one holds, or None
    monkeypatch.undo()
    monkeypatch.setattr(banner.socket, "socket", Unrouted)
    address = banner.primary_address()
    assert address is None or not address.startswith("127.")
    assert banner.interface_address("lo") == "127.0.0.1"


def test_the_module_refuses_to_run_outside_the_image(tmp_path):
    if os.path.exists(Paths().build_info):
        pytest.skip("this host is an appliance image")
    res = subprocess.run([sys.executable, "-m", "appliance.firstboot"], capture_output=True,
                         text=True, env={**os.environ, "APPLIANCE_STATE_DIR": str(tmp_path)},
                         timeout=60)
    assert res.returncode == 2
    assert "not an appliance image" in res.stderr
    assert os.listdir(tmp_path) == []


# ---- nginx: the rendered site on the real nginx, in front of the real API ----------------

def fingerprint_of_served(port):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
    conn.connect()
    der = conn.sock.getpeercert(binary_form=True)
    conn.close()
    return hashlib.sha256(der).hexdigest()


def https(port, cafile, method, path, body=None):
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.check_hostname = False       # the certificate names the box, not 127.0.0.1:<port>
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.fixture
def api(tmp_path):
    server = ApiServer(str(tmp_path / "state"), "nginx-test-pw").start()
    yield server
    server.stop()


def test_nginx_serves_the_api_over_https_at_every_prefix(tmp_path, api):
    require_nginx("http_ssl_module")
    cert_path, key_path, cert = tls.ensure(str(tmp_path / "tls"), "box")
    tls_port = free_port()
    body = nginx.server_body(cert_path, key_path, f"127.0.0.1:{api.port}", 32 * 1024 * 1024)
    with Nginx(f"listen 127.0.0.1:{tls_port} ssl;\n" + body, http_context=nginx.http_context()):
        assert fingerprint_of_served(tls_port).upper() == tls.fingerprint(cert).replace(":", "")
        for prefix in ("", "/api/core", "/api/dbaas"):
            status, raw = https(tls_port, cert_path, "GET", prefix + "/v1/health")
            assert status == 200, (prefix, raw)
            login = {"grant_type": "password", "username": "admin",
                     "password": "nginx-test-pw", "scope": ""}
            status, raw = https(tls_port, cert_path, "POST", prefix + TOKEN_PATH, login)
            assert status == 200, (prefix, raw)
            assert json.loads(raw)["access_token"]
        # the API's own errors pass through unchanged, JSON body included
        status, raw = https(tls_port, cert_path, "GET", "/api/core/v1/no-such-thing")
        assert status == 404
        assert set(json.loads(raw)) >= {"type", "code", "message"}
        bad_login = {"grant_type": "password", "username": "admin", "password": "wrong",
                     "scope": ""}
        status, raw = https(tls_port, cert_path, "POST", "/api/core" + TOKEN_PATH, bad_login)
        direct = api.client().post(TOKEN_PATH, bad_login)
        assert (status, json.loads(raw)) == (direct.status, direct.json)
        assert 400 <= status < 500


def test_the_site_file_is_valid_nginx_and_listens_only_on_443(tmp_path):
    require_nginx("http_ssl_module")
    cert_path, key_path, _ = tls.ensure(str(tmp_path / "tls"), "box")
    sites = tmp_path / "sites-enabled"
    sites.mkdir()
    (sites / "default").write_text("server { listen 80 default_server; }\n")
    path = nginx.write(str(sites), nginx.site(cert_path, key_path, "127.0.0.1:11010", 1024))
    assert os.listdir(sites) == ["appliance"]       # Debian's port-80 site is gone
    text = open(path).read()
    assert [line.split()[1:] for line in text.splitlines()
            if line.strip().startswith("listen")] == [["443", "ssl;"]]
    conf = tmp_path / "nginx.conf"
    conf.write_text(f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\n"
                    "events {}\n"
                    f"http {{ access_log off; client_body_temp_path {tmp_path}/body; "
                    f"proxy_temp_path {tmp_path}/proxy; include {sites}/*; }}\n")
    res = subprocess.run([nginx_binary(), "-t", "-c", str(conf), "-p", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("upstream", ["11010", "host:port", "a b:1", "x;y:1"])
def test_a_bad_upstream_is_refused(tmp_path, upstream):
    with pytest.raises(ValueError):
        nginx.server_body("/c.pem", "/k.pem", upstream, 1)


def test_a_path_nginx_would_misread_is_refused():
    with pytest.raises(ValueError):
        nginx.site('/state/"x.pem', "/k.pem", "127.0.0.1:1", 1)


def test_the_last_line_says_how_long_each_step_took(tmp_path, caplog):
    caplog.set_level("INFO", logger="appliance.firstboot")
    boot(tmp_path, make_paths(tmp_path, fw={"opt/appliance/admin-password": b"pw-123456789"}))
    line = caplog.records[-1].getMessage()
    took = re.fullmatch(r"first boot took (\d+\.\d) s: (.*)", line)
    assert took, line
    steps = dict(step.rsplit(" ", 1) for step in took.group(2).split(", "))
    assert list(steps) == ["code", "password", "ssh", "tls", "bootstrap", "node", "mark",
                           "after-mark"]
    # the code's time is this process's age: the test session's, minutes here, not 0
    assert float(steps["code"]) > 0
    assert abs(sum(map(float, steps.values())) - float(took.group(1))) < 0.1 * len(steps)
