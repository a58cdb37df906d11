"""Reconcile step of the builder daemon between repo elements and the Element Manager
(spec 3.3, the "universal agent" of the install and upgrade flows).

    INSTALLED,   no link  -> install: its manifest becomes an EM manifest, installed (or
                             upgraded when an EM element of that name exists); the EM
                             element's uuid is stored in `element`
    INSTALLED,   link     -> follow: status mirrors the EM element (ACTIVE, ERROR with its
                             reason); an EM element at another version is upgraded
    UNINSTALLED, link     -> release: uninstalled through the EM, then unlinked; unless
                             the link moved to a newer INSTALLED version (an upgrade), which
                             releases the old record once the new one is ACTIVE: its
                             bindings dropped, bindings to it repointed to the new one

Elements are handed over in dependency order: one whose dependencies are not linked yet
waits for the next pass.

The EM manifest made of a repo element acts for the repo element's project (the admin
project's catalogs: the platform), so the builder writes its resources with that
project's rights only (appliance/em/acting.py). An EM manifest of the same name and
version that acts for another owner is never reused: the repo element goes ERROR.
"""

from appliance.api.errors import ApiError, Conflict
from appliance.api.routing import SystemCall
from appliance.em import acting
from appliance.kinds import EM_ELEMENTS, EM_MANIFESTS

from .drivers import DriverError


