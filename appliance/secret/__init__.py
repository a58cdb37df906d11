"""Secrets: opaque secrets, passwords, SSH and RSA keys."""

from appliance.capability import Capability, Daemon, Target

CAPABILITY = Capability(
    name="secret",
    resources="appliance.secret.resources",
    register="appliance.secret:register",
    project_permissions="secret",
    targets=(Target("ssh_key", producer="appliance.secret.ssh_targets:for_node",
                    driver="appliance.secret.node:Driver", master="secret_ssh_keys"),),
    daemons=(
        # the secret kinds it delivers to the data plane (appliance.secret.delivery)
        Daemon("delivery", on_demand=("secret_secrets", "secret_passwords", "secret_ssh_keys",
                                      "secret_rsa_keys")),
        Daemon("certificates", on_demand=("secret_certificates",)),
    ),
)


def register(api):
    # Imported here: the daemons import this package's other modules without the API.
    from .resources import all_resources
    for resource in all_resources():
        resource.register(api)
