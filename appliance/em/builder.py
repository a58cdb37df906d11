"""Reconcile step of the builder daemon for elements: declared state vs actual state.

For each element, every resource of its manifest (in plan order) is rendered (links
resolved against live records) and compared with its record:

- missing            -> created with the uuid the element holds for it
- declared fields differ -> updated (only the fields the manifest declares: an
  operator-set secret value is not the manifest's and survives, spec 2.2 rule 4)
- a link that cannot give its value yet (a secret with no value) -> the resource waits;
  one log line `target state unavailable for <resource> by reason <field>`; resolved by
  the next pass after the value is set
- a resource no longer in the manifest -> deleted

Once an element's manifest has been fully applied, a missing or altered resource is a
repair: it is restored and reported in the element's `last_repair`. An element is ACTIVE
when every resource is; IN_PROGRESS with a reason while some wait; ERROR with a reason
when one is refused (re-invoking install/upgrade retries). A resource of a collection
with a data-plane status (builtin.py: the DBaaS ones) is ACTIVE only once its record is:
until then it waits, and so do the resources linking to it; its record in ERROR makes
the element ERROR until the record recovers. Uninstalled elements have their
resources deleted in reverse order, then disappear.

An element writes and reads as the project it acts for (acting.py): the platform's
with the unscoped SYSTEM principal, a project's with a principal scoped to it holding a
project owner's permissions. Each write then passes the permission of its collection and
every check the API makes for that project's owner (project_id, nodes, zones, addresses,
quotas), and a link or import reads only a record that owner could read; a refusal makes
the element ERROR with the refusal's message.
"""

import uuid as uuidlib

import state
from appliance.api.errors import ApiError, BadRequest, Conflict, Forbidden, NotFound
from appliance.api.routing import SystemCall
from appliance.kinds import IAM_PROJECTS, IAM_ROLES

from . import acting, builtin, links
from .acting import SYSTEM


def owned_by_element(link, user):
    """What an element owns is removed by the element only: the builder's own deletes
    pass the in-use rule's ownership link (every other link still refuses)."""
    return link.user_kind == "em_elements" and link.label == "resources"


class Waiting(Exception):
    pass


