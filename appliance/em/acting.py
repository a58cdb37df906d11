"""Who an element acts for: the platform, or the one project that installed it.

The builder writes an element's resources in someone's name, and every tenancy rule
(appliance/tenancy/) asks who that is. An element a project owner uploaded to its own
repository is that project's code: written as the platform, its `project_id: <admin>`
would land in the admin project, its config could target the appliance's own node, its
zone could cover another owner's names. So each manifest and element records the project
it acts for (`project_id`, read-only; null for the platform), and the builder writes for
a project with a principal scoped to it, holding a project owner's permissions: the
resource layer then applies to the element exactly what it applies to that owner.

Where the acting project comes from:
- a manifest posted to /v1/em/manifests acts for its caller: a platform caller (in-process,
  unscoped, or scoped to the admin project) -> the platform; a caller scoped to project P
  (a role granting `em.manifest.create`) -> P;
- the manifest the repo bridge makes of a repo element acts for the repo element's
  project (the admin project's catalogs -> the platform);
- an element acts for the manifest it was installed from; an upgrade keeps it, and is
  refused when the new manifest acts for another owner.

Records stored before the field existed (no `project_id` key at all) are worked out once
by migration 0002, and by `acting_project` on the fly for any record the migration did
not see: an element linked from a repo element acts for that repo element's project, a
manifest for the element installed from it or for the repo element of its name and
version; what has no such link was posted to the Element Manager directly, which only
administrators could do, so it acts for the platform.
"""

import uuid as uuidlib

from appliance.iam.builtin import ROLES
from appliance.iam.permissions import Principal
from appliance.kinds import REPO_ELEMENTS
from appliance.tenancy import is_platform, is_platform_project

SYSTEM = Principal({"uuid": "00000000-0000-0000-0000-000000000000", "username": "system"},
                   None, ["*.*.*"])

# an element of a project holds what the project's owner holds (the built-in role, not
# a copy an administrator may have widened): the resource layer checks the rest
ELEMENT_PERMISSIONS = tuple(ROLES["owner"][1])
_NAMESPACE = uuidlib.UUID("2b8f3c1e-7d4a-5b6c-8e9f-0a1b2c3d4e5f")


def for_caller(principal):
    """The acting project of what `principal` posts: None for a platform caller."""
    return None if is_platform(principal) else principal.project_id


def for_project(project_id):
    """The acting project of a record of `project_id`: the admin project's is the
    platform's."""
    return None if project_id is None or is_platform_project(project_id) else project_id


def principal_for(project_id):
    """The principal the builder writes with for an acting project."""
    if project_id is None:
        return SYSTEM
    # a user uuid of no real user: no "own user" rule can match it
    user = {"uuid": str(uuidlib.uuid5(_NAMESPACE, project_id)),
            "username": f"element of project {project_id}"}
    return Principal(user, project_id, ELEMENT_PERMISSIONS)


def _repo_project_of_element(store, element_uuid):
    for record in store.collection(REPO_ELEMENTS).by("element", element_uuid):
        return for_project(record.get("project_id"))
    return None


def acting_project(store, record, kind="em_elements"):
    """The acting project of an element (or, kind em_manifests, a manifest) record."""
    if "project_id" in record:
        return record["project_id"]
    if kind == "em_elements":
        return _repo_project_of_element(store, record["uuid"])
    for element in store.collection("em_elements").by("manifest", record["uuid"]):
        return acting_project(store, element)
    for repo in store.collection(REPO_ELEMENTS).by("name", record.get("name")):
        if repo.get("version") == record.get("version"):
            return for_project(repo.get("project_id"))
    return None
