"""What first start creates: the admin project, built-in roles and their permissions,
the public default client."""

ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"
DEFAULT_CLIENT = "00000000-0000-0000-0000-000000000000"
DEFAULT_ORGANIZATION = "00000000-0000-0000-0000-000000000000"
ADMIN_USERNAME = "admin"

# services whose resources live in projects; the owner of a project gets all of them
PROJECT_SERVICES = ("secret", "repo", "em", "vs", "dns", "compute", "network", "config",
                    "sqldb")
SELF_SERVICE = ("iam.client.introspect", "iam.client.logout")

ROLES = {
    "admin": ("everything, everywhere", ["*.*.*"]),
    "owner": ("every resource of the project it is bound to, uploads included",
              [f"{s}.*.*" for s in PROJECT_SERVICES] + ["repo.repository.upload",
                                                        *SELF_SERVICE]),
    "reader": ("reads every resource of the project it is bound to",
               [f"{s}.*.read" for s in PROJECT_SERVICES] + list(SELF_SERVICE)),
    "newcomer": ("nothing until bound to a role that grants something", []),
}
