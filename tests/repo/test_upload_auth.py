"""The upload authorization decision (spec 4.3.1) and its path rules, without HTTP.

appliance.repo.upload_auth is pure logic; the route and the nginx wiring are tested end to
end elsewhere (tests/test_nginx_harness.py proves the nginx side with a stand-in app).
"""

import pytest

from appliance.iam.builtin import ADMIN_PROJECT
from appliance.iam.permissions import Principal
from appliance.repo.upload_auth import PathRefused, check_path, decide

P1 = "11111111-2222-4333-8444-555555555555"
P2 = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
PREFIX = "elements"
FILE = f"/{PREFIX}/{P1}/mysql/1.0.0/mysql-1.0.0.tar.gz"
FILE_P2 = f"/{PREFIX}/{P2}/mysql/1.0.0/mysql-1.0.0.tar.gz"

READ = "repo.repository.read"
UPLOAD = "repo.repository.upload"


def principal(project, *perms):
    return Principal({"uuid": "u"}, project, perms)


# ---- the decision table ---------------------------------------------------------------

NO_TOKEN = None
READER_P1 = principal(P1, READ)
UPLOADER_P1 = principal(P1, UPLOAD)                 # owner role: upload, and read too
OWNER_P1 = principal(P1, "repo.*.*", UPLOAD)
UNSCOPED_READER = principal(None, READ)
UNSCOPED_UPLOADER = principal(None, UPLOAD)
UNSCOPED_ADMIN = principal(None, "*.*.*")
NOTHING_P1 = principal(P1)
NOTHING_UNSCOPED = principal(None)
READER_P2 = principal(P2, READ)
UPLOADER_P2 = principal(P2, UPLOAD)

