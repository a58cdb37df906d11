"""The decision of the upload authorization check (spec 4.3.1), as pure logic.

An element repository may be served by nginx from a writable directory laid out as
``/<prefix>/<project_id>/...``; every request to it is first sent by ``auth_request`` to
``GET /v1/repo/repositories/<uuid>/actions/authorize_upload`` with the original method and
URI in ``X-Original-Method`` and ``X-Original-URI``. This module turns those two headers,
the caller's :class:`~appliance.iam.permissions.Principal` (or ``None`` when no token came)
and the project of the repository into ``(status, reason)``. It does no HTTP and reads no
store: the route authenticates the token, answers 404 for a missing repository, and calls
:func:`decide`.

Decision table (checked in this order):

==========================  ===========================================================  ======
X-Original-Method           condition                                                    answer
==========================  ===========================================================  ======
not GET/HEAD/PUT/DELETE     always, with or without a token                              403
GET/HEAD/PUT/DELETE         no token (``principal is None``)                             401
any of the four             path refused by :func:`check_path`                           403
any of the four             repository neither in the path's project nor the admin one   403
GET, HEAD                   ``repo.repository.read`` and (unscoped token or token
                            project == path project)                                     200
PUT, DELETE                 ``repo.repository.upload`` (read not needed) and (unscoped
                            token or token project == path project)                      200
any of the four             otherwise                                                    403
==========================  ===========================================================  ======

Methods are compared exactly (HTTP methods are case-sensitive; ``get`` is not ``GET``). An
unlisted method is 403 even without a token: the table's last row is "anything else", the
401 row names only the four methods, and no token could ever make such a method pass, so a
401 would only invite a pointless retry with credentials. 401 comes before the path check:
authentication first, and an anonymous caller learns nothing about which paths pass.

Path rules (:func:`check_path`)
-------------------------------
The URI is ``/<prefix>/<project_uuid>/<name>[/<name>...]`` (the query string is cut off):

* it is printable ASCII (``%21``-``%7E``): a raw space, control character or non-ASCII byte
  is not a valid request-target (RFC 9112) and is refused; clients percent-encode them;
* a raw ``#`` is refused (a fragment never belongs in a request-target and proxies disagree on
  it); every ``%`` starts a well-formed ``%XX`` escape;
* the prefix is exactly one segment; the project segment is a lowercase, hyphenated UUID
  written literally (no escapes, no uppercase: the file system is case-sensitive, so
  ``ABC...`` would be another directory than ``abc...``);
* at least one name follows the project; an empty segment is refused: ``//`` anywhere and
  a trailing ``/`` (spec 4.3.1 and 7 list the empty segment without exception, so a
  directory, which only a trailing slash can name, is never a target: files only);
* every segment, raw and after each round of percent-decoding (repeated until nothing
  changes, so ``%252e`` -> ``%2e`` -> ``.``), must not be ``.`` or ``..``, must not contain
  ``/`` (an encoded ``%2f``), ``\\`` (raw or ``%5c``), NUL or another control character
  (C0, DEL, C1), and must decode to valid UTF-8 (so the overlong ``%c0%ae`` for ``.`` is
  refused).

Names that merely start or end with dots (``..foo``, ``a..b``, ``...``, ``.hidden``,
``a.b.tar.gz``) are names: neither nginx nor POSIX gives them any meaning, so they pass.

Why check both the raw and the decoded form
------------------------------------------
nginx decodes the URI once and then normalizes it (``/./``, ``/../``, merged slashes) before
mapping it to a file, but ``X-Original-URI`` is ``$request_uri``: the raw bytes. A check of
the raw form alone misses ``/%2e%2e/`` (raw, it is a harmless-looking name; decoded, it is a
parent directory); a check of the decoded form alone misses what the raw form says about
structure, e.g. ``a%2fb`` is one raw segment but two decoded ones. Decoding repeatedly
catches double encoding (``%252e%252e``) for any component that decodes once more than we
thought. Refusing when *any* form is suspicious means the proxy's interpretation and ours
can never disagree on a path we let through.

Why refuse instead of normalize
-------------------------------
A normalized path is our guess of what nginx (or the file system) will do with the URI, and
every past traversal bug lives in the gap between two such guesses. The project check must be
made on exactly the directory nginx writes to; a path with ``.``, ``..``, empty segments or
backslashes has no single meaning that both sides are guaranteed to share, and no honest
client needs one. So such a path is answered 403 and is never resolved.
"""

import re
import unicodedata
from urllib.parse import unquote_to_bytes

from appliance.kinds import ADMIN_PROJECT, STORED_UUID_RE

READ_PERMISSION = "repo.repository.read"
UPLOAD_PERMISSION = "repo.repository.upload"

