"""`appliance login` to an https endpoint with a self-signed certificate, as the appliance
image serves it: pinned by the fingerprint its banner shows, trusted on first use, or by a
CA file; and every later command checked against the pin.

The endpoint is real: the image's own nginx site (appliance/firstboot/nginx.py) on a
loopback port, with a certificate made by first boot's tls.py, in front of the real API on
Waitress. No SSL_CERT_FILE or other trust-store tricks: the CLI trusts only what it is told.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from cryptography.hazmat.primitives import serialization

from appliance.cli.client import TOKEN_PATH
from appliance.cli.session import Session
from appliance.cli.trust import Trust, fingerprint_of, parse_fingerprint
from appliance.firstboot import nginx as site
from appliance.firstboot import tls

from tests.conftest import ADMIN_PASSWORD
from tests.nginx import Nginx, free_port, require_nginx

from .conftest import Cli

INTROSPECT = "/v1/iam/clients/default/actions/introspect"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class TlsFront:
    """The image's nginx site on 127.0.0.1:<port>, serving the certificate in `directory`
    (tls.ensure's cert.pem and key.pem); restart(new_certificate=True) makes it serve a new
    one on the same port, as a re-installed appliance would."""

    def __init__(self, directory, api_port):
        self.directory, self.api_port = str(directory), api_port
        self.port = free_port()
        self.nginx = None
        self.cert_path, self.key_path, self.cert = tls.ensure(self.directory, "appliance-test")

    @property
    def endpoint(self):
        return f"https://127.0.0.1:{self.port}"

    @property
    def fingerprint(self):
        """What the banner prints: SHA256: and first boot's own fingerprint form."""
        return "SHA256:" + tls.fingerprint(self.cert)

    def start(self):
        body = site.server_body(self.cert_path, self.key_path, f"127.0.0.1:{self.api_port}",
                                32 * 1024 * 1024)
        self.nginx = Nginx(f"listen 127.0.0.1:{self.port} ssl;\n" + body,
                           http_context=site.http_context()).start()
        return self

    def stop(self):
        if self.nginx is not None:
            self.nginx.cleanup()
            self.nginx = None

    def restart(self, new_certificate=False):
        self.stop()
        if new_certificate:
            os.unlink(os.path.join(self.directory, tls.CERT_FILE))
            self.cert_path, self.key_path, self.cert = tls.ensure(self.directory, "appliance-test")
        return self.start()

    def requests_to(self, path):
        """How many requests for `path` reached nginx (its access log)."""
        return sum(f" {path} " in line for line in self.nginx.access_log().splitlines())


@pytest.fixture
def front(real_api, tmp_path):
    require_nginx("http_ssl_module")
    served = TlsFront(tmp_path / "tls", real_api.port).start()
    yield served
    served.stop()


@pytest.fixture
def cli(tmp_path):
    """A CLI with no endpoint preset and no terminal."""
    return Cli(tmp_path / "config", None)


def login(cli, front, *options, stdin=ADMIN_PASSWORD + "\n"):
    return cli("login", "--endpoint", front.endpoint, "--password-stdin", *options, stdin=stdin)


# --- --fingerprint ----------------------------------------------------------------------------


def test_login_with_the_banner_fingerprint_pins_it_for_later_commands(cli, front):
    result = login(cli, front, "--fingerprint", front.fingerprint)

    assert result.code == 0, result.stderr
    assert f"trusting the pinned certificate {front.fingerprint}" in result.stdout
    assert cli.session()["tls"] == {"fingerprint": front.fingerprint, "ca_file": None,
                                    "insecure": False}
    whoami = cli("--json", "whoami")
    assert whoami.code == 0, whoami.stderr
    assert whoami.json()["user_info"]["username"] == "admin"
    created = cli("--json", "create", "iam/projects", "name=pinned-demo")
    assert created.code == 0, created.stderr
    assert cli("--json", "show", f"iam/projects/{created.json()['uuid']}").json()["name"] == "pinned-demo"
    assert front.requests_to(INTROSPECT) == 1  # the commands went through the TLS endpoint
    assert result.stderr == whoami.stderr == ""


def test_the_fingerprint_is_read_in_the_forms_people_copy():
    der = b"any certificate"
    banner_form = fingerprint_of(der)
    bare_hex = banner_form.removeprefix("SHA256:").replace(":", "").lower()
    for given in (banner_form, banner_form.lower(), bare_hex, "sha256:" + bare_hex,
                  banner_form.removeprefix("SHA256:"), f"  {banner_form}\n"):
        assert parse_fingerprint(given) == banner_form, given


@pytest.mark.parametrize("bad", ["SHA256:", "SHA256:AB:CD", "MD5:" + "AB:" * 15 + "AB",
                                 "SHA256:" + "ZZ:" * 31 + "ZZ", "SHA256:" + "A" * 63])
def test_a_malformed_fingerprint_is_a_usage_error_that_shows_the_form(cli, front, bad):
    result = login(cli, front, "--fingerprint", bad)

    assert result.code == 2
    assert "SHA256:AB:CD:...:EF" in result.stderr and "banner" in result.stderr
    assert not cli.session_path.exists() and cli.sent == []


def test_a_wrong_fingerprint_is_refused_and_nothing_is_sent_or_saved(cli, front):
    """The attack: a server that is not the appliance (here: the fingerprint of another
    certificate) would receive the password. Refused after the handshake, before any byte of
    the request: nginx sees no token request, and no session is written."""
    other = "SHA256:" + tls.fingerprint(tls.make("impostor")[0])

    result = login(cli, front, "--fingerprint", other)

    assert result.code == 1
    assert f"has fingerprint {front.fingerprint}, not the {other}" in result.stderr
    assert "Nothing was sent and nothing was saved" in result.stderr
    assert not cli.session_path.exists()
    assert front.requests_to(TOKEN_PATH) == 0


def test_fingerprint_options_on_a_plain_http_endpoint_are_usage_errors(cli, real_api):
    url = f"http://127.0.0.1:{real_api.port}"
    for options in (["--fingerprint", "SHA256:" + "AB:" * 31 + "AB"], ["--insecure"],
                    ["--ca-file", "/etc/hostname"]):
        result = cli("login", "--endpoint", url, "--password-stdin", *options,
                     stdin=ADMIN_PASSWORD + "\n")
        assert result.code == 2 and "is for https endpoints" in result.stderr, options
    assert cli("login", "--endpoint", url, "--password-stdin",
               stdin=ADMIN_PASSWORD + "\n").code == 0  # plain http as before: no tls kept
    assert cli.session()["tls"] is None


def test_trust_options_exclude_each_other(cli, front):
    result = login(cli, front, "--fingerprint", front.fingerprint, "--insecure")
    assert result.code == 2 and "not allowed with argument" in result.stderr


# --- trust on first use -----------------------------------------------------------------------


def test_first_use_shows_the_fingerprint_and_pins_it_when_the_user_says_yes(cli, front):
    questions = []
    cli.ask = lambda question: questions.append(question) or "yes\n"

    result = login(cli, front)

    assert result.code == 0, result.stderr
    assert len(questions) == 1
    assert front.fingerprint in questions[0] and "(yes/no)?" in questions[0]
    assert "self-signed certificate" in questions[0]  # why this machine's CAs refuse it
    assert cli.session()["tls"]["fingerprint"] == front.fingerprint
    assert cli("whoami").code == 0
    # the next login to the same endpoint keeps the pin and asks nothing (known_hosts)
    questions.clear()
    assert login(cli, front).code == 0
    assert questions == [] and cli.session()["tls"]["fingerprint"] == front.fingerprint


def test_first_use_answered_no_sends_no_password_and_saves_nothing(cli, front):
    cli.ask = lambda question: "no\n"

    result = cli("login", "--endpoint", front.endpoint, tty=True)

    assert result.code == 1 and "not trusted" in result.stderr
    assert cli.prompts == []  # the password was not even asked for
    assert not cli.session_path.exists() and front.requests_to(TOKEN_PATH) == 0


def test_without_a_terminal_login_refuses_and_says_how_to_pass_the_fingerprint(cli, front):
    result = login(cli, front)

    assert result.code == 1
    assert "no terminal" in result.stderr
    assert (f"appliance login --endpoint {front.endpoint} --fingerprint {front.fingerprint}"
            in result.stderr)
    assert not cli.session_path.exists() and front.requests_to(TOKEN_PATH) == 0


def test_first_use_on_a_real_pseudo_terminal(front, tmp_path):
    """The installed command, run by `script` on a pseudo-terminal: the question goes to
    /dev/tty, and "yes" typed there pins the certificate."""
    if shutil.which("script") is None:
        pytest.skip("util-linux `script` is not installed")
    config = tmp_path / "tty-config"
    command = (f"{sys.executable} -m appliance.cli.main login --endpoint {front.endpoint} "
               "--username admin")
    env = {**os.environ, "APPLIANCE_CLI_CONFIG_DIR": str(config),
           "APPLIANCE_PASSWORD": ADMIN_PASSWORD, "PYTHONPATH": ROOT}
    proc = subprocess.Popen(["script", "-qec", command, "/dev/null"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    try:
        proc.stdin.write(b"yes\n")
        proc.stdin.flush()
        output = proc.stdout.read().decode(errors="replace")
        proc.wait(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, output
    assert front.fingerprint in output and "(yes/no)?" in output
    session = json.loads((config / "session.json").read_text())
    assert session["tls"]["fingerprint"] == front.fingerprint


# --- a certificate that changes -------------------------------------------------------------


def test_a_changed_certificate_is_refused_with_both_fingerprints_and_the_way_to_re_pin(cli, front):
    assert login(cli, front, "--fingerprint", front.fingerprint).code == 0
    old = front.fingerprint
    before = cli.session_path.read_bytes()

    front.restart(new_certificate=True)
    new = front.fingerprint
    assert new != old
    result = cli("whoami")

    assert result.code == 1
    assert "has CHANGED" in result.stderr
    assert f"pinned (in the session): {old}" in result.stderr
    assert f"served now:              {new}" in result.stderr
    assert f"appliance login --endpoint {front.endpoint} --fingerprint {new}" in result.stderr
    assert front.requests_to(INTROSPECT) == 0  # refused before the request (and its token) went out
    assert cli.session_path.read_bytes() == before
    # a login without options keeps the old pin, so it is refused too, before the password
    cli.ask = lambda question: pytest.fail("asked instead of refusing a changed certificate")
    again = login(cli, front)
    assert again.code == 1 and "has CHANGED" in again.stderr
    assert front.requests_to(TOKEN_PATH) == 0
    # re-pinned as the message says, everything works again
    assert login(cli, front, "--fingerprint", new).code == 0
    assert cli("whoami").code == 0
    assert cli.session()["tls"]["fingerprint"] == new


# --- --ca-file and --insecure ---------------------------------------------------------------


def test_ca_file_trusts_what_it_signs_with_hostname_checks(cli, front, tmp_path, monkeypatch):
    # first boot's certificate is its own CA; it names 127.0.0.1, so the hostname check holds
    ca_copy = tmp_path / "appliance-ca.pem"
    shutil.copy(front.cert_path, ca_copy)
    monkeypatch.chdir(tmp_path)  # a relative path is kept as an absolute one
    result = login(cli, front, "--ca-file", "appliance-ca.pem")

    assert result.code == 0, result.stderr
    assert cli.session()["tls"] == {"fingerprint": None, "ca_file": str(ca_copy),
                                    "insecure": False}
    assert cli("whoami").code == 0


def test_ca_file_that_did_not_sign_the_certificate_is_refused(cli, front, tmp_path):
    other = tmp_path / "other-ca.pem"
    cert, _key = tls.make("someone-else")
    other.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    result = login(cli, front, "--ca-file", str(other))

    assert result.code == 4
    assert "is not trusted" in result.stderr and "--fingerprint" in result.stderr
    assert not cli.session_path.exists() and front.requests_to(TOKEN_PATH) == 0


def test_a_missing_ca_file_is_a_usage_error(cli, front, tmp_path):
    result = login(cli, front, "--ca-file", str(tmp_path / "nothing.pem"))
    assert result.code == 2 and "cannot use the CA file" in result.stderr
    assert not cli.session_path.exists()


def test_insecure_warns_at_login_and_at_every_later_command(cli, front):
    result = login(cli, front, "--insecure")

    assert result.code == 0, result.stderr
    assert "NOT checked (--insecure)" in result.stderr
    assert cli.session()["tls"]["insecure"] is True
    for _ in range(2):
        later = cli("whoami")
        assert later.code == 0
        assert later.stderr.count("NOT checked (--insecure)") == 1


def test_a_session_keeps_its_trust_through_the_file():
    trust = Trust(fingerprint=fingerprint_of(b"x"))
    session = Session("https://127.0.0.1:1", "admin", "", "token", None, 1.0e9, trust=trust)
    assert Session.from_json(json.loads(json.dumps(session.to_json()))).trust == trust
    legacy = {k: v for k, v in session.to_json().items() if k != "tls"}
    assert Session.from_json(legacy).trust is None  # a session from before: as plain as then


def test_the_help_of_login_describes_the_ways_to_trust(cli):
    text = cli("login", "--help").stdout
    for words in ("--fingerprint SHA256:", "--ca-file FILE", "--insecure", "trust on first use",
                  "console banner", "has changed", "known_hosts"):
        assert words in " ".join(text.split()), words
