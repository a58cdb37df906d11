"""Nobody may lock the realm out: a change that would leave no user able to act with `*.*.*`
globally is refused with 409.

A user holds it when it is ACTIVE, has a password (else it cannot get a token) and has a
global role binding to a role bound to the permission named `*.*.*`. Every change that can
take that away goes through `guarded` and `check`: deleting a user, a role, a permission,
a permission binding or a role binding (the deletes cascade), and a user's update (disabled,
or its password removed). The names and links of permissions and bindings cannot change
after create, so their updates cannot take it away.

The built-in login client (`default`, all zeros) stays public: every password login
names it and sends no client secret, so a secret set on it would refuse every login (401
invalid_client), survive a restart, and only the secret's holder could undo it. Setting
one is refused with 409 (its name and description may change); first start makes it
public again should a state hold one from before this rule.

Two admins deleting each other's binding at once must not both pass: the check and the
change are made under one cross-process lock (taken before any kind's lock).
"""

from appliance.api.errors import Conflict

EVERYTHING = "*.*.*"
LOCK = "iam-global-admins"


def guarded(store):
    """The lock inside which a change is checked and made."""
    return store.named_lock(LOCK)


def holders(store, removed=(), changed_users=None):
    """UUIDs of the users who would hold `*.*.*` globally once the records whose UUIDs are
    in `removed` are gone (with their cascades) and the users in `changed_users`
    ({uuid: user record as it would be}) are changed."""
    removed = set(removed)
    changed_users = changed_users or {}
    coll = store.collection
    permissions = {p["uuid"] for p in coll("iam_permissions").by("name", EVERYTHING)
                   if p["uuid"] not in removed}
    roles = {b["role"] for b in coll("iam_permission_bindings").records()
             if b["permission"] in permissions and b["uuid"] not in removed
             and b["role"] not in removed}
    users = coll("iam_users")
    found = set()
    for binding in coll("iam_role_bindings").records():
        if binding.get("project") is not None or binding["role"] not in roles \
                or binding["uuid"] in removed or binding["user"] in removed:
            continue
        user = changed_users.get(binding["user"]) or users.get(binding["user"])
        if user is not None and user.get("status") == "ACTIVE" and user.get("password_hash"):
            found.add(user["uuid"])
    return found


def builtin_client_secret_refused():
    """The message of the 409 that keeps the built-in client public."""
    return ("the built-in client default (00000000-0000-0000-0000-000000000000) stays "
            "public: every password login uses it without a secret, so a secret on it "
            "would refuse every login; create another client for a confidential one")


def check(store, change, removed=(), changed_users=None):
    """409 when `change` (said in the message) would leave nobody holding `*.*.*`."""
    if not holders(store, removed, changed_users):
        raise Conflict(f"{change} would leave no active user with a password holding "
                       f"{EVERYTHING} globally, and nobody could administer the realm; "
                       "bind another user to a role that grants it first")


class Guarded:
    """A mixin of the IAM resources whose changes can take `*.*.*` away: updates and
    deletes run inside the guard, where the hooks call `check`."""

    def update_record(self, call, uuid, body):
        with guarded(call.store):
            return super().update_record(call, uuid, body)

    def delete_record(self, call, uuid):
        with guarded(call.store):
            return super().delete_record(call, uuid)

