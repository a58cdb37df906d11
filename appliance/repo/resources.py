"""Repo Proxy API: repositories (spec 2.3) and repo elements (2.4), with their actions.

Actions check what can be checked at once (a dependency closure that cannot be resolved
is refused here, naming the requirement) and record the desired state; the builder
daemon does the work (repo/sync.py reads inventories, repo/bridge.py hands installed
elements to the Element Manager).
"""


from appliance import versions
from appliance.api.errors import ApiError, BadRequest, Conflict, Forbidden, Unauthorized
from appliance.api.fields import (UUID, Boolean, DateTime, Enum, Field, Integer, Object,
                                  Reference, String, Tags, Text)
from appliance.api.resource import Action, Resource
from appliance.api.routing import UPLOAD
from appliance.api.validation import Validator
from appliance.em.manifest import build_plan
from appliance.kinds import ADMIN_PROJECT
from appliance.secret.crypto import SecretBox
from appliance.tenancy import addresses, fetch, is_platform
from state import DuplicateKey, format_time, utcnow

from . import install, inventory
from .drivers import DRIVERS, DriverError, driver_for

MASK = "********"
REPO_STATUSES = ("NEW", "ACTIVE", "IN_PROGRESS", "DISABLED", "ERROR")
ELEMENT_STATUSES = ("NEW", "AVAILABLE", "ACTIVE", "IN_PROGRESS", "ERROR")
URL = r"^https?://[^\s/?#]+[^\s?#]*$"

DRIVER_SCHEMAS = {
    "nginx": {"type": "object", "required": ["kind", "url"], "additionalProperties": False,
              "properties": {"kind": {"const": "nginx"},
                             "url": {"type": "string", "maxLength": 2048, "pattern": URL},
                             "username": {"type": ["string", "null"], "maxLength": 255},
                             "password": {"type": ["string", "null"], "maxLength": 255}}},
    "bootstrap": {"type": "object", "required": ["kind", "manifests_dir"],
                  "additionalProperties": False,
                  "properties": {"kind": {"const": "bootstrap"},
                                 "manifests_dir": {"type": "string", "minLength": 1,
                                                   "maxLength": 2048}}},
    "dummy_migration": {"type": "object", "additionalProperties": False,
                        "properties": {"kind": {"const": "dummy_migration"}}},
    "database": {"type": "object", "additionalProperties": False,
                 "properties": {"kind": {"const": "database"}}},
}
_DRIVER_CHECKS = {k: Validator({"type": "object", "properties": {"driver_spec": s}})
                  for k, s in DRIVER_SCHEMAS.items()}
DRIVER_FIELD = {"type": "object", "required": ["kind"],
                "properties": {"kind": {"enum": sorted(DRIVERS)}},
                "description": "by kind: nginx {url, username, password}, bootstrap "
                               "{manifests_dir}, dummy_migration {}, database {}"}


def now_text():
    return format_time(utcnow())


