"""IAM resources: users, organizations, projects, roles, permissions, the two kinds of
binding, and clients."""

from appliance.api.errors import BadRequest, Conflict, Forbidden, NotFound
from appliance.api.fields import Boolean, Enum, Field, Integer, Reference, String, Tags, Text
from appliance.api.resource import Action, Resource
from appliance.api.routing import AUTHENTICATED
from appliance.api.validation import Validator
from appliance.tenancy import is_platform, quotas

from . import builtin, cascade, lockout, passwords
from .permissions import NAME_PATTERN

PASSWORD = {"type": "string", "minLength": 8, "maxLength": 256}
CHANGE_PASSWORD = {"type": "object", "additionalProperties": False, "required": ["new_password"],
                   "properties": {"new_password": PASSWORD,
                                  "old_password": {"type": "string", "maxLength": 256,
                                                   "description": "required to change "
                                                                  "one's own password"}}}
USERNAME = r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$"
NAME = r"^[A-Za-z0-9][A-Za-z0-9_. -]{0,254}$"


def new_password(call, user, password):
    """The changes that set a password: its hash, and a new version, which ends every token
    issued before except those of the session that made the change, when it is the user's
    own (docs/iam.md)."""
    principal = call.principal
    own = principal is not None and principal.user_uuid == user["uuid"]
    return {"password_hash": passwords.hash_password(password) if password else None,
            "password_version": (user.get("password_version") or 0) + 1,
            "password_session": principal.claims.get("sid") if own else None}


def _require(api, kind, uuid, what):
    if uuid is not None and api.store.collection(kind).get(uuid) is None:
        raise BadRequest(f"{what} {uuid} does not exist")


class Users(lockout.Guarded, Resource):
    def __init__(self):
        super().__init__(
            name="User", path="/v1/iam/users", kind="iam_users", service="iam", policy="user",
            unique=[("username",)],
            fields=[
                Field("username", String(64, pattern=USERNAME), required=True, create_only=True),
                Field("password", String(PASSWORD["maxLength"], PASSWORD["minLength"]),
                      write_only=True,
                      description="write-only; stored as a scrypt hash"),
                Field("password_hash", String(512), hidden=True),
                Field("password_version", Integer(minimum=0), hidden=True),
                Field("password_session", String(64), hidden=True),
                Field("first_name", String(255)), Field("last_name", String(255)),
                Field("email", String(255, pattern=r"^[^@\s]+@[^@\s]+$")),
                Field("type", Enum("user", "service", "anon"), default="user",
                      nullable=False),
                Field("description", Text(4096)),
                Field("status", Enum("ACTIVE", "DISABLED"), default="ACTIVE",
                      nullable=False, description="a DISABLED user cannot get tokens"),
            ],
            actions=[Action("change_password", self.change_password,
                            permission=AUTHENTICATED, request_schema=CHANGE_PASSWORD,
                            response_schema={"$ref": "#/components/schemas/User"},
                            summary="Change a password: one's own with old_password, "
                                    "anyone's with iam.user.change_password")])
        self.change_password_validator = Validator(CHANGE_PASSWORD)

    def prepare_create(self, call, record):
        password = record.pop("password", None)
        record["password_hash"] = passwords.hash_password(password) if password else None
        return record

    def prepare_update(self, call, current, changes):
        if "password" in changes:
            changes.update(new_password(call, current, changes.pop("password")))
        if current["username"] == builtin.ADMIN_USERNAME and changes.get("status") == "DISABLED":
            raise Conflict("the built-in admin user cannot be disabled")
        if "status" in changes or "password_hash" in changes:
            lockout.check(call.store, f"this change of user {current['username']}",
                          changed_users={current["uuid"]: {**current, **changes}})
        return changes

    def change_password(self, call, record):
        own = record["uuid"] == call.principal.user_uuid
        # who may, before what was sent: a caller without the right learns nothing more
        if not own and not call.principal.allows(self.permission("change_password")):
            raise Forbidden(f"permission {self.permission('change_password')} is required "
                            "to change another user's password")
        body = self._body_object(call)
        self.change_password_validator.check(body)
        if own:
            # one's own: a stolen token alone must not be enough to take the account over
            if "old_password" not in body:
                raise BadRequest("old_password: required to change your own password")
            if not passwords.verify(body["old_password"], record.get("password_hash")):
                raise Forbidden("old_password: does not match the current password")
        updated = self.collection().update(record["uuid"],
                                           new_password(call, record, body["new_password"]))
        return self.render(updated)

    def check_delete(self, call, record):
        if record["username"] == builtin.ADMIN_USERNAME:
            raise Conflict("the built-in admin user cannot be deleted")
        lockout.check(call.store, f"deleting user {record['username']}", {record["uuid"]})

    def after_delete(self, call, record):
        call.store.collection("iam_role_bindings").delete_where(
            lambda b: b.get("user") == record["uuid"])


