"""Configs: files delivered to nodes by the node agent (docs/configs.md)."""

from appliance.capability import Capability, Target
from appliance.kinds import (SECRET_PASSWORDS, SECRET_RSA_KEYS, SECRET_SECRETS, SECRET_SSH_KEYS,
                             VS_PROFILES, VS_VALUES, VS_VARIABLES)

CAPABILITY = Capability(
    name="configs",
    resources="appliance.configs.resources",
    register="appliance.configs:register",
    project_permissions="config",
    targets=(Target("config", producer="appliance.configs.targets:for_node",
                    driver="appliance.configs.node:Driver", master="config_configs",
                    # what a config's content links to (targets.py)
                    reads=(SECRET_SECRETS, SECRET_PASSWORDS, SECRET_SSH_KEYS,
                           SECRET_RSA_KEYS, VS_VALUES, VS_VARIABLES, VS_PROFILES)),),
)


def register(api):
    # Imported here: the agent imports this package's node side without the API.
    from .resources import all_resources
    for resource in all_resources():
        resource.register(api)
