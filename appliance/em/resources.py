"""Element Manager API: manifests (what to install) and elements (what is installed).

Actions answer at once and leave the work to the builder daemon: install and upgrade
check everything that can be checked now (the manifest's plan, requirements met, imports
exported, no name clash) and record the element's desired state; uninstall checks that
no installed element still requires it within range.
"""

from appliance import versions
from appliance.api.errors import BadRequest, Conflict, Forbidden
from appliance.api.fields import UUID, Enum, Field, Integer, Object, Reference, String, Text
from appliance.api.links import ANY, Link
from appliance.api.resource import Action, Resource
from appliance.api.routing import JSON, UPLOAD, YAML

from . import acting, builtin, links
from .manifest import NAME, build_plan

ELEMENT_STATUSES = ("NEW", "IN_PROGRESS", "ACTIVE", "ERROR")


ACTING_PROJECT = ("the project this acts for: its resources are written with that "
                  "project's rights and may reach only what the project may; null for "
                  "the platform (docs/element-manager.md)")


class ActingProjectVisibility:
    """Manifests and elements are not a project's records, yet each acts for one: a
    caller scoped to a project sees (and acts on) only those acting for it, a platform
    caller every one."""

    def visible_projects(self, call):
        principal = call.principal
        if acting.is_platform(principal):
            return None
        return {principal.project_id} if principal.project_id else set()


def installed_elements(store):
    return {e["name"]: e for e in store.collection("em_elements").records()
            if e.get("desired") == "installed"}


