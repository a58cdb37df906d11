"""DBaaS (issue 16): PostgreSQL instances with their users and databases.

The API (`resources.py`), the SCRAM verifiers of user passwords (`scram.py`) and the version
seed (`versions.py`) are one part; the node driver, the producer, failover and the endpoint
are others (docs/sqldb.md).
"""

from appliance.capability import Capability, Daemon, NodeSets, Target

CAPABILITY = Capability(
    name="sqldb",
    resources="appliance.sqldb.resources",
    register="appliance.sqldb.resources:register",
    project_permissions="sqldb",
    # PostgreSQL's: the DBaaS data of an instance placed on the appliance's own node
    # (the agent's sqldb driver, appliance/sqldb/pg.py)
    state_dir_owner="postgres",
    # no master: an instance's status is the capability's own (appliance/sqldb/status.py,
    # written by its daemon)
    targets=(Target("sqldb", producer="appliance.sqldb.targets:for_node",
                    driver="appliance.sqldb.node:Driver"),),
    daemons=(Daemon("sqldb", on_demand=("sqldb_instances",)),),
    seed="appliance.sqldb.versions:seed",
    settings={
        # the longest pg_basebackup or pg_rewind of a DBaaS member may take, in seconds
        # (docs/sqldb-dataplane.md): the agent's other work waits for it meanwhile
        "agent_sqldb_basebackup_seconds": 900,
        # DBaaS (docs/sqldb.md): the node image of the seeded PostgreSQL version ("": the node
        # image's own PostgreSQL)
        "sqldb_image": "",
        # DBaaS data plane (docs/sqldb-failover.md): PostgreSQL's port on every member; how
        # long a primary's report may be stale (or say "not running") before a replica is
        # promoted (3 s when its replicas lost it too: "Detection" there); the DNS zone of the instances' endpoints; CIDRs (comma-separated)
        # allowed as clients besides the project's networks
        "sqldb_port": 5432,
        "sqldb_failover_seconds": 10.0,
        "sqldb_zone": "sqldb.appliance.internal",
        "sqldb_client_networks": "",
    },
    # the node sets of DBaaS instances (appliance/sqldb/sets.py)
    node_sets=(NodeSets("appliance.sqldb.sets:reconcile_sqldb_sets",
                        watches=("sqldb_instances", "sqldb_versions")),),
    # `$dbaas.…` in a manifest
    builtin_element="appliance.sqldb.element",
)