class Repositories(Resource):
    def __init__(self):
        super().__init__(
            name="Repository", path="/v1/repo/repositories", kind="repo_repositories",
            service="repo", policy="repository", project_scoped=True,
            shared_projects=(ADMIN_PROJECT,), unique=[("name", "project_id")],
            description="an element repository; the admin project's are every project's "
                        "public catalog",
            fields=[
                Field("name", String(255), required=True),
                Field("description", Text(65536)),
                Field("project_id", UUID(), required=True, create_only=True),
                Field("status", Enum(*REPO_STATUSES), read_only=True),
                Field("status_reason", String(4096), read_only=True),
                Field("priority", Integer(0, 16384), default=8192, nullable=False,
                      description="higher is preferred in dependency resolution"),
                Field("refresh_rate", Integer(0, 365 * 86400), default=3600, nullable=False,
                      description="seconds between inventory re-reads; 0 disables"),
                Field("sync_mode", Enum("copy", "lazy"), default="copy", nullable=False),
                Field("driver_spec", Object(DRIVER_FIELD), required=True),
                Field("next_refresh", DateTime(), hidden=True),
                Field("synced_at", DateTime(), read_only=True,
                      description="when the inventory was last read"),
            ],
            actions=[
                Action("refresh", self.refresh, summary="Re-read the inventory now"),
                Action("upload", self.upload, permission="repo.repository.upload",
                       max_body=UPLOAD, summary="Upload an element (database driver)"),
                Action("authorize_upload", self.authorize_upload, method="GET",
                       permission=("repo.repository.read", "repo.repository.upload"),
                       summary="auth_request check for an upload proxy (X-Original-Method, "
                               "X-Original-URI)"),
            ])

    def register(self, api):
        super().register(api)
        self.box = SecretBox(api.store)

    # ---- driver_spec: validated by kind, password sealed and never shown ------------

    def _driver_spec(self, spec, current=None):
        kind = spec.get("kind") if isinstance(spec, dict) else None
        check = _DRIVER_CHECKS.get(kind)
        if check is None:
            raise BadRequest("driver_spec.kind: must be one of " + ", ".join(sorted(DRIVERS)))
        spec = dict(spec)
        # the mask sent back as it was read means: keep the stored password
        keep = spec.get("password") == MASK and current is not None
        if keep:
            del spec["password"]
        check.check({"driver_spec": spec})
        if keep and current.get("password"):
            spec["password"] = current["password"]
        elif spec.get("password"):
            spec["password"] = self.box.seal(self.kind, "driver", "password", spec["password"])
        if kind == "nginx":
            spec["url"] = spec["url"].rstrip("/")       # with or without slash: the same
        return spec

    def opened_spec(self, record):
        spec = dict(record["driver_spec"])
        if spec.get("password"):
            spec["password"] = self.box.open(self.kind, "driver", "password", spec["password"])
        return spec

    def render(self, record, only=None):
        shown = dict(record)
        spec = dict(record.get("driver_spec") or {})
        if spec.get("password"):
            spec["password"] = MASK
        shown["driver_spec"] = spec
        return super().render(shown, only)

    def check_reach(self, call, spec, project_id):
        """What a project's repository may name: an nginx url whose host is not an
        address the project may not reach (a name is judged when the builder fetches),
        and no bootstrap directory (a path on the appliance: the platform's only)."""
        if spec["kind"] == "bootstrap" and not is_platform(call.principal):
            raise Forbidden("driver_spec.kind: a bootstrap repository reads a directory of "
                            "the appliance; it is for administrators only")
        if spec["kind"] == "nginx":
            reach = addresses.for_caller(call.store, self.api.settings, call.principal,
                                         project_id)
            why = fetch.literal_refusal(spec["url"], reach)
            if why:
                raise BadRequest(f"driver_spec.url: {why}")

    def prepare_create(self, call, record):
        record["driver_spec"] = self._driver_spec(record["driver_spec"])
        self.check_reach(call, record["driver_spec"], record["project_id"])
        record.update(status="NEW", status_reason=None, next_refresh=now_text(),
                      synced_at=None)
        return record

    def prepare_update(self, call, current, changes):
        if "driver_spec" in changes:
            changes["driver_spec"] = self._driver_spec(changes["driver_spec"],
                                                       current["driver_spec"])
            self.check_reach(call, changes["driver_spec"], current["project_id"])
            if changes["driver_spec"] != current["driver_spec"]:
                changes.update(status="NEW", status_reason=None, next_refresh=now_text())
        if changes.get("sync_mode", current["sync_mode"]) != current["sync_mode"]:
            changes["next_refresh"] = now_text()
        return changes

    def check_delete(self, call, record):
        for element in call.store.collection("repo_elements").by("repository", record["uuid"]):
            if element["installation_state"] == "INSTALLED" or element.get("element"):
                raise Conflict(f"element {element['name']} {element['version']} of this "
                               "repository is installed")

    def after_delete(self, call, record):
        gone = call.store.collection("repo_elements").delete_where(
            lambda e: e["repository"] == record["uuid"])
        ids = {e["uuid"] for e in gone}
        call.store.collection("repo_artifacts").delete_where(lambda a: a["element"] in ids)

    # ---- actions -------------------------------------------------------------------

    def refresh(self, call, record):
        updated = self.collection().update(record["uuid"], {"next_refresh": now_text()})
        return self.render(updated)

    def upload(self, call, record):
        body = call.body if isinstance(call.body, dict) else {}
        name, version = body.get("element_name"), body.get("element_version")
        manifest = body.get("manifest")
        if not isinstance(name, str) or not isinstance(version, str) or not name:
            raise BadRequest("element_name and element_version are required strings")
        try:
            versions.parse(version)
        except versions.VersionError as e:
            raise BadRequest(f"element_version: {e}") from None
        if not isinstance(manifest, dict):
            raise BadRequest("manifest: required, an object")
        if manifest.get("name") != name or str(manifest.get("version")) != version:
            raise BadRequest("manifest: its name and version must be element_name and "
                             "element_version")
        # refused now rather than by the builder later, where only its log would say why
        try:
            build_plan(manifest, self.api)
        except BadRequest as e:
            raise BadRequest(f"manifest: {e.message}") from None
        if record["status"] != "ACTIVE":
            raise Conflict(f"repository {record['name']} is {record['status']}, not ACTIVE")
        if not DRIVERS[record["driver_spec"]["kind"]].can_upload:
            raise Conflict(f"driver {record['driver_spec']['kind']} does not support upload")
        elements = self.api.resources["/v1/repo/elements"]
        try:
            created = elements.new_element(record, inventory.entry(name, version), manifest,
                                           description=body.get("description"))
        except DuplicateKey:
            raise Conflict(f"{name} {version} is already in repository {record['name']}") \
                from None
        return elements.render(created)

    def authorize_upload(self, call, record):
        from .upload_auth import decide  # noqa: PLC0415 - pure module, loaded on use
        # the raw WSGI strings (latin-1): Bottle's header view decodes UTF-8 and fails on
        # the bytes a hostile URI carries; check_path refuses anything non-ASCII anyway
        environ = call.request.environ
        method = environ.get("HTTP_X_ORIGINAL_METHOD", "")
        uri = environ.get("HTTP_X_ORIGINAL_URI", "")
        status, reason = decide(method.upper(), uri, call.principal, record["project_id"])
        if status == 200:
            return {"allowed": True}
        if status == 401:
            raise Unauthorized(reason)
        raise ApiError(reason, status)


