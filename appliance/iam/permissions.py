"""Permission names `<service>.<policy>.<action>` and wildcard matching.

A granted permission matches a required one when each of its three parts is equal to the
required part or is `*` (so `*.*.*` grants everything, `repo.*.read` every read of repo).
Nothing else is a wildcard: `*` never matches part of a word.
"""

from appliance.api.patterns import compiled

PART = r"(\*|[a-z][a-z0-9_]*)"
NAME_PATTERN = rf"^{PART}\.{PART}\.{PART}$"
_NAME = compiled(NAME_PATTERN)


def is_valid(name):
    return bool(_NAME.match(name))


def grants(granted, required):
    g, r = granted.split("."), required.split(".")
    return len(g) == 3 and len(r) == 3 and all(a == "*" or a == b for a, b in zip(g, r))


class Principal:
    """The authenticated caller of one request."""

    def __init__(self, user, project_id, permissions, claims=None):
        self.user = user
        self.project_id = project_id
        self.permissions = frozenset(permissions)
        self.claims = claims or {}

    @property
    def user_uuid(self):
        return self.user["uuid"]

    def allows(self, required):
        # "authenticated": routes for any user's own token (appliance/api/routing.py);
        # a node agent's principal answers no to it
        if required == "authenticated" or required in self.permissions or "*.*.*" in self.permissions:
            return True
        return any(grants(p, required) for p in self.permissions)