class ElementBuilder:
    def __init__(self, api, log):
        self.api = api
        self.store = api.store
        self.log = log
        self.call = SystemCall(api, SYSTEM)
        self._calls = {None: self.call}     # acting project -> its call
        self.call.ignore_in_use = owned_by_element
        self._plans = {}            # (manifest uuid, revision) -> Plan
        self._announced = set()     # (element, resource, reason) already logged

    def call_for(self, element):
        """The call an element's resources are written and read with."""
        project = acting.acting_project(self.store, element)
        if project not in self._calls:
            call = SystemCall(self.api, acting.principal_for(project))
            call.ignore_in_use = owned_by_element
            self._calls[project] = call
        return self._calls[project]

    def kinds(self):
        return sorted({r.kind for r in self.api.resources.values()})

    def reconcile_all(self):
        for element in list(self.store.collection("em_elements").records()):
            try:
                self.reconcile(element)
            except state.RevisionConflict:
                pass            # changed while we worked: that change brings another pass

    # ---- one element ---------------------------------------------------------------

    def plan_of(self, element):
        manifest = self.store.collection("em_manifests").get(element["manifest"])
        if manifest is None:
            return None
        key = (manifest["uuid"], manifest["revision"])
        if key not in self._plans:
            self._plans[key] = self.api.resources["/v1/em/manifests"].plan(manifest)
        return self._plans[key]

    def reconcile(self, element):
        if element["desired"] == "uninstalled":
            return self._uninstall(element)
        if element["status"] == "ERROR" and not _reported_error(element):
            return None         # refused: until the action is invoked again
        plan = self.plan_of(element)
        if plan is None:
            return self._write(element, {"status": "ERROR",
                                         "status_reason": "its manifest was deleted"})
        if element["status"] == "NEW":
            # visible at once: a large manifest takes a while to materialize
            element = self._write(element, {"status": "IN_PROGRESS", "status_reason":
                                            f"applying {element['version']}"})
        call = self.call_for(element)
        refusal = self._refusal(call, plan)
        if refusal is not None:
            return self._write(element, {"status": "ERROR", "status_reason": refusal})
        repairing = element.get("applied") == element["manifest"]
        current = element.get("resources") or {}
        resources = {k: dict(v) for k, v in current.items()}
        waiting, error, repaired = [], None, []
        for entry in plan.entries:
            slot = resources.setdefault(entry.key, {
                "uuid": str(entry.body.get("uuid") or uuidlib.uuid4()).lower(),
                "collection": entry.collection, "status": "PENDING", "reason": None})
            blocked = [d for d in sorted(entry.depends_on)
                       if resources.get(d, {}).get("status") != "ACTIVE"]
            if blocked:
                slot.update(status="WAITING", reason=f"waits for {blocked[0]}")
                waiting.append(entry.key)
                continue
            try:
                body = links.render(entry.body, self._resolver(call, plan, resources))
                if entry.parent and entry.parent[0] not in body:
                    body[entry.parent[0]] = self._parent_uuid(call, plan, entry, resources)
                if entry.parent and entry.parent[1].startswith("imports."):
                    slot["parent"] = body[entry.parent[0]]   # for its path (parts.py)
                self._keep_reference_only(entry, slot, body)
                self._reference_role(entry, body)
            except links.Unavailable as u:
                self._announce(element, entry, u.reason)
                slot.update(status="WAITING", reason=f"{u.link} has no {u.reason}")
                waiting.append(entry.key)
                continue
            except ApiError as e:
                slot.update(status="ERROR", reason=e.message)
                error = f"{entry.key}: {e.message}"
                break
            try:
                changed = self._apply(call, entry, slot, body)
            except (ApiError, state.StoreError) as e:
                message = getattr(e, "message", str(e))
                slot.update(status="ERROR", reason=message)
                slot.pop("record_status", None)
                error = f"{entry.key}: {message}"
                break
            if changed and repairing and slot["status"] == "ACTIVE":
                repaired.append(entry.key)
            reported = self._reported(entry, slot)
            if reported is not None and reported["status"] != "ACTIVE":
                status, why = reported["status"], reported.get("status_reason")
                reason = f"{status}" + (f": {why}" if why else "")
                if status == "ERROR":
                    slot.update(status="ERROR", reason=reason)
                    error = f"{entry.key}: {reason}"
                    break
                slot.update(status="WAITING", reason=f"is {reason}")
                waiting.append(entry.key)
                continue
            slot.update(status="ACTIVE", reason=None)
            self._announced = {a for a in self._announced
                               if a[:2] != (element["name"], entry.key)}
        if error is None:
            try:
                for key in [k for k in resources if k not in plan.by_key]:
                    self._delete(call, resources[key])
                    resources.pop(key)
            except ApiError as e:
                error = f"{key}: {e.message}"
        return self._finish(element, plan, resources, waiting, error, repaired)

    def _parent_uuid(self, call, plan, entry, resources):
        """The uuid of the record a sub-collection item is declared under: one of this
        manifest's, or an imported one (`$<me>.imports.$<import>.<sub>`), read as every
        import is: only when the acting project may read it."""
        parent_key = entry.parent[1]
        if not parent_key.startswith("imports."):
            return resources[parent_key]["uuid"]
        text = f"${plan.name}.{parent_key}"
        slot = self._imported_slot(plan, links.parse_link(text))
        if slot is None or self._readable(call, self.api.resources[slot["collection"]],
                                          slot["uuid"], text) is None:
            raise links.Unavailable(text, "resource")
        return slot["uuid"]

    def _keep_reference_only(self, entry, slot, body):
        """Fields of the reference that our collection has not (builtin.py,
        REFERENCE_ONLY_FIELDS) leave the body: what they name must exist, and the slot
        keeps them. Only a permission binding's project_id so far."""
        for name in list(body):
            if not builtin.reference_only(entry.collection, name):
                continue
            value = body.pop(name)
            if value is not None and self.store.collection(IAM_PROJECTS).get(
                    str(value).lower()) is None:
                raise BadRequest(f"{name}: project {value} does not exist")
            slot[name] = None if value is None else str(value).lower()

    def _reference_role(self, entry, body):
        """A binding's role given as one of the reference's built-in role uuids
        (builtin.REFERENCE_ROLES) is our built-in role of that name, unless a role of
        ours has that uuid."""
        role = body.get("role")
        if entry.collection not in builtin.ROLE_BINDING_COLLECTIONS or \
                not isinstance(role, str):
            return
        uuid = role.rstrip("/").rsplit("/", 1)[-1].lower()
        name = builtin.REFERENCE_ROLES.get(uuid)
        roles = self.store.collection(IAM_ROLES)
        if name is None or roles.get(uuid) is not None:
            return
        ours = next((r for r in roles.by("name", name) if r.get("builtin")), None)
        if ours is not None:
            body["role"] = ours["uuid"]

    def _refusal(self, call, plan):
        """Why an element of a project may not apply its plan at all, or None: checked
        before anything is written, so a manifest that names a collection the project's
        owner may not write, or another project, changes nothing."""
        principal = call.principal
        if acting.is_platform(principal):
            return None
        for entry in plan.entries:
            resource = self.api.resources[entry.collection]
            needed = resource.permission("create")
            if not principal.allows(needed):
                return (f"{entry.key}: an element of project {principal.project_id} may "
                        f"not write {resource.name} records (permission {needed}); it "
                        "writes what the project's owner may")
            named = entry.body.get("project_id")
            if resource.project_scoped and isinstance(named, str) and not named.startswith(
                    "$") and named.lower() != principal.project_id:
                return (f"{entry.key}: project_id {named} is not this element's project "
                        f"{principal.project_id}: an element writes only in the project "
                        "that installed it")
        return None

    def _apply(self, call, entry, slot, body):
        """Create or correct one record; True when something had to change."""
        resource = self.api.resources[entry.collection]
        if not acting.is_platform(call.principal):
            resource.admit(call)
        record = resource.collection().get(slot["uuid"])
        if record is None:
            resource.create_record(call, {**body, "uuid": slot["uuid"]})
            return True
        self._check_own(call, resource, record)
        changes = self._differences(resource, record, body)
        if changes:
            resource.update_record(call, slot["uuid"], changes)
            return True
        return False

    @staticmethod
    def _check_own(call, resource, record):
        """A project's element takes over no record of another owner: a manifest may give
        a resource the uuid of an existing record, and one with nothing to change would
        otherwise become the element's (and readable through its links)."""
        project = call.principal.project_id
        if acting.is_platform(call.principal) or not resource.project_scoped or \
                record.get("project_id") == project:
            return
        raise Forbidden(f"uuid {record['uuid']} names a {resource.name} that is not "
                        f"project {project}'s: an element writes only its own project's "
                        "records")

    @staticmethod
    def _readable(call, resource, uuid, text):
        """The record a link reads, if the acting project may read it (as the API decides
        for a reader of that project: its permission, its own and the shared projects'
        records), else NotFound; None when it does not exist."""
        record = resource.collection().get(uuid)
        principal = call.principal
        if record is None or acting.is_platform(principal):
            return record
        visible = resource.visible_projects(call)
        if not principal.allows(resource.permission("read")) or (
                visible is not None and record.get("project_id") not in visible):
            raise NotFound(f"link {text}: no {resource.name} this element's project "
                           f"{principal.project_id} may read")
        return record

    def _reported(self, entry, slot):
        """The record of a resource whose readiness is its data-plane status (a DBaaS
        instance, user or database is ready when the data plane made it, not when the API
        stored it), else None. The slot keeps the status it saw as `record_status`."""
        if not builtin.follows_status(entry.collection):
            return None
        record = self.api.resources[entry.collection].collection().get(slot["uuid"])
        if record is None:
            return None
        slot["record_status"] = record.get("status")
        return record

    @staticmethod
    def _differences(resource, record, body):
        shown = resource.render(record)
        changes = {}
        for name, wanted in body.items():
            field = resource.field(name)
            if name == "uuid" or field.write_only or field.create_only:
                continue        # cannot be compared, or cannot change after create
            given = field.type.to_input(wanted)
            # a resource may show a field in another form than its type renders (a DBaaS
            # version or owner is shown as its family's path, stored as the bare uuid):
            # equal as shown or equal as stored is the same value, and writing it again
            # would wake the builder for another pass, forever
            if shown.get(name) != field.type.render(given) and record.get(name) != given:
                changes[name] = wanted
        return changes

    def _resolver(self, call, plan, resources):
        def resolve(link):
            if link.is_import:
                slot = self._imported_slot(plan, link)
            else:
                slot = resources.get(link.key)
            if slot is None:
                raise links.Unavailable(link.text, "resource")
            resource = self.api.resources[slot["collection"]]
            # an import names another element's record: even its bare uuid is read only
            # when the acting project may see the record
            if not link.fields and not link.is_import:
                return slot["uuid"]
            record = self._readable(call, resource, slot["uuid"], link.text)
            if not link.fields:
                if record is None:
                    raise links.Unavailable(link.text, "resource")
                return slot["uuid"]
            if record is None:
                raise links.Unavailable(link.text, "resource")
            value = resource.link_value(resource.render(record), link.fields[0])
            for field in link.fields[1:]:
                value = value.get(field) if isinstance(value, dict) else None
            if value is None:
                raise links.Unavailable(link.text, link.fields[-1])
            return value
        return resolve

    def _imported_slot(self, plan, link):
        name = link.segments[1][1:]
        imp = plan.imports.get(name)
        source = self.store.collection("em_elements").find_one(name=imp["element"][1:])
        if source is None and imp["element"][1:] not in builtin.BUILTIN:
            # its element was uninstalled after this one was accepted: nothing will bring
            # it back by itself, so waiting would be for ever
            raise Conflict(f"import {name}: element {imp['element'][1:]} is not installed")
        if source is None:
            return builtin.exported_slot(imp["element"][1:], imp["link"], self.store)
        return (source.get("resources") or {}).get(links.parse_link(imp["link"]).key)

    def _announce(self, element, entry, reason):
        mark = (element["name"], entry.key, reason)
        if mark not in self._announced:
            self._announced.add(mark)
            self.log.warning("target state unavailable for $%s.%s by reason %s",
                             element["name"], entry.key, reason)

    def _delete(self, call, slot):
        resource = self.api.resources.get(slot["collection"])
        if resource is None:
            return
        try:
            resource.delete_record(call, slot["uuid"])
        except ApiError as e:
            if e.status != 404:
                raise

    def _finish(self, element, plan, resources, waiting, error, repaired):
        if error:
            status, reason = "ERROR", error
        elif waiting:
            status = "IN_PROGRESS"
            reason = "waiting: " + "; ".join(
                f"{k} ({resources[k]['reason']})" for k in waiting[:5])
        else:
            status, reason = "ACTIVE", None
        changes = {"resources": resources, "status": status, "status_reason": reason}
        if status == "ACTIVE":
            changes["applied"] = element["manifest"]
        if repaired:
            changes["last_repair"] = {"resources": repaired, "at": state.format_time(
                state.utcnow())}
            self.log.warning("element %s: restored %s", element["name"], ", ".join(repaired))
        if status == "ACTIVE" and element["status"] != "ACTIVE":
            self.log.info("element %s %s is ACTIVE", element["name"], element["version"])
        return self._write(element, changes)

    def _write(self, element, changes):
        if all(element.get(k) == v for k, v in changes.items()):
            return element
        return self.store.collection("em_elements").update(
            element["uuid"], changes, expect_revision=element["revision"])

    def _uninstall(self, element):
        plan = self.plan_of(element)
        resources = element.get("resources") or {}
        order = [e.key for e in plan.entries] if plan else []
        call = self.call_for(element)
        for key in reversed(order + [k for k in resources if k not in order]):
            if key in resources:
                try:
                    self._delete(call, resources[key])
                except ApiError as e:
                    return self._write(element, {
                        "status": "ERROR", "status_reason": f"uninstall of {key}: {e.message}"})
        self.store.collection("em_elements").delete(element["uuid"])
        self.log.info("element %s %s uninstalled", element["name"], element["version"])
        return None


def _reported_error(element):
    """An element in ERROR because a record's data-plane status is ERROR, not because a
    write was refused: the data plane retries on its own, so the element keeps following
    it (and comes back when the record does) without the action being invoked again."""
    return any(slot.get("status") == "ERROR" and slot.get("record_status") == "ERROR"
               for slot in (element.get("resources") or {}).values())
