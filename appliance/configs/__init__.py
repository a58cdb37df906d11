"""Configs: files delivered to nodes by the node agent (docs/configs.md)."""

from appliance.capability import Capability, Target

CAPABILITY = Capability(
    name="configs",
    resources="appliance.configs.resources",
    register="appliance.configs:register",
    project_permissions="config",
    targets=(Target("config", producer="appliance.configs.targets:for_node",
                    driver="appliance.configs.node:Driver", master="config_configs",
                    # what a config's content links to (targets.py)
                    reads=("secret_secrets", "secret_passwords", "secret_ssh_keys",
                           "secret_rsa_keys", "vs_values", "vs_variables", "vs_profiles")),),
)


def register(api):
    # Imported here: the agent imports this package's node side without the API.
    from .resources import all_resources
    for resource in all_resources():
        resource.register(api)