class Organizations(Resource):
    def __init__(self):
        super().__init__(
            name="Organization", path="/v1/iam/organizations", kind="iam_organizations",
            service="iam", policy="organization", unique=[("name",)],
            fields=[Field("name", String(255, pattern=NAME), required=True),
                    Field("description", Text(4096)), Field("tags", Tags())])

    def check_delete(self, call, record):
        if record["uuid"] == builtin.DEFAULT_ORGANIZATION:
            raise Conflict("the built-in organization cannot be deleted")


class Projects(Resource):
    def __init__(self):
        super().__init__(
            name="Project", path="/v1/iam/projects", kind="iam_projects", service="iam",
            policy="project", unique=[("name", "organization")],
            fields=[
                Field("name", String(255, pattern=NAME), required=True),
                Field("description", Text(4096)),
                Field("organization", Reference("/v1/iam/organizations"),
                      default=builtin.DEFAULT_ORGANIZATION, nullable=False),
                Field("status", Enum("ACTIVE"), read_only=True),
                Field("tags", Tags()),
            ],
            actions=[Action("quotas", self.quota_usage, method="GET", permission=AUTHENTICATED,
                            summary="The project's use and limit of each quota (platform "
                                    "callers: any project; a project's members: their own)",
                            response_schema=quotas.USAGE_SCHEMA)])

    def register(self, api):
        super().register(api)
        # a project's quotas hold every create and update of a kind they count, whichever
        # capability's resource (or the Element Manager's builder) writes it
        api.write_checks.append(quotas)

    def quota_usage(self, call, record):
        principal = call.principal
        if is_platform(principal):
            if principal is not None and not principal.allows("iam.project.read"):
                raise Forbidden("permission iam.project.read is required")
        elif getattr(principal, "project_id", None) != record["uuid"] or \
                not getattr(principal, "permissions", None):
            # another tenant's project: it is not there for this caller
            raise NotFound(f"Project {record['uuid']} not found")
        return quotas.usage(call.store, call.api.settings, record["uuid"])

    def prepare_create(self, call, record):
        _require(call.api, "iam_organizations", record["organization"], "organization")
        record["status"] = "ACTIVE"
        return record

    def prepare_update(self, call, current, changes):
        _require(call.api, "iam_organizations", changes.get("organization"), "organization")
        return changes

    def check_delete(self, call, record):
        if record["uuid"] == builtin.ADMIN_PROJECT:
            raise Conflict("the admin project cannot be deleted")

    def delete_record(self, call, uuid):
        # ?cascade=true: the project's records first (iam/cascade.py, docs/iam.md)
        query = getattr(call, "query", None)
        if query is not None and cascade.truthy(query.get("cascade", "")):
            record = self.load_visible(call, uuid)
            self.check_delete(call, record)
            cascade.delete_project(self, call, record)
        return super().delete_record(call, uuid)

    def after_delete(self, call, record):
        call.store.collection("iam_role_bindings").delete_where(
            lambda b: b.get("project") == record["uuid"])


class Roles(lockout.Guarded, Resource):
    def __init__(self):
        super().__init__(
            name="Role", path="/v1/iam/roles", kind="iam_roles", service="iam", policy="role",
            unique=[("name",)],
            fields=[Field("name", String(255, pattern=NAME), required=True),
                    Field("description", Text(4096)),
                    Field("builtin", Boolean(), read_only=True)])

    def prepare_create(self, call, record):
        record["builtin"] = False
        return record

    def prepare_update(self, call, current, changes):
        if current.get("builtin") and "name" in changes and changes["name"] != current["name"]:
            raise Conflict(f"built-in role {current['name']} cannot be renamed")
        return changes

    def check_delete(self, call, record):
        if record.get("builtin"):
            raise Conflict(f"built-in role {record['name']} cannot be deleted")
        lockout.check(call.store, f"deleting role {record['name']}", {record["uuid"]})

    def after_delete(self, call, record):
        for kind in ("iam_role_bindings", "iam_permission_bindings"):
            call.store.collection(kind).delete_where(lambda b: b.get("role") == record["uuid"])