class RepoElements(Resource):
    # a repository's elements go with it (Repositories.after_delete)
    part_of = ("repository",)

    def __init__(self):
        super().__init__(
            name="RepoElement", path="/v1/repo/elements", kind="repo_elements",
            service="repo", policy="element", project_scoped=True,
            shared_projects=(ADMIN_PROJECT,), unique=[("repository", "name", "version")],
            operations=("list", "get", "update", "delete"),
            description="an element version found in a repository; filter development=false "
                        "to hide development versions",
            fields=[
                Field("name", String(255), read_only=True),
                Field("version", String(255), read_only=True),
                Field("description", Text(65536), read_only=True),
                Field("project_id", UUID(), read_only=True),
                Field("repository", Reference("/v1/repo/repositories"), read_only=True),
                Field("status", Enum(*ELEMENT_STATUSES), read_only=True),
                Field("status_reason", String(4096), read_only=True),
                Field("installation_state", Enum("INSTALLED", "UNINSTALLED"), read_only=True),
                Field("manifest", Object(), read_only=True,
                      description="null until downloaded (lazy repositories)"),
                Field("specification", Object(), read_only=True),
                Field("inventory", Object(), read_only=True),
                Field("element", Reference("/v1/em/elements"), read_only=True,
                      description="the Element Manager element, once installed"),
                Field("development", Boolean(), read_only=True,
                      description="a pre-release or development version"),
                Field("tags", Tags(), description="the one field a PUT may change"),
            ],
            actions=[
                Action("install", self.install, summary="Install with its dependencies"),
                Action("uninstall", self.uninstall, summary="Uninstall (refused while "
                                                            "installed elements depend on it)"),
                Action("upgrade", self.upgrade, summary="Move the installation to target",
                       request_schema={"type": "object", "required": ["target"],
                                       "properties": {"target": {"type": "string"}}}),
                Action("edit", self.edit, max_body=UPLOAD,
                       summary="Replace the manifest (same name and version)",
                       request_schema={"type": "object", "required": ["manifest"],
                                       "properties": {"manifest": {"type": "object"}}}),
            ])

    @staticmethod
    def element_record(repository, entry, manifest, description=None, status="AVAILABLE"):
        """A RepoElement of `repository` from an inventory entry (manifest None: lazy)."""
        name, version = entry["name"], entry["version"]
        return {
            "name": name, "version": version,
            "description": description or (manifest or {}).get("description"),
            "project_id": repository["project_id"], "repository": repository["uuid"],
            "status": status, "status_reason": None, "installation_state": "UNINSTALLED",
            "manifest": manifest, "specification": None, "inventory": entry,
            "element": None, "development": not versions.parse(version).is_release}

    @staticmethod
    def artifact_rows(driver, records):
        """RepoArtifacts of stored elements: one per file of their inventory's index."""
        return [{"element": r["uuid"], "project_id": r["project_id"], "urn": urn,
                 "uri": driver.artifact_uri(r["name"], r["version"], urn.split(":", 1)[0],
                                            file_name)}
                for r in records for urn, file_name in inventory.artifacts(
                    r.get("inventory") or {})]

    def new_element(self, repository, entry, manifest, description=None, status="AVAILABLE"):
        """Insert a RepoElement and its artifacts (spec 2.4 rule 7)."""
        record = self.collection().insert(
            self.element_record(repository, entry, manifest, description, status))
        self.store_artifacts(repository, record)
        return record

    def store_artifacts(self, repository, record):
        driver = driver_for(self.api.resources["/v1/repo/repositories"].opened_spec(repository))
        rows = self.artifact_rows(driver, [record])
        if rows:
            artifacts = self.api.store.collection("repo_artifacts", unique=[("element", "urn")])
            artifacts.delete_where(lambda a: a["element"] == record["uuid"])
            artifacts.insert_many(rows)

    def repository(self, record):
        return self.api.store.collection("repo_repositories").get(record["repository"])

    def ensure_manifest(self, record):
        """A lazy element's full data, downloaded on first need (spec 2.4 rule 8)."""
        if record.get("manifest") is not None:
            return record
        repository = self.repository(record)
        spec = self.api.resources["/v1/repo/repositories"].opened_spec(repository)
        stored = self.collection().by("repository", repository["uuid"])
        reach = addresses.for_project(self.api.store, self.api.settings,
                                      repository["project_id"])
        manifest, entry = driver_for(spec, stored, reach).element(record["name"],
                                                                  record["version"])
        updated = self.collection().update(record["uuid"], {
            "manifest": manifest, "inventory": entry,
            "description": record.get("description") or manifest.get("description")})
        self.store_artifacts(repository, updated)
        return updated

    def get_handler(self, call):
        record = self.load_visible(call, call.params["uuid"])
        if record.get("manifest") is None:
            try:
                record = self.ensure_manifest(record)
            except DriverError as e:
                # what we have, and why the rest is missing: a GET does not fail because
                # the repository is unreachable right now
                record = {**record, "status_reason": f"manifest not downloaded: {e}"}
        return self.render(record, self.projection(call))

    def check_delete(self, call, record):
        if record["installation_state"] == "INSTALLED" or record.get("element"):
            raise Conflict(f"{record['name']} {record['version']} is installed; uninstall it "
                           "first")

    def after_delete(self, call, record):
        call.store.collection("repo_artifacts").delete_where(
            lambda a: a["element"] == record["uuid"])

    # ---- actions (appliance/repo/install.py does the work) ---------------------------

    def install(self, call, record):
        return self.render(install.install(self, call, record))

    def uninstall(self, call, record):
        return self.render(install.uninstall(self, call, record))

    def upgrade(self, call, record):
        body = call.body if isinstance(call.body, dict) else {}
        target = body.get("target")
        if not isinstance(target, str):
            raise BadRequest("target: required, the uuid or path of the target element")
        target_uuid = target.rstrip("/").rsplit("/", 1)[-1]
        target_record = self.load_visible(call, target_uuid)
        return self.render(install.upgrade(self, call, record, target_record))

    def edit(self, call, record):
        body = call.body if isinstance(call.body, dict) else {}
        manifest = body.get("manifest")
        if not isinstance(manifest, dict):
            raise BadRequest("manifest: required, an object")
        if manifest.get("name") != record["name"] or str(
                manifest.get("version")) != record["version"]:
            raise BadRequest(f"manifest: name and version must stay {record['name']} "
                             f"{record['version']}")
        return self.render(self.collection().update(record["uuid"], {"manifest": manifest}))


class Artifacts(Resource):
    # an element's artifacts go with it
    part_of = ("element",)

    """Read-only: the sync and the download of a lazy element write them (one per file of
    the element's inventory index), and they go with their element."""

    def __init__(self):
        super().__init__(
            name="RepoArtifact", path="/v1/repo/artifacts", kind="repo_artifacts",
            service="repo", policy="artifact", project_scoped=True,
            shared_projects=(ADMIN_PROJECT,), unique=[("element", "urn")],
            operations=("list", "get"),
            description="a file of a repo element (spec 2.5); filter element=<uuid>",
            fields=[
                Field("project_id", UUID(), read_only=True),
                Field("element", Reference("/v1/repo/elements"), read_only=True),
                Field("urn", String(2048), read_only=True,
                      description="<category>:<uuid>, the category one of artifacts, "
                                  "configs, images, manifests, templates"),
                Field("uri", String(2048), read_only=True,
                      description="where the repository serves the file"),
            ])


def all_resources():
    return [Repositories(), RepoElements(), Artifacts()]
