"""The console banner's text: an address the host can reach and the forwarded-port hint,
where the admin password came from, the fingerprint in the exact form `appliance login
--fingerprint` takes and the whole login line, and the version with the recipe. The last
test copies the banner's login line, as a user would, and logs in with it through the real
nginx site in front of the real API on the state first boot made."""

import json
import re
import shlex

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from appliance.cli.trust import fingerprint_of, parse_fingerprint
from appliance.firstboot import banner, nginx, tls
from tests.apiserver import ApiServer
from tests.cli.conftest import Cli
from tests.firstboot.test_firstboot import boot, make_paths
from tests.nginx import Nginx, free_port, require_nginx

FW_PASSWORD = "opt/appliance/admin-password"
LOGIN_LINE = re.compile(r"^    appliance login --endpoint https://(\S+) --fingerprint (SHA256:\S+)$",
                        re.MULTILINE)


def served_der(tmp_path):
    pem = (tmp_path / "state/tls/cert.pem").read_bytes()
    return x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)


def test_the_fingerprint_is_the_form_login_takes_and_the_login_line_is_whole(tmp_path):
    text = boot(tmp_path, make_paths(tmp_path, fw={FW_PASSWORD: b"fw-pw"}))

    shown = re.search(r"TLS certificate:  (\S+)", text).group(1)
    assert shown == fingerprint_of(served_der(tmp_path))      # what the CLI computes
    assert parse_fingerprint(shown) == shown                    # and takes as it is
    host, in_login_line = LOGIN_LINE.search(text).groups()
    assert in_login_line == shown
    assert f"https://{host}/" in text                           # the API line's address


@pytest.mark.parametrize("fw, user_data, origin", [
    ({FW_PASSWORD: b"fw-pw"}, None, "(given through fw_cfg opt/appliance/admin-password)"),
    ({}, "#cloud-config\nappliance: {admin_password: seed-pw}\n",
     "(given in the NoCloud seed's appliance.admin_password)"),
    ({}, None, "(generated at first boot)"),
])
def test_the_banner_says_where_the_password_came_from(tmp_path, fw, user_data, origin):
    text = boot(tmp_path, make_paths(tmp_path, fw=fw, user_data=user_data))
    assert f"admin password of user 'admin' is in {tmp_path}/state/admin-password {origin}" in text
    again = boot(tmp_path, make_paths(tmp_path / "again", fw=fw, user_data=user_data))
    assert origin in again                                      # every boot still says it


def test_a_later_boot_says_a_different_given_password_is_ignored(tmp_path):
    boot(tmp_path, make_paths(tmp_path / "first", seed=False))
    text = boot(tmp_path, make_paths(tmp_path / "second", fw={FW_PASSWORD: b"late"}))
    assert ("(generated at first boot; a different password given through fw_cfg "
            "opt/appliance/admin-password at this boot is ignored: it is set once)") in text


def test_the_banner_shows_every_address_the_port_and_the_forwarded_port():
    fingerprint = fingerprint_of(b"certificate")
    text = banner.text(["10.0.2.15", "192.168.7.9"], fingerprint,
                       "admin password of user 'admin' is in /x", "0.1.0+abc")
    assert text.splitlines()[1] == "appliance 0.1.0+abc"
    assert "https://10.0.2.15/  (port 443 of 10.0.2.15, 192.168.7.9;" in text
    assert "or the host port forwarded to 443" in text
    assert f"  TLS certificate:  {fingerprint}\n" in text
    assert "  Web console:      https://10.0.2.15/console/\n" in text
    assert (f"\n    appliance login --endpoint https://10.0.2.15 --fingerprint {fingerprint}\n"
            in text)
    # no address found at all: the banner says so instead of showing a wrong one
    assert "https://<this machine's address>/" in banner.text([], fingerprint, "p", "v")


def test_the_addresses_put_the_primary_first_and_leave_loopback_out():
    found = banner.addresses("10.9.8.7")
    assert found[0] == "10.9.8.7" and "127.0.0.1" not in found
    assert len(found) == len(set(found))


@pytest.mark.parametrize("info, label", [
    ({"version": "0.1.0", "recipe_hash": "0123456789abcdef"}, "0.1.0+0123456789abcdef"),
    ({"version": "0.1.0+t1", "recipe_hash": "0123456789abcdef"}, "0.1.0+t1.0123456789abcdef"),
    ({"version": "0.1.0"}, "0.1.0"),
])
def test_the_version_carries_the_recipe(tmp_path, info, label):
    path = tmp_path / "build-info.json"
    path.write_text(json.dumps(info))
    assert banner.version(str(path)) == label


def test_the_login_line_of_the_banner_logs_in_through_the_forwarded_port(tmp_path):
    """What docs/boot.md tells the user: copy the banner's line, with the host's forwarded
    port in place of the guest's address."""
    require_nginx("http_ssl_module")
    text = boot(tmp_path, make_paths(tmp_path, fw={FW_PASSWORD: b"banner-pw"}))
    host, _ = LOGIN_LINE.search(text).groups()
    api = ApiServer(str(tmp_path / "state"), None).start()
    port = free_port()
    body = nginx.server_body(str(tmp_path / "state/tls/cert.pem"),
                             str(tmp_path / "state/tls/key.pem"), f"127.0.0.1:{api.port}",
                             32 * 1024 * 1024)
    try:
        with Nginx(f"listen 127.0.0.1:{port} ssl;\n" + body, http_context=nginx.http_context()):
            line = LOGIN_LINE.search(text).group(0).strip()
            argv = shlex.split(line.replace(f"https://{host}", f"https://127.0.0.1:{port}"))
            cli = Cli(tmp_path / "config", None)
            result = cli(*argv[1:], "--password-stdin", stdin="banner-pw\n")
            assert result.code == 0, result.stderr
            assert cli("whoami").code == 0
    finally:
        api.stop()
    assert tls.pin(x509.load_pem_x509_certificate(
        (tmp_path / "state/tls/cert.pem").read_bytes())) == cli.session()["tls"]["fingerprint"]