class Manifests(ActingProjectVisibility, Resource):
    def __init__(self):
        super().__init__(
            name="Manifest", path="/v1/em/manifests", kind="em_manifests", service="em",
            policy="manifest", unique=[("name", "version")],
            max_body=UPLOAD, create_accepts=(JSON, YAML),
            operations=("list", "create", "get", "delete"),
            description="a manifest: POST it as JSON or as YAML (Content-Type: "
                        "application/yaml)",
            fields=[
                Field("name", String(255, pattern=NAME), required=True, create_only=True),
                Field("version", String(255), required=True, create_only=True),
                Field("description", Text(4096)),
                Field("schema_version", Integer(1, 1), default=1, nullable=False),
                Field("api_version", Enum("v1"), default="v1", nullable=False),
                Field("requirements", Object()),
                Field("resources", Object(), required=True),
                Field("imports", Object()),
                Field("exports", Object()),
                Field("project_id", UUID(), read_only=True, description=ACTING_PROJECT),
            ],
            actions=[
                Action("validate", self.validate, method="GET",
                       summary="Check the manifest against what is installed now"),
                Action("install", self.install, summary="Install as a new element",
                       max_body=UPLOAD),
                Action("upgrade", self.upgrade, summary="Upgrade the installed element of "
                                                        "this name to this manifest"),
                Action("uninstall", self.uninstall,
                       summary="Uninstall the element installed from this manifest"),
            ])

    @staticmethod
    def content(record):
        keys = ("name", "version", "description", "schema_version", "api_version",
                "requirements", "resources", "imports", "exports")
        return {k: record.get(k) for k in keys if record.get(k) is not None}

    def plan(self, record):
        return build_plan(self.content(record), self.api)

    def prepare_create(self, call, record):
        self.plan(record)           # a manifest that cannot be planned is never stored
        principal = call.principal
        if acting.for_caller(principal) is None and not acting.is_platform(principal):
            raise Forbidden("a manifest acts for a project or the platform: use a token "
                            "scoped to a project or an administrator's")
        record["project_id"] = acting.for_caller(principal)
        return record


    # ---- install-time checks -------------------------------------------------------

    def problems(self, store, plan, project_id=None):
        """Requirements and imports against the installed elements: [(status, message)].
        `project_id`: the project the element would act for (None: the platform); it may
        import only from its own project's elements, the platform's, and the built-in
        ones (what it may read through the import is checked again when it is read)."""
        installed = installed_elements(store)
        found = []
        if plan.name in builtin.BUILTIN:
            found.append((409, f"element {plan.name} is built into this appliance; a "
                               "manifest of that name cannot be installed"))
        for name, constraints in plan.requirements.items():
            element = installed.get(name)
            if element is None and name in builtin.BUILTIN:
                have = versions.parse(builtin.BUILTIN[name].version)
            elif element is None:
                found.append((409, f"requirement {name} ({versions.describe(constraints)}): "
                                   f"element {name} is not installed"))
                continue
            else:
                have = versions.parse(element["version"])
            if not versions.satisfies(have, constraints):
                found.append((409, f"requirement {name} ({versions.describe(constraints)}): "
                                   f"installed version {have} does not satisfy it"))
        for imp_name, imp in plan.imports.items():
            source = imp["element"][1:]
            element = installed.get(source)
            if element is not None and project_id is not None and acting.acting_project(
                    store, element) not in (None, project_id):
                found.append((400, f"import {imp_name}: element {source} is another "
                                   "project's; an element imports only from its own "
                                   "project's elements and the platform's"))
                continue
            if element is not None:
                exported = {links.parse_link(e["link"]).segments
                            for e in (element.get("exports") or {}).values()}
            elif source in builtin.BUILTIN:
                exported = set(builtin.BUILTIN[source].exported(store))
            else:
                found.append((400, f"import {imp_name}: element {source} is not installed"))
                continue
            if links.parse_link(imp["link"]).segments not in exported:
                found.append((400, f"import {imp_name}: element {source} does not export "
                                   f"{imp['link']}"))
        return found

    def _raise_first(self, problems):
        if problems:
            status, message = problems[0]
            raise (Conflict if status == 409 else BadRequest)(message)

    # ---- actions -------------------------------------------------------------------

    def validate(self, call, record):
        try:
            plan = self.plan(record)
        except BadRequest as e:
            return {"valid": False, "errors": [e.message], "order": []}
        errors = [m for _, m in self.problems(call.store, plan,
                                              acting.acting_project(call.store, record,
                                                                    "em_manifests"))]
        return {"valid": not errors, "errors": errors, "order": [e.key for e in plan.entries]}

    # Each action reads the elements, checks and writes under the elements' lock: the
    # builder cannot slip a write in between (no internal conflict can reach the caller),
    # and two actions cannot both pass checks that each would fail after the other (an
    # install of a dependent and the uninstall of what it requires).

    def install(self, call, record):
        plan = self.plan(record)
        elements = call.store.collection("em_elements")
        with elements.lock:
            existing = elements.find_one(name=plan.name)
            if existing is not None:
                if existing["desired"] == "installed" and existing["manifest"] == record[
                        "uuid"] and existing["status"] == "ERROR":
                    return self._retry(call, existing)
                raise Conflict(f"element {plan.name} is already installed at version "
                               f"{existing['version']}; use upgrade")
            project = acting.acting_project(call.store, record, "em_manifests")
            self._raise_first(self.problems(call.store, plan, project))
            element = elements.insert(self._element_fields(record, plan, {
                "name": plan.name, "desired": "installed", "resources": {}, "applied": None,
                "last_repair": None, "project_id": project}))
        return self.api.resources["/v1/em/elements"].render(element)

    def upgrade(self, call, record):
        plan = self.plan(record)
        elements = call.store.collection("em_elements")
        with elements.lock:
            element = elements.find_one(name=plan.name)
            if element is None or element["desired"] != "installed":
                raise Conflict(f"element {plan.name} is not installed; use install")
            project = acting.acting_project(call.store, record, "em_manifests")
            if acting.acting_project(call.store, element) != project:
                # an upgrade would hand the element's resources to another owner
                raise Conflict(f"element {plan.name} is installed for another owner than "
                               "this manifest acts for; an upgrade keeps the owner")
            if element["manifest"] == record["uuid"]:
                if element["status"] == "ERROR":
                    return self._retry(call, element)
                raise Conflict(f"element {plan.name} is already at version "
                               f"{element['version']}")
            if element["version"] == record["version"]:
                raise Conflict(f"element {plan.name} is already at version "
                               f"{record['version']}")
            # dependents are not consulted: an upgrade may leave their range, after which
            # they no longer hold this element against uninstall (spec 3.3 refuses only that)
            self._raise_first(self.problems(call.store, plan, project))
            updated = elements.update(element["uuid"], self._element_fields(record, plan, {}))
        return self.api.resources["/v1/em/elements"].render(updated)

    def uninstall(self, call, record):
        elements = call.store.collection("em_elements")
        with elements.lock:
            element = elements.find_one(name=record["name"])
            if element is None or element["manifest"] != record["uuid"]:
                raise Conflict(f"no element is installed from manifest {record['name']} "
                               f"{record['version']}")
            if element["desired"] == "uninstalled":
                raise Conflict(f"element {record['name']} is already being uninstalled")
            self._check_dependents(call.store, record["name"])
            updated = elements.update(element["uuid"], {
                "desired": "uninstalled", "status": "IN_PROGRESS",
                "status_reason": "uninstalling"})
        return self.api.resources["/v1/em/elements"].render(updated)

    def _check_dependents(self, store, name):
        """Refuse while another installed element requires `name` within range of its
        installed version."""
        installed = installed_elements(store)
        have = versions.parse(installed[name]["version"])
        for other in installed.values():
            requirements = other.get("requirements") or {}
            if other["name"] == name or name not in requirements:
                continue
            constraints = versions.constraints_from_requirement(requirements[name] or {})
            if versions.satisfies(have, constraints):
                raise Conflict(f"cannot uninstall {name} {have}: element {other['name']} "
                               f"{other['version']} requires {name} "
                               f"({versions.describe(constraints)})")

    def _element_fields(self, record, plan, extra):
        return {**extra, "version": record["version"], "description": record.get("description"),
                "manifest": record["uuid"], "status": "NEW", "status_reason": None,
                "requirements": record.get("requirements") or {},
                "imports": record.get("imports") or {}, "exports": record.get("exports") or {}}

    def _retry(self, call, element):
        """Re-invoking the action on an element in ERROR: the builder tries again. The
        caller holds the elements' lock."""
        updated = call.store.collection("em_elements").update(
            element["uuid"], {"status": "IN_PROGRESS", "status_reason": "retrying"})
        return self.api.resources["/v1/em/elements"].render(updated)