DECISIONS = [
    # (method, uri, principal, repository project, expected status)
    # --- no token: 401 for the four methods, whatever the path or repository
    ("GET", FILE, NO_TOKEN, ADMIN_PROJECT, 401),
    ("HEAD", FILE, NO_TOKEN, ADMIN_PROJECT, 401),
    ("PUT", FILE, NO_TOKEN, ADMIN_PROJECT, 401),
    ("DELETE", FILE, NO_TOKEN, ADMIN_PROJECT, 401),
    ("PUT", f"/{PREFIX}/{P1}/../x", NO_TOKEN, ADMIN_PROJECT, 401),   # 401 before the path
    ("GET", FILE, NO_TOKEN, P2, 401),                                 # 401 before the repo
    # --- anything else: 403, with or without a token (decided: see module docstring)
    ("POST", FILE, UNSCOPED_ADMIN, ADMIN_PROJECT, 403),
    ("POST", FILE, NO_TOKEN, ADMIN_PROJECT, 403),
    ("PATCH", FILE, OWNER_P1, P1, 403),
    ("MKCOL", FILE, UNSCOPED_ADMIN, ADMIN_PROJECT, 403),
    ("COPY", FILE, UNSCOPED_ADMIN, ADMIN_PROJECT, 403),
    ("MOVE", FILE, UNSCOPED_ADMIN, ADMIN_PROJECT, 403),
    ("OPTIONS", FILE, UNSCOPED_ADMIN, ADMIN_PROJECT, 403),
    ("PROPFIND", FILE, NO_TOKEN, ADMIN_PROJECT, 403),
    ("get", FILE, UNSCOPED_ADMIN, ADMIN_PROJECT, 403),     # methods are case-sensitive
    ("put", FILE, UNSCOPED_ADMIN, ADMIN_PROJECT, 403),
    ("", FILE, UNSCOPED_ADMIN, ADMIN_PROJECT, 403),
    (None, FILE, UNSCOPED_ADMIN, ADMIN_PROJECT, 403),
    # --- GET/HEAD: read permission and matching project (or unscoped)
    ("GET", FILE, READER_P1, ADMIN_PROJECT, 200),
    ("HEAD", FILE, READER_P1, ADMIN_PROJECT, 200),
    ("GET", FILE, READER_P1, P1, 200),
    ("GET", FILE_P2, READER_P1, ADMIN_PROJECT, 403),        # other project's files
    ("HEAD", FILE_P2, READER_P1, ADMIN_PROJECT, 403),
    ("GET", FILE, UNSCOPED_READER, ADMIN_PROJECT, 200),
    ("GET", FILE_P2, UNSCOPED_READER, ADMIN_PROJECT, 200),  # unscoped: any project
    ("GET", FILE, NOTHING_P1, ADMIN_PROJECT, 403),
    ("GET", FILE, NOTHING_UNSCOPED, ADMIN_PROJECT, 403),
    ("GET", FILE, UPLOADER_P1, ADMIN_PROJECT, 403),         # upload does not imply read
    ("GET", FILE, OWNER_P1, ADMIN_PROJECT, 200),
    ("GET", FILE, UNSCOPED_ADMIN, ADMIN_PROJECT, 200),
    # --- PUT/DELETE into the token's own project with upload
    ("PUT", FILE, UPLOADER_P1, ADMIN_PROJECT, 200),
    ("DELETE", FILE, UPLOADER_P1, ADMIN_PROJECT, 200),
    ("PUT", FILE, UPLOADER_P1, P1, 200),
    ("PUT", FILE, OWNER_P1, P1, 200),
    ("PUT", FILE_P2, UPLOADER_P1, ADMIN_PROJECT, 403),      # another project's directory
    ("DELETE", FILE_P2, UPLOADER_P1, ADMIN_PROJECT, 403),
    ("PUT", FILE, UPLOADER_P2, ADMIN_PROJECT, 403),
    ("PUT", FILE, READER_P1, ADMIN_PROJECT, 403),           # read is not upload
    ("DELETE", FILE, READER_P1, ADMIN_PROJECT, 403),
    ("PUT", FILE, NOTHING_P1, ADMIN_PROJECT, 403),
    ("PUT", FILE, principal(P1, "repo.repository.*"), ADMIN_PROJECT, 200),
    ("PUT", FILE, principal(P1, "repo.element.upload"), ADMIN_PROJECT, 403),
    # --- PUT/DELETE anywhere with an unscoped upload token
    ("PUT", FILE, UNSCOPED_UPLOADER, ADMIN_PROJECT, 200),
    ("PUT", FILE_P2, UNSCOPED_UPLOADER, ADMIN_PROJECT, 200),
    ("DELETE", FILE_P2, UNSCOPED_UPLOADER, ADMIN_PROJECT, 200),
    ("PUT", FILE_P2, UNSCOPED_READER, ADMIN_PROJECT, 403),
    ("PUT", FILE_P2, NOTHING_UNSCOPED, ADMIN_PROJECT, 403),
    ("DELETE", FILE_P2, UNSCOPED_ADMIN, ADMIN_PROJECT, 200),
    # --- the repository must belong to the path's project or to the admin project
    ("PUT", FILE, UPLOADER_P1, P2, 403),
    ("GET", FILE, READER_P1, P2, 403),
    ("PUT", FILE, UNSCOPED_ADMIN, P2, 403),                 # even for an admin
    ("GET", FILE, UNSCOPED_ADMIN, P2, 403),
    ("PUT", FILE_P2, UNSCOPED_ADMIN, P2, 200),
    ("PUT", FILE_P2, UPLOADER_P2, P2, 200),
    ("PUT", FILE, UNSCOPED_ADMIN, None, 403),
    # --- refused paths: 403 even for an admin, even when everything else would pass
    ("GET", f"/{PREFIX}/{P1}/../{P2}/x", UNSCOPED_ADMIN, ADMIN_PROJECT, 403),
    ("PUT", f"/{PREFIX}/{P1}/%2e%2e/{P2}/x", UNSCOPED_ADMIN, ADMIN_PROJECT, 403),
    ("PUT", f"/{PREFIX}/{P1}/%2e%2e/{P2}/x", UPLOADER_P1, ADMIN_PROJECT, 403),
    ("DELETE", f"/{PREFIX}/{P1}/a\\b", UPLOADER_P1, ADMIN_PROJECT, 403),
    ("GET", f"/{PREFIX}/{P1}//x", READER_P1, ADMIN_PROJECT, 403),
    ("PUT", f"/a/b/{P1}/x", UNSCOPED_ADMIN, ADMIN_PROJECT, 403),
    ("PUT", "", UNSCOPED_ADMIN, ADMIN_PROJECT, 403),
    ("PUT", None, UNSCOPED_ADMIN, ADMIN_PROJECT, 403),
    # --- the query string is not part of the path
    ("PUT", FILE + "?x=../../etc", UPLOADER_P1, ADMIN_PROJECT, 200),
]


@pytest.mark.parametrize("method,uri,who,repo_project,expected", DECISIONS)
def test_decision_table(method, uri, who, repo_project, expected):
    status, reason = decide(method, uri, who, repo_project)
    assert status == expected, reason
    assert isinstance(reason, str) and reason


