"""First start of IAM: admin project, built-in roles and permissions, admin user, default
client. Idempotent: run at every start, it adds only what is missing, and it never resets
the admin password of an existing admin user."""

from state import DuplicateKey, Store

from . import builtin, passwords


def _ensure(coll, record, **key):
    existing = coll.find_one(**key)
    if existing is not None:
        return existing
    try:
        return coll.insert(record)
    except DuplicateKey:        # another process seeded it in between
        return coll.find_one(**key)


def _ensure_all(coll, records, key):
    """_ensure of many records in one write (a first start writes dozens: one fdatasync
    each was most of a fresh state's seeding), falling back to one by one when another
    process seeded some in between."""
    def key_of(record):
        return {field: record[field] for field in key}
    missing = [r for r in records if coll.find_one(**key_of(r)) is None]
    if missing:
        try:
            coll.insert_many(missing)
        except DuplicateKey:
            pass
    return [_ensure(coll, r, **key_of(r)) for r in records]


def seed(store: Store, admin_password):
    orgs = store.collection("iam_organizations", unique=[("name",)])
    _ensure(orgs, {"uuid": builtin.DEFAULT_ORGANIZATION, "name": "default",
                   "description": "built-in organization", "tags": []},
            uuid=builtin.DEFAULT_ORGANIZATION)
    projects = store.collection("iam_projects", unique=[("name", "organization")])
    _ensure(projects, {"uuid": builtin.ADMIN_PROJECT, "name": "admin",
                       "description": "the realm's own project: shared repositories live here",
                       "organization": builtin.DEFAULT_ORGANIZATION, "status": "ACTIVE",
                       "tags": []}, uuid=builtin.ADMIN_PROJECT)
    clients = store.collection("iam_clients", unique=[("name",)])
    client = _ensure(clients, {"uuid": builtin.DEFAULT_CLIENT, "name": "default",
                               "description": "public client of the CLI and the API",
                               "secret_hash": None, "public": True},
                     uuid=builtin.DEFAULT_CLIENT)
    if client.get("secret_hash") or not client.get("public"):
        # a state from before the rule that keeps it public (lockout.py): else no
        # password login would pass
        clients.update(builtin.DEFAULT_CLIENT, {"secret_hash": None, "public": True})
    roles = store.collection("iam_roles", unique=[("name",)])
    perms = store.collection("iam_permissions", unique=[("name",)])
    pbindings = store.collection("iam_permission_bindings", unique=[("role", "permission")])
    role_ids = {}
    for name, (description, _) in builtin.ROLES.items():
        role_ids[name] = _ensure(roles, {"name": name, "description": description,
                                         "builtin": True}, name=name)["uuid"]
    granted = {(name, perm) for name, (_, perms_of) in builtin.ROLES.items() for perm in perms_of}
    perm_ids = {p["name"]: p["uuid"] for p in _ensure_all(
        perms, [{"name": perm, "description": "built-in"}
                for perm in sorted({perm for _, perm in granted})], ("name",))}
    _ensure_all(pbindings, [{"role": role_ids[name], "permission": perm_ids[perm]}
                            for name, perm in sorted(granted)], ("role", "permission"))
    users = store.collection("iam_users", unique=[("username",)])
    admin = users.find_one(username=builtin.ADMIN_USERNAME)
    if admin is None:
        admin = _ensure(users, {
            "username": builtin.ADMIN_USERNAME,
            "password_hash": passwords.hash_password(admin_password),
            "first_name": None, "last_name": None, "email": None, "type": "user",
            "description": "built-in administrator", "status": "ACTIVE"},
            username=builtin.ADMIN_USERNAME)
    bindings = store.collection("iam_role_bindings", unique=[("user", "role", "project")])
    _ensure(bindings, {"user": admin["uuid"], "role": role_ids["admin"], "project": None},
            user=admin["uuid"], role=role_ids["admin"], project=None)