READ_METHODS = frozenset({"GET", "HEAD"})
WRITE_METHODS = frozenset({"PUT", "DELETE"})

_UUID = STORED_UUID_RE
_PRINTABLE_ASCII = re.compile(r"^[\x21-\x7e]*\Z")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_MAX_DECODE_ROUNDS = 8


class PathRefused(ValueError):
    """The X-Original-URI is not a plain `/<prefix>/<project_uuid>/...` path."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


def _decoded_forms(segment):
    """The raw segment and every percent-decoded form of it, as bytes, until stable."""
    forms = [segment.encode("ascii")]
    for _ in range(_MAX_DECODE_ROUNDS):
        nxt = unquote_to_bytes(forms[-1])
        if nxt == forms[-1]:
            return forms
        forms.append(nxt)
    raise PathRefused(f"segment {segment!r} is percent-encoded more than "
                      f"{_MAX_DECODE_ROUNDS} times")


def _check_segment(segment):
    """Refuse a dangerous segment; return its fully decoded text."""
    if segment == "":
        raise PathRefused("empty path segment")
    text = None
    for form in _decoded_forms(segment):
        if form in (b".", b".."):
            raise PathRefused(f"segment {segment!r} is a dot segment")
        if b"/" in form:
            raise PathRefused(f"segment {segment!r} contains an encoded slash")
        if b"\\" in form:
            raise PathRefused(f"segment {segment!r} contains a backslash")
        if b"\x00" in form:
            raise PathRefused(f"segment {segment!r} contains NUL")
        try:
            text = form.decode("utf-8", errors="strict")
        except UnicodeDecodeError:
            raise PathRefused(f"segment {segment!r} is not valid UTF-8 once decoded") from None
        if any(unicodedata.category(ch) == "Cc" for ch in text):
            raise PathRefused(f"segment {segment!r} contains a control character")
    return text


def check_path(raw_uri):
    """Split a raw X-Original-URI into ``(prefix, project_id, rest_segments)`` or refuse it.

    `prefix` and `project_id` are returned as written (both are checked to need no
    decoding); `rest_segments` are the fully decoded names after the project. Raises :class:`PathRefused` (see the module
    docstring for the rules). Nothing is ever resolved or normalized.
    """
    if isinstance(raw_uri, bytes):
        try:
            raw_uri = raw_uri.decode("ascii")
        except UnicodeDecodeError:
            raise PathRefused("URI is not ASCII") from None
    if not isinstance(raw_uri, str) or raw_uri == "":
        raise PathRefused("no URI")
    path = raw_uri.split("?", 1)[0]
    if not _PRINTABLE_ASCII.match(path):
        raise PathRefused("URI holds a raw space, control or non-ASCII character")
    if "#" in path:
        raise PathRefused("URI holds a raw '#'")
    if _BAD_PERCENT.search(path):
        raise PathRefused("URI holds a malformed percent escape")
    if not path.startswith("/"):
        raise PathRefused("URI is not an absolute path")
    segments = path[1:].split("/")
    if len(segments) < 3:
        raise PathRefused("URI is not /<prefix>/<project_uuid>/<name>...")
    decoded = [_check_segment(s) for s in segments]
    prefix, project_id = segments[0], segments[1]
    if decoded[0] != prefix:
        raise PathRefused("prefix is percent-encoded")
    if not _UUID.match(project_id):
        raise PathRefused(f"second segment {project_id!r} is not a project UUID "
                          "(single-segment prefix, lowercase UUID expected)")
    return prefix, project_id, decoded[2:]


def decide(method, raw_uri, principal, repository_project_id):
    """Answer the authorize_upload check: ``(status, reason)``, status 200, 401 or 403.

    `method` and `raw_uri` are the X-Original-Method and X-Original-URI headers (None when
    absent), `principal` the authenticated caller or None without a token, and
    `repository_project_id` the project of the repository named in the route (the caller
    has already answered 404 when that repository does not exist).
    """
    if method not in READ_METHODS and method not in WRITE_METHODS:
        return 403, f"method {method!r} is never allowed on an element repository"
    if principal is None:
        return 401, "a token is required"
    try:
        _prefix, path_project, _rest = check_path(raw_uri)
    except PathRefused as exc:
        return 403, f"path refused: {exc.reason}"
    repo_project = None if repository_project_id is None else str(repository_project_id)
    if repo_project not in (path_project, ADMIN_PROJECT):
        return 403, "the repository belongs neither to the path's project nor to the admin project"
    needed = READ_PERMISSION if method in READ_METHODS else UPLOAD_PERMISSION
    if not principal.allows(needed):
        return 403, f"the token lacks {needed}"
    token_project = principal.project_id
    if token_project is not None and str(token_project) != path_project:
        return 403, "the token is scoped to another project than the path's"
    return 200, "allowed"