class RepoBridge:
    def __init__(self, api, log):
        self.api = api
        self.store = api.store
        self.log = log
        self.call = SystemCall(api, acting.SYSTEM)

    @property
    def repo_elements(self):
        return self.api.resources["/v1/repo/elements"]

    @property
    def manifests(self):
        return self.api.resources["/v1/em/manifests"]

    def reconcile(self):
        for record in list(self.store.collection("repo_elements").records()):
            record = self.store.collection("repo_elements").get(record["uuid"])
            if record is None:
                continue
            try:
                if record["installation_state"] == "INSTALLED" and not record.get("element"):
                    self._hand_over(record)
                elif record["installation_state"] == "INSTALLED":
                    self._follow(record)
                elif record.get("element"):
                    self._release(record)
            except (ApiError, DriverError) as e:
                message = getattr(e, "message", str(e))
                self.log.warning("repo element %s %s: %s", record["name"], record["version"],
                                 message)
                self._set(record, status="ERROR", status_reason=message)

    # ---- helpers -------------------------------------------------------------------

    def _set(self, record, **changes):
        if any(record.get(k) != v for k, v in changes.items()):
            return self.store.collection("repo_elements").update(record["uuid"], changes)
        return record

    def _em_element(self, uuid=None, name=None):
        coll = self.store.collection(EM_ELEMENTS)
        return coll.get(uuid) if uuid else coll.find_one(name=name)

    def _em_manifest(self, record):
        """The EM manifest of a repo element: the one of that name and version acting for
        the same owner, or new (written by a call of that owner, whom it then acts for)."""
        project = acting.for_project(record["project_id"])
        found = self.store.collection(EM_MANIFESTS).find_one(
            name=record["name"], version=record["version"])
        if found is not None:
            if acting.acting_project(self.store, found, EM_MANIFESTS) != project:
                raise Conflict(f"the Element Manager holds a manifest {record['name']} "
                               f"{record['version']} of another owner; rename the element "
                               "or give it another version")
            return found
        manifest = {k: v for k, v in record["manifest"].items() if k != "uuid"}
        return self.manifests.create_record(
            SystemCall(self.api, acting.principal_for(project)), manifest)

    def _dependencies_linked(self, record):
        """True when every dependency is handed over; False while one is on its way; a
        dependency that went ERROR before it was handed over will not get there by itself,
        so this element cannot either: a Conflict naming it (the element goes ERROR, and
        an install retry after the dependency's fix hands it over)."""
        elements = self.store.collection("repo_elements")
        for binding in self.store.collection("repo_bindings").by("element", record["uuid"]):
            dep = elements.get(binding["depends_on"])
            if dep is not None and dep["installation_state"] == "INSTALLED" and \
                    not dep.get("element"):
                if dep["status"] == "ERROR":
                    raise Conflict(f"dependency {dep['name']} {dep['version']} failed: "
                                   f"{dep.get('status_reason') or 'no reason given'}")
                return False
        return True

    # ---- the three moves -------------------------------------------------------------

    def _hand_over(self, record):
        if not self._dependencies_linked(record):
            return
        record = self.repo_elements.ensure_manifest(record)
        manifest = self._em_manifest(record)
        existing = self._em_element(name=record["name"])
        if existing is None:
            self.manifests.install(self.call, manifest)
        elif existing["manifest"] != manifest["uuid"]:
            self.manifests.upgrade(self.call, manifest)
        element = self._em_element(name=record["name"])
        self._set(record, element=element["uuid"], status="IN_PROGRESS", status_reason=None)
        self.log.info("repo element %s %s handed to the Element Manager", record["name"],
                      record["version"])

    def _follow(self, record):
        element = self._em_element(uuid=record["element"])
        if element is None:
            # the EM element went away behind our back: hand the element over again
            return self._set(record, element=None, status="IN_PROGRESS", status_reason=None)
        if element["version"] != record["version"]:
            if element["status"] == "ERROR":
                return self._set(record, status="ERROR", status_reason=element["status_reason"])
            manifest = self._em_manifest(self.repo_elements.ensure_manifest(record))
            if element["manifest"] != manifest["uuid"]:
                self.manifests.upgrade(self.call, manifest)
            return self._set(record, status="IN_PROGRESS", status_reason=None)
        if element["status"] == "ACTIVE":
            record = self._set(record, status="ACTIVE", status_reason=None)
            self._release_upgraded(record)
        elif element["status"] == "ERROR":
            self._set(record, status="ERROR", status_reason=element["status_reason"])
        else:
            self._set(record, status="IN_PROGRESS", status_reason=element.get("status_reason"))

    def _release_upgraded(self, record):
        elements = self.store.collection("repo_elements")
        bindings = self.store.collection("repo_bindings", unique=[("element", "depends_on")])
        for old in list(elements.by("name", record["name"])):
            if old["uuid"] == record["uuid"] or old.get("element") != record["element"] or \
                    old["installation_state"] != "UNINSTALLED":
                continue
            bindings.delete_where(lambda b: b["element"] == old["uuid"])
            for binding in list(bindings.by("depends_on", old["uuid"])):
                bindings.delete(binding["uuid"])
                if binding["element"] != record["uuid"] and not bindings.find_one(
                        element=binding["element"], depends_on=record["uuid"]):
                    bindings.insert({"element": binding["element"],
                                     "depends_on": record["uuid"]})
            self._set(old, element=None, status="AVAILABLE", status_reason=None)
            self.log.info("repo element %s %s released after upgrade to %s", old["name"],
                          old["version"], record["version"])

    def _release(self, record):
        elements = self.store.collection("repo_elements")
        if any(e["installation_state"] == "INSTALLED" and e.get("element") == record["element"]
               for e in elements.by("name", record["name"])):
            return          # an upgrade: released by the new version once it is ACTIVE
        element = self._em_element(uuid=record["element"])
        if element is None:
            self.store.collection("repo_bindings").delete_where(
                lambda b: b["element"] == record["uuid"])
            self._set(record, element=None, status="AVAILABLE", status_reason=None)
            self.log.info("repo element %s %s uninstalled", record["name"], record["version"])
            return
        if element["desired"] == "installed":
            manifest = self.store.collection(EM_MANIFESTS).get(element["manifest"])
            self.manifests.uninstall(self.call, manifest)
        self._set(record, status="IN_PROGRESS", status_reason="uninstalling")
