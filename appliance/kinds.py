"""The words every package shares: the store's kind names, ids (their pattern, and the id
of a record's item on a node), the admin project.

A kind name is a file in the state directory: a typo in one package reads an empty
collection without an error, so a kind that one package names for another's records is
named here once. A package keeps the literal for its own kinds in its own modules (its
resource declarations say `kind="compute_nodes"`); everything outside it imports the name
from here (docs/architecture.md, "Shared words"). This module imports nothing of the
appliance: every floor may import it.
"""

import re
import uuid as uuidlib

# the admin project: its records are the platform's (appliance/tenancy/__init__.py)
ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"

# a uuid as the API accepts it (any case), bare for embedding in a larger pattern
UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
# the declared form (JSON Schema, published in the OpenAPI document)
UUID_PATTERN = rf"^{UUID}$"
# a uuid as stored (lower case, which the API writes): for input that never passed the API
STORED_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")

# uuid5 namespace of target resources (fixed: the same node, kind and master give the same
# uuid on every server and after every restart)
NODE_NS = uuidlib.UUID("0b6f0c52-6a43-5c4e-9d0e-3f2a8f4c1d77")


def target_uuid(node_uuid, kind, master_uuid):
    """The id of what `master_uuid` (a config, a service, ...) becomes on one node: the
    producers name their items with it, the agent its actual resources
    (appliance/agent/protocol.py)."""
    return str(uuidlib.uuid5(NODE_NS, f"{node_uuid}/{kind}/{master_uuid}"))

# ---- store kinds named across packages (each owned by the package in its prefix) -------

COMPUTE_NODES = "compute_nodes"
COMPUTE_SETS = "compute_sets"
COMPUTE_HYPERVISORS = "compute_hypervisors"
COMPUTE_VOLUMES = "compute_volumes"

NETWORK_NETWORKS = "network_networks"
NETWORK_PORTS = "network_ports"
NETWORK_LB = "network_lb"

CONFIG_CONFIGS = "config_configs"

DNS_DOMAINS = "dns_domains"
DNS_RECORDS = "dns_records"

EM_ELEMENTS = "em_elements"
EM_MANIFESTS = "em_manifests"

IAM_PROJECTS = "iam_projects"
IAM_ROLES = "iam_roles"
IAM_ROLE_BINDINGS = "iam_role_bindings"
IAM_REVOKED_SESSIONS = "iam_revoked_sessions"

# the service capability's (appliance/service/), under the Element Manager's prefix
EM_SERVICES = "em_services"
EM_SERVICE_LEASES = "em_service_leases"

SECRET_CERTIFICATES = "secret_certificates"
SECRET_SECRETS = "secret_secrets"
SECRET_PASSWORDS = "secret_passwords"
SECRET_SSH_KEYS = "secret_ssh_keys"
SECRET_RSA_KEYS = "secret_rsa_keys"

REPO_ARTIFACTS = "repo_artifacts"
REPO_ELEMENTS = "repo_elements"
REPO_REPOSITORIES = "repo_repositories"

SQLDB_INSTANCES = "sqldb_instances"
SQLDB_USERS = "sqldb_users"
SQLDB_DATABASES = "sqldb_databases"
SQLDB_VERSIONS = "sqldb_versions"

UA_AGENTS = "ua_agents"
UA_RESOURCES = "ua_resources"

VS_VARIABLES = "vs_variables"
VS_VALUES = "vs_values"
VS_PROFILES = "vs_profiles"