class Permissions(lockout.Guarded, Resource):
    def __init__(self):
        super().__init__(
            name="Permission", path="/v1/iam/permissions", kind="iam_permissions",
            service="iam", policy="permission", unique=[("name",)],
            fields=[Field("name", String(255, pattern=NAME_PATTERN), required=True,
                          create_only=True,
                          description="<service>.<policy>.<action>; * matches a whole part"),
                    Field("description", Text(4096)), Field("tags", Tags())])

    def check_delete(self, call, record):
        lockout.check(call.store, f"deleting permission {record['name']}", {record["uuid"]})

    def after_delete(self, call, record):
        call.store.collection("iam_permission_bindings").delete_where(
            lambda b: b.get("permission") == record["uuid"])


class PermissionBindings(lockout.Guarded, Resource):
    # a binding is a part of its role and of its permission: it goes with either
    part_of = ("role", "permission")

    def __init__(self):
        super().__init__(
            name="PermissionBinding", path="/v1/iam/permission_bindings",
            kind="iam_permission_bindings", service="iam", policy="permission_binding",
            unique=[("role", "permission")],
            fields=[Field("role", Reference("/v1/iam/roles"), required=True, create_only=True),
                    Field("permission", Reference("/v1/iam/permissions"), required=True,
                          create_only=True)])

    def prepare_create(self, call, record):
        _require(call.api, "iam_roles", record["role"], "role")
        _require(call.api, "iam_permissions", record["permission"], "permission")
        return record

    def check_delete(self, call, record):
        lockout.check(call.store, "deleting this permission binding", {record["uuid"]})


class RoleBindings(lockout.Guarded, Resource):
    # a binding is a part of its user and of its role (it goes with either, as in
    # Keystone); a project's bindings are its members, and refuse the project's delete
    part_of = ("user", "role")

    def __init__(self):
        super().__init__(
            name="RoleBinding", path="/v1/iam/role_bindings", kind="iam_role_bindings",
            service="iam", policy="role_binding", unique=[("user", "role", "project")],
            fields=[Field("user", Reference("/v1/iam/users"), required=True, create_only=True),
                    Field("role", Reference("/v1/iam/roles"), required=True, create_only=True),
                    Field("project", Reference("/v1/iam/projects"), create_only=True,
                          description="absent or null: a global binding")])

    def prepare_create(self, call, record):
        _require(call.api, "iam_users", record["user"], "user")
        _require(call.api, "iam_roles", record["role"], "role")
        _require(call.api, "iam_projects", record.get("project"), "project")
        return record

    def check_delete(self, call, record):
        lockout.check(call.store, "deleting this role binding", {record["uuid"]})


class Clients(Resource):
    def __init__(self):
        super().__init__(
            name="Client", path="/v1/iam/clients", kind="iam_clients", service="iam",
            policy="client", unique=[("name",)],
            fields=[Field("name", String(255, pattern=NAME), required=True),
                    Field("description", Text(4096)),
                    Field("secret", String(256, min_length=16), write_only=True,
                          description="absent: a public client"),
                    Field("secret_hash", String(512), hidden=True),
                    Field("public", Boolean(), read_only=True)])

    def prepare_create(self, call, record):
        secret = record.pop("secret", None)
        record["secret_hash"] = passwords.hash_password(secret) if secret else None
        record["public"] = secret is None
        return record

    def prepare_update(self, call, current, changes):
        if current["uuid"] == builtin.DEFAULT_CLIENT and changes.get("secret"):
            # every password login names this client and sends no secret: one set here
            # would refuse them all, and only its holder could undo it (lockout.py)
            raise Conflict(lockout.builtin_client_secret_refused())
        if "secret" in changes:
            secret = changes.pop("secret")
            changes["secret_hash"] = passwords.hash_password(secret) if secret else None
            changes["public"] = secret is None
        return changes

    def check_delete(self, call, record):
        if record["uuid"] == builtin.DEFAULT_CLIENT:
            raise Conflict("the default client cannot be deleted")


def all_resources():
    return [Users(), Organizations(), Projects(), Roles(), Permissions(), PermissionBindings(),
            RoleBindings(), Clients()]
