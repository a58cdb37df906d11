"""Who may own which DNS zone (docs/security.md, "DNS zones have one owner").

The built-in server answers a name from the most specific zone that holds it, and the
certificate daemon proves control of a name by writing into the zone that holds it. So a
zone nested inside another owner's zone, or wrapped around it, takes over that owner's
names: its records are answered instead of the victim's, and certificates for the
victim's names pass as its own. The rule, checked here and nowhere else:

- a zone may exist only if no zone of another owner (another project, or the platform:
  the admin project) is its parent, its child, or has its name;
- the zones the platform uses (the DBaaS zone, the zones of the `platform_zones`
  setting) are reserved for the admin project, with their parents and children, even
  before the platform has made them;
- a single-label zone (a top-level domain, such as `test`) needs an unscoped admin;
- a refusal names the other zone only to a platform caller; a project's caller learns
  no more than that "a zone of another owner covers this name".

Platform code finds its own zones with `platform_zone()` (by name *and* the admin
project), never by name alone; the certificate daemon asks `foreign_cover()` whether
every zone covering a name is the certificate's project's.

Names are compared as lower-case text without the trailing dot; zone names are unique
across all projects anyway (the dns_domains kind has a unique key on `name`).
"""

from appliance.kinds import ADMIN_PROJECT

from . import is_platform

ANOTHER_OWNER = "a zone of another owner covers this name"
EVERYTHING = "*.*.*"


def normal(name):
    return str(name or "").strip().rstrip(".").lower()


def covers(zone, name):
    """True if the zone called `zone` holds `name` (the zone itself or a name below it)."""
    zone, name = normal(zone), normal(name)
    return name == zone or name.endswith("." + zone)


def nested(a, b):
    """True if one of the two names is the other, or its parent or child at any depth."""
    return covers(a, b) or covers(b, a)


def is_top_level(name):
    return "." not in normal(name)


def reserved_names(settings):
    """The zones the platform uses: the DBaaS zone and those the `platform_zones`
    setting lists (comma-separated)."""
    settings = settings or {}
    names = {normal(settings.get("sqldb_zone"))}
    names.update(normal(n) for n in str(settings.get("platform_zones") or "").split(","))
    names.discard("")
    return names


def is_unscoped_admin(principal):
    """In-process platform code, or a user's unscoped token that holds every permission.
    A token scoped to the admin project is the platform too, but acts inside a project:
    a whole top-level domain is a decision for an unscoped admin only."""
    if principal is None:
        return True
    if getattr(principal, "node", None) is not None or principal.project_id is not None:
        return False
    return EVERYTHING in getattr(principal, "permissions", ())


def others_nested(name, project_id, zones):
    """The zones of another owner that are `name`, its parents or its children."""
    return [z for z in zones
            if z.get("project_id") != project_id and nested(z.get("name"), name)]


def refusal(name, project_id, zones, settings, principal=None):
    """Why a zone `name` owned by `project_id` may not be created by `principal` (None:
    platform code), as (reason for a platform caller, reason for anyone else); None when
    it may. `zones`: every dns_domains record, of every project."""
    name = normal(name)
    if is_top_level(name) and not is_unscoped_admin(principal):
        text = (f"{name} is a top-level zone: only an unscoped admin may create one; "
                "choose a name of two labels or more")
        return text, text
    if project_id != ADMIN_PROJECT:
        for reserved in sorted(reserved_names(settings)):
            if nested(reserved, name):
                return (f"{name} overlaps {reserved}, a zone reserved for the platform "
                        "(admin project); choose a name outside it",
                        f"{ANOTHER_OWNER}: the platform reserves it; choose a name "
                        "outside the platform's zones")
    others = others_nested(name, project_id, zones)
    if others:
        other = min(others, key=lambda z: len(normal(z.get("name"))))
        owner = ("the platform" if other.get("project_id") == ADMIN_PROJECT
                 else f"project {other.get('project_id')}")
        return (f"{name} would overlap zone {normal(other.get('name'))} of {owner}: a "
                "name has one owner, so no zone may be the parent or the child of "
                "another owner's zone; choose a name outside it",
                f"{ANOTHER_OWNER}; a name has one owner, so choose a name outside it")
    return None


def check_create(name, project_id, zones, settings, principal):
    """Raise the API's 409 when `principal` may not create zone `name` for `project_id`;
    the other zone is named only to a platform caller, who may see every zone."""
    from appliance.api.errors import Conflict  # noqa: PLC0415 - daemons import this module
    why = refusal(name, project_id, zones, settings, principal)
    if why is not None:
        raise Conflict(why[0] if is_platform(principal) else why[1])


def platform_zone(name, zones):
    """The platform's own zone called `name` (admin project), or None. Another owner's
    zone of that name (left from before this rule) is never the platform's."""
    name = normal(name)
    for zone in zones:
        if normal(zone.get("name")) == name and zone.get("project_id") == ADMIN_PROJECT:
            return zone
    return None


def foreign_cover(name, project_id, zones, wildcard=False):
    """The first zone that holds `name` but is not `project_id`'s, or None. Every zone
    covering the name must be the project's: the one answering it, and those above.
    `wildcard`: the name stands for `*.name`, which also matches the apex of a zone one
    label below it, so such a zone must be the project's too."""
    name = normal(name)
    for zone in sorted(zones, key=lambda z: -len(normal(z.get("name")))):
        if zone.get("project_id") == project_id:
            continue
        zname = normal(zone.get("name"))
        if covers(zname, name) or (wildcard and zname.partition(".")[2] == name):
            return zone
    return None


def resolve_refusal(domain, name, zones):
    """Why the API's resolve action of zone `domain` (a dns_domains record the caller may
    read) may not ask the built-in server for `name`, or None (docs/security.md, "DNS
    resolve action"). The server answers any name of any zone, so without this a
    project would read other projects' records through its own domain. The name must
    be the zone's or below it, and every zone covering it must be the domain's
    project's: a more specific zone of another owner (left from before the one-owner
    rule) answers it instead of this domain."""
    zone, name = normal(domain.get("name")), normal(name)
    if not covers(zone, name):
        return f"{name} is not inside the domain {zone}: ask for {zone} or a name below it"
    if foreign_cover(name, domain.get("project_id"), zones) is not None:
        return f"{ANOTHER_OWNER}: ask for a name of this domain's own zones"
    return None
