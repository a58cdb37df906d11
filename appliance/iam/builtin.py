"""What first start creates: the admin project, built-in roles and their permissions,
the public default client."""

from appliance.capabilities import descriptors
from appliance.kinds import ADMIN_PROJECT  # noqa: F401 (the admin project, created here)

DEFAULT_CLIENT = "00000000-0000-0000-0000-000000000000"
DEFAULT_ORGANIZATION = "00000000-0000-0000-0000-000000000000"
ADMIN_USERNAME = "admin"

# services whose resources live in projects (each descriptor's project_permissions); the
# owner of a project gets all of them. Not the Element Manager's manifests and elements:
# they create resources in any project, so they stay with admins; project owners get em's
# project resources (services) only.
PROJECT_SERVICES = tuple(c.project_permissions for c in descriptors() if c.project_permissions)

ROLES = {
    "admin": ("everything, everywhere", ["*.*.*"]),
    "owner": ("every resource of the project it is bound to, uploads included",
              [f"{s}.*.*" for s in PROJECT_SERVICES] + ["em.service.*",
                                                        "repo.repository.upload",
                                                        # its project's audit entries
                                                        "audit.entry.read"]),
    "reader": ("reads every resource of the project it is bound to",
               [f"{s}.*.read" for s in PROJECT_SERVICES] + ["em.service.read"]),
    "newcomer": ("nothing until bound to a role that grants something", []),
}