class Elements(ActingProjectVisibility, Resource):
    def declared_links(self):
        return owned_links(self.api)

    def __init__(self):
        super().__init__(
            name="Element", path="/v1/em/elements", kind="em_elements", service="em",
            policy="element", unique=[("name",)], operations=("list", "get"),
            description="an installed element; created, changed and removed through the "
                        "actions of its manifest",
            fields=[
                Field("name", String(255), read_only=True),
                Field("version", String(255), read_only=True),
                Field("description", Text(4096), read_only=True),
                Field("manifest", Reference("/v1/em/manifests"), read_only=True),
                Field("status", Enum(*ELEMENT_STATUSES), read_only=True),
                Field("status_reason", String(4096), read_only=True),
                Field("desired", Enum("installed", "uninstalled"), read_only=True),
                Field("resources", Object(), read_only=True,
                      description="resource key -> {uuid, collection, status, reason}, and "
                                  "record_status (the record's data-plane status) for "
                                  "the collections an element waits on (DBaaS)"),
                Field("requirements", Object(), read_only=True),
                Field("imports", Object(), read_only=True),
                Field("exports", Object(), read_only=True),
                Field("applied", UUID(), hidden=True),
                Field("last_repair", Object(), read_only=True,
                      description="the last resource restored after a change behind the "
                                  "element's back"),
                Field("project_id", UUID(), read_only=True, description=ACTING_PROJECT),
            ])


def owned_links(api):
    """The links of an element to the records it owns (its `resources` map): the
    Element Manager re-creates what is deleted behind its back, so such a delete is a
    409, save the Element Manager's own (builder.py)."""
    def owned(element):
        found = []
        for slot in (element.get("resources") or {}).values():
            resource = api.resources.get(slot.get("collection"))
            if resource is not None and slot.get("uuid"):
                found.append((resource.kind, slot["uuid"]))
        return found
    return [Link("em_elements", ANY, label="resources", values=owned,
                 message=None),
            Link("em_elements", "em_manifests", field="manifest",
                 message=lambda manifest, elements: f"element {elements[0]['name']} was "
                                                    "installed from this manifest")]


def all_resources():
    return [Manifests(), Elements()]