def test_reasons_say_why():
    assert "token" in decide("GET", FILE, None, ADMIN_PROJECT)[1]
    assert "path refused" in decide("PUT", f"/{PREFIX}/{P1}/%2e%2e/x", UNSCOPED_ADMIN,
                                    ADMIN_PROJECT)[1]
    assert UPLOAD in decide("PUT", FILE, READER_P1, ADMIN_PROJECT)[1]
    assert READ in decide("GET", FILE, UPLOADER_P1, ADMIN_PROJECT)[1]


def test_uuid_objects_are_accepted_for_projects():
    import uuid
    who = Principal({"uuid": "u"}, uuid.UUID(P1), [UPLOAD])
    assert decide("PUT", FILE, who, uuid.UUID(ADMIN_PROJECT))[0] == 200


# ---- the traversal corpus: every one refused --------------------------------------------

B = f"/{PREFIX}/{P1}"
REFUSED = [
    # plain dot segments
    f"{B}/../{P2}/x",
    f"{B}/..",
    f"{B}/a/..",
    f"{B}/a/../b",
    f"{B}/./x",
    f"{B}/a/.",
    f"{B}/.",
    f"/{PREFIX}/../{P1}/x",
    f"/../{PREFIX}/{P1}/x",
    f"/{PREFIX}/{P1}/../../etc/passwd",
    # percent-encoded dot segments, any case, any mix
    f"{B}/%2e%2e/{P2}/x",
    f"{B}/%2E%2E/{P2}/x",
    f"{B}/%2E./{P2}/x",
    f"{B}/.%2e/{P2}/x",
    f"{B}/%2e./x",
    f"{B}/a/%2e%2e",
    f"{B}/%2e/x",
    f"{B}/a/%2E",
    f"/{PREFIX}/{P1}/x/%2e%2e/%2e%2e/{P2}/y",
    # double and triple encoding
    f"{B}/%252e%252e/x",
    f"{B}/%252E%252E/x",
    f"{B}/%252e/x",
    f"{B}/%25252e%25252e/x",
    f"{B}/%2e%252e/x",
    # empty segments
    f"{B}//x",
    f"{B}/a//b",
    f"{B}/a//",
    f"{B}/a///",
    f"{B}/dir/",                           # a trailing slash is an empty segment (spec 7)
    f"{B}/a/b/",
    f"{B}/dir/?x=1",
    f"/{PREFIX}//{P1}/x",
    f"//{PREFIX}/{P1}/x",
    f"{B}/",
    f"{B}",
    f"/{PREFIX}",
    "/",
    # encoded slashes
    f"{B}/a%2fb",
    f"{B}/a%2Fb",
    f"{B}/%2f..%2f{P2}",
    f"{B}/..%2f..%2fetc",
    f"{B}/a%252fb",
    f"/{PREFIX}%2f{P1}/x",
    # backslashes, raw and encoded
    f"{B}/a\\b",
    f"{B}/..\\x",
    f"{B}/%5c",
    f"{B}/a%5cb",
    f"{B}/a%5Cb",
    f"{B}/..%5c..%5cetc",
    f"{B}/..%5C{P2}",
    f"{B}/%255c",
    # NUL and control characters
    f"{B}/a%00b",
    f"{B}/a%00.tar.gz",
    f"{B}/a%0ab",
    f"{B}/a%0d%0aX-Injected:%201",
    f"{B}/a%7fb",
    f"{B}/a%c2%85b",          # NEL, a C1 control character
    f"{B}/a%2500b",
    f"{B}/a\tb",
    f"{B}/a\x00b",
    # not valid UTF-8 once decoded; overlong encodings of . and /
    f"{B}/%c0%ae%c0%ae/x",
    f"{B}/%c0%ae/x",
    f"{B}/%e0%80%ae%e0%80%ae/x",
    f"{B}/%c0%af",
    f"{B}/%ff",
    f"{B}/%ed%a0%80",         # a UTF-16 surrogate
    f"{B}/%25c0%25ae%25c0%25ae",
    # malformed escapes and raw characters that are not a request-target's
    f"{B}/%zz",
    f"{B}/a%2",
    f"{B}/a%",
    f"{B}/a b",
    f"{B}/caf\u00e9",
    f"{B}/a#b",
    # the shape: single-segment prefix, then a literal lowercase UUID
    f"/{P1}/x",                            # no prefix at all
    f"/a/b/{P1}/x",                        # two-segment prefix: project check fails
    f"/a/b/c/{P1}/x",
    f"/{PREFIX}/not-a-uuid/x",
    f"/{PREFIX}/{P2.upper()}/x",           # uppercase: another directory on disk
    f"/{PREFIX}/{P1.replace('-', '')}/x",
    f"/{PREFIX}/{{{P1}}}/x",
    f"/{PREFIX}/%31{P1[1:]}/x",            # an encoded UUID character
    f"/{PREFIX}/{P1}%2fx/y",
    f"/{PREFIX}/{P1}x/y",
    f"/re%70o/{P1}/x",                     # an encoded prefix
    f"/%2e%2e/{P1}/x",
    f"/./{P1}/x",
    f"//{P1}/x",                           # empty prefix
    # not an absolute path
    f"{PREFIX}/{P1}/x",
    f"http://127.0.0.1{B}/x",
    "*",
    "",
    "?x=1",
]


