"""DBaaS (issue 16): PostgreSQL instances with their users and databases.

The API (`resources.py`), the SCRAM verifiers of user passwords (`scram.py`) and the version
seed (`versions.py`) are one part; the node driver, the producer, failover and the endpoint
are others (docs/sqldb.md).
"""
