"""Background daemons of the appliance, each a process of its own (`python -m daemons.<name>`).

DAEMONS is the one list of them: `appliance up` starts exactly these, and systemd/ has
one unit per entry. Kept free of imports so that reading the list costs nothing.
"""

DAEMONS = ["builder", "mirror", "delivery", "compute", "dns", "agent", "backup", "certificates",
           "sqldb"]


def module_of(name):
    """The module that `python -m` runs for a daemon of DAEMONS."""
    return f"daemons.{name}"