def test_corpus_is_large_and_distinct():
    assert len(REFUSED) >= 40
    assert len(set(REFUSED)) == len(REFUSED)


@pytest.mark.parametrize("uri", REFUSED)
def test_traversal_corpus_refused(uri):
    with pytest.raises(PathRefused) as err:
        check_path(uri)
    assert err.value.reason
    # and the decision is 403 even for the most powerful token
    assert decide("PUT", uri, UNSCOPED_ADMIN, ADMIN_PROJECT)[0] == 403
    assert decide("GET", uri, UNSCOPED_ADMIN, ADMIN_PROJECT)[0] == 403


def test_refused_as_bytes_too():
    with pytest.raises(PathRefused):
        check_path(f"{B}/caf\u00e9".encode())
    with pytest.raises(PathRefused):
        check_path(f"{B}/%2e%2e/x".encode())
    with pytest.raises(PathRefused):
        check_path(None)


def test_too_many_encoding_rounds_refused():
    seg = "%61"                       # "a", then encoded again and again
    for _ in range(12):
        seg = seg.replace("%", "%25")
    with pytest.raises(PathRefused) as err:
        check_path(f"{B}/{seg}")
    assert "more than" in err.value.reason
    assert check_path(f"{B}/%252561")[2] == ["a"]   # a few rounds are fine


# ---- accepted paths ----------------------------------------------------------------------

ACCEPTED = [
    # (uri, expected rest segments)
    (f"{B}/x", ["x"]),
    (f"{B}/mysql/1.0.0/mysql-1.0.0.tar.gz", ["mysql", "1.0.0", "mysql-1.0.0.tar.gz"]),
    (f"{B}/a.b.tar.gz", ["a.b.tar.gz"]),
    (f"{B}/..foo", ["..foo"]),              # a name that starts with two dots is a name
    (f"{B}/foo..", ["foo.."]),
    (f"{B}/a..b", ["a..b"]),
    (f"{B}/...", ["..."]),                  # three dots: a name to nginx and to POSIX
    (f"{B}/.hidden", [".hidden"]),
    (f"{B}/%2e%2efoo", ["..foo"]),
    (f"{B}/my%20file.tar.gz", ["my file.tar.gz"]),
    (f"{B}/my+file", ["my+file"]),
    (f"{B}/caf%C3%A9.tar.gz", ["caf\u00e9.tar.gz"]),
    (f"{B}/100%25", ["100%"]),              # a literal percent sign, once decoded
    (f"{B}/a%3Fb", ["a?b"]),
    (f"{B}/a;b=c", ["a;b=c"]),
    (f"{B}/%ef%bc%8e%ef%bc%8e", ["\uff0e\uff0e"]),   # fullwidth dots: a name, not ..
    (f"{B}/a/b/c/d/e.json", ["a", "b", "c", "d", "e.json"]),
    (f"{B}/x?y=1&z=../..", ["x"]),          # the query string is cut off
    (f"{B}/x?", ["x"]),
    (f"/p/{ADMIN_PROJECT}/shared.tar.gz", ["shared.tar.gz"]),
    (f"/my-prefix_2/{P2}/x", ["x"]),
    (f"/{PREFIX}/{P1}/~user", ["~user"]),
]


@pytest.mark.parametrize("uri,rest", ACCEPTED)
def test_accepted_paths(uri, rest):
    prefix, project, segments = check_path(uri)
    assert prefix == uri.split("/")[1]
    assert project == uri.split("/")[2]
    assert segments == rest


def test_accepted_as_bytes():
    assert check_path(FILE.encode()) == (PREFIX, P1, ["mysql", "1.0.0", "mysql-1.0.0.tar.gz"])


@pytest.mark.parametrize("uri,rest", ACCEPTED)
def test_accepted_paths_pass_the_decision(uri, rest):
    project = uri.split("/")[2]
    assert decide("PUT", uri, principal(project, UPLOAD), ADMIN_PROJECT)[0] == 200
    assert decide("GET", uri, principal(project, READ), ADMIN_PROJECT)[0] == 200
