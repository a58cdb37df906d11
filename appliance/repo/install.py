"""Install, uninstall and upgrade of repo elements: the API side (spec 3.3).

The action resolves the dependency closure at once and refuses what cannot be installed
(requirement named); then it only records the desired state: installation_state,
status IN_PROGRESS, transitive bindings. repo/bridge.py (builder daemon) hands each
installed element to the Element Manager.
"""

from appliance.api.errors import BadRequest, Conflict
from appliance.em import builtin

from . import resolver
from .drivers import DriverError

# Elements built into this appliance (core, dbaas): a requirement on one is met by the
# appliance itself, at its version, never by a repository element of that name. Such an
# element could never be handed to the Element Manager (it refuses a built-in's name), so
# choosing it would leave every element that needs it IN_PROGRESS for ever; a repository
# element of such a name is refused at install instead. Their candidates' uuid is the name.
BUILTIN = {name: resolver.Candidate(uuid=name, name=name, version=element.version,
                                    priority=0, installed=True, requirements={})
           for name, element in builtin.BUILTIN.items()}


def refuse_builtin_name(record):
    if record["name"] in BUILTIN:
        raise Conflict(f"{record['name']} {record['version']}: element {record['name']} is "
                       f"built into this appliance (version {BUILTIN[record['name']].version})"
                       "; a repository element of that name cannot be installed, and "
                       "requirements on it are met by the appliance")


def _visible_repositories(resource, call):
    repos = resource.api.store.collection("repo_repositories").records()
    visible = resource.visible_projects(call)
    return {r["uuid"]: r for r in repos if visible is None or r["project_id"] in visible}


def _candidate(record, repositories):
    manifest = record.get("manifest")
    return resolver.Candidate(
        uuid=record["uuid"], name=record["name"], version=record["version"],
        priority=repositories[record["repository"]]["priority"],
        installed=record["installation_state"] == "INSTALLED",
        requirements=None if manifest is None else (manifest.get("requirements") or {}))


def resolve(resource, call, target):
    """The Resolution of `target`, or the API error that refuses it."""
    repositories = _visible_repositories(resource, call)
    elements = resource.collection()

    def candidates_for(name):
        if name in BUILTIN:
            return [BUILTIN[name]]
        return [_candidate(r, repositories) for r in elements.by("name", name)
                if r["repository"] in repositories]

    def load(candidate):
        try:
            record = resource.ensure_manifest(elements.require(candidate.uuid))
        except DriverError as e:
            raise Conflict(f"{candidate.name} {candidate.version}: manifest cannot be "
                           f"downloaded: {e}") from None
        return _candidate(record, repositories)

    try:
        target_record = target if target.get("manifest") is not None else \
            resource.ensure_manifest(target)
    except DriverError as e:
        raise Conflict(f"{target['name']} {target['version']}: manifest cannot be "
                       f"downloaded: {e}") from None
    try:
        return resolver.resolve(_candidate(target_record, repositories), candidates_for, load)
    except resolver.ResolutionError as e:
        # not found / constraint violated: 409; a constraint of a bad format: 400
        message = str(e)
        if e.requirement in BUILTIN and e.status != 400:
            message += (f"; {e.requirement} is built into this appliance at version "
                        f"{BUILTIN[e.requirement].version}, and a repository element of "
                        "that name is never installed")
        raise (BadRequest if e.status == 400 else Conflict)(message) from None


def _record_bindings(store, bindings):
    coll = store.collection("repo_bindings", unique=[("element", "depends_on")])
    existing = {(b["element"], b["depends_on"]) for b in coll.records()}
    fresh = [{"element": a, "depends_on": b} for a, b in bindings
             if a not in BUILTIN and b not in BUILTIN and (a, b) not in existing]
    if fresh:
        coll.insert_many(fresh)


def _mark_installed(resource, candidates):
    elements = resource.collection()
    for candidate in candidates:
        if candidate.uuid not in BUILTIN:
            elements.update(candidate.uuid, {"installation_state": "INSTALLED",
                                             "status": "IN_PROGRESS", "status_reason": None})


def install(resource, call, record):
    elements = resource.collection()
    if record["installation_state"] == "INSTALLED":
        if record["status"] == "ERROR":         # the retry path
            return elements.update(record["uuid"], {"status": "IN_PROGRESS",
                                                    "status_reason": "retrying"})
        raise Conflict(f"{record['name']} {record['version']} is already installed")
    refuse_builtin_name(record)
    for other in elements.by("name", record["name"]):
        if other["installation_state"] == "INSTALLED":
            raise Conflict(f"{record['name']} {other['version']} is installed; upgrade it "
                           "instead")
    resolution = resolve(resource, call, record)
    # bindings first: the builder hands over an INSTALLED element whose dependencies it
    # sees linked, and one without its bindings yet would go before its dependencies
    _record_bindings(call.store, resolution.bindings)
    _mark_installed(resource, resolution.to_install)
    return elements.require(record["uuid"])


def dependents(store, record):
    """INSTALLED elements that depend on `record` (through a binding)."""
    elements = store.collection("repo_elements")
    found = []
    for binding in store.collection("repo_bindings").by("depends_on", record["uuid"]):
        dependent = elements.get(binding["element"])
        if dependent is not None and dependent["installation_state"] == "INSTALLED":
            found.append(dependent)
    return found


def uninstall(resource, call, record):
    if record["installation_state"] != "INSTALLED":
        raise Conflict(f"{record['name']} {record['version']} is not installed")
    held_by = dependents(call.store, record)
    if held_by:
        names = ", ".join(f"{d['name']} {d['version']}" for d in held_by)
        raise Conflict(f"{record['name']} {record['version']} is required by {names}")
    return resource.collection().update(record["uuid"], {
        "installation_state": "UNINSTALLED", "status": "IN_PROGRESS",
        "status_reason": "uninstalling"})


def upgrade(resource, call, record, target):
    if record["installation_state"] != "INSTALLED":
        raise Conflict(f"{record['name']} {record['version']} is not installed")
    if target["name"] != record["name"] or target["version"] == record["version"]:
        raise BadRequest("target: must be another version of the same element")
    refuse_builtin_name(target)
    resolution = resolve(resource, call, target)
    # the runtime element moves to the target; the old record keeps its link and its
    # bindings until the builder releases them (spec 2.4 rule 5)
    others = [c for c in resolution.to_install if c.uuid != target["uuid"]]
    _record_bindings(call.store, resolution.bindings)
    _mark_installed(resource, others)
    resource.collection().update(target["uuid"], {
        "installation_state": "INSTALLED", "status": "IN_PROGRESS", "status_reason": None,
        "element": record.get("element")})
    resource.collection().update(record["uuid"], {
        "installation_state": "UNINSTALLED", "status": "IN_PROGRESS",
        "status_reason": f"upgrading to {target['version']}"})
    return resource.collection().require(target["uuid"])
