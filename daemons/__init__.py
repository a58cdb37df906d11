"""Background daemons of the appliance, each a process of its own (`python -m daemons.<name>`).

DAEMONS is the one list of them: `appliance up` starts exactly these, and systemd/ has
one unit per entry. Kept free of imports so that reading the list costs nothing.

ON_DEMAND names the daemons that the appliance image starts only once they have work, and
the kinds whose records are that work (docs/on-demand-daemons.md): each has a systemd path
unit that starts it at the first write to one of those kinds, and first boot starts it at
boot when one of them holds a record. Once started, a daemon runs until shutdown. The
other daemons (and `appliance up`, which starts every daemon) run from the start.
"""

DAEMONS = ["builder", "mirror", "delivery", "compute", "dns", "agent", "backup", "certificates",
           "sqldb"]

ON_DEMAND = {
    "builder": ("repo_repositories", "repo_elements", "repo_artifacts", "em_manifests",
                "em_elements"),
    # the secret kinds it delivers, and the masters of what node agents apply
    # (appliance.secret.delivery, appliance.agent.capabilities.MASTERS)
    "delivery": ("secret_secrets", "secret_passwords", "secret_ssh_keys", "secret_rsa_keys",
                 "config_configs", "em_services", "network_lb"),
    # a domain is work only with sync_to_ecosystem (appliance/firstboot/ondemand.py)
    "mirror": ("dns_domains",),
    "certificates": ("secret_certificates",),
    "sqldb": ("sqldb_instances",),
}


def module_of(name):
    """The module that `python -m` runs for a daemon of DAEMONS."""
    return f"daemons.{name}"
