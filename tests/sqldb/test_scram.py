"""SCRAM-SHA-256 verifiers (appliance/sqldb/scram.py) against real PostgreSQL: a role made
with our verifier logs in with the clear password (ASCII and not), and not with another."""

import pytest

from appliance.sqldb import scram

from .pgcluster import Cluster, available

pytestmark = pytest.mark.skipif(not available(), reason="needs root and postgresql-15")

PASSWORDS = {
    "ascii_user": "correct horse battery",
    # NFKC maps the fullwidth letters and the ligature; SASLprep maps U+00A0 to a space
    "unicode_user": "ｐａｓｓ\u00a0wörd ﬁ Ω",
    # a prohibited character (U+0007 is ASCII, so taken as is) and a prohibited non-ASCII
    # one (U+200E, bidi): both used as raw bytes, as PostgreSQL does
    "raw_user": "pass\u200eword-é",
}


@pytest.fixture(scope="module")
def cluster():
    c = Cluster().start()
    yield c
    c.stop()


def test_format():
    made = scram.verifier("password-1", salt=b"0123456789abcdef")
    head, keys = made.split("$", 1)[1].split("$")
    assert made.startswith("SCRAM-SHA-256$4096:") and len(keys.split(":")) == 2
    assert head == "4096:MDEyMzQ1Njc4OWFiY2RlZg=="
    assert scram.verifies("password-1", made) and not scram.verifies("password-2", made)
    assert scram.verifier("password-1") != scram.verifier("password-1")  # fresh salts


def test_saslprep_as_postgresql_does():
    assert scram.saslprep("plain ASCII\x07") == b"plain ASCII\x07"
    assert scram.saslprep("I\u00adX") == b"IX"                # mapped to nothing
    assert scram.saslprep("a\u00a0b\u00e9") == "a b\u00e9".encode()
    assert scram.saslprep("\u2168") == b"IX"                  # NFKC
    assert scram.saslprep("\u00ad") == "\u00ad".encode()       # empty after: raw
    assert scram.saslprep("a\u200eb\u00e9") == "a\u200eb\u00e9".encode()   # prohibited: raw
    assert scram.saslprep("\u05d0a\u05d0") == "\u05d0a\u05d0".encode()     # bidi: raw


@pytest.mark.parametrize("user", sorted(PASSWORDS))
def test_postgresql_accepts_the_clear_password_of_our_verifier(cluster, user):
    password = PASSWORDS[user]
    cluster.sql(f"CREATE ROLE {user} LOGIN PASSWORD '{scram.verifier(password)}'")
    assert cluster.sql(f"SELECT rolpassword LIKE 'SCRAM-SHA-256$4096:%' FROM pg_authid "
                       f"WHERE rolname = '{user}'") == "t"
    ok, out = cluster.login(user, password)
    assert ok and out == user, out
    ok, out = cluster.login(user, password + "x")
    assert not ok and "password authentication failed" in out, out


def test_a_verifier_postgresql_made_is_one_we_verify(cluster):
    """The other way round: PostgreSQL's own verifier of a non-ASCII password checks
    against our SASLprep."""
    password = PASSWORDS["unicode_user"]
    cluster.sql("SET password_encryption = 'scram-sha-256'; "
                f"CREATE ROLE theirs LOGIN PASSWORD '{password}'")
    theirs = cluster.sql("SELECT rolpassword FROM pg_authid WHERE rolname = 'theirs'")
    assert scram.verifies(password, theirs)
    assert not scram.verifies(password + "x", theirs)
