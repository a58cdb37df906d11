"""The API's name rules against real PostgreSQL: the boundary names it accepts are names
PostgreSQL takes (quoted, as the node writes them), and the reserved ones it refuses are
refused by PostgreSQL or belong to the platform."""

import pytest

from appliance.sqldb import resources

from .pgcluster import Cluster, available

pytestmark = pytest.mark.skipif(not available(), reason="needs root and postgresql-15")

ACCEPTED_USERS = ["u" * 63, "_u", "a$b", "Mixed_Case$1", "postgres1", "x_pg_",
                  "current_user"]
ACCEPTED_DATABASES = ["d" * 63, "_x", "A1_b", "postgres2"]


@pytest.fixture(scope="module")
def cluster():
    c = Cluster().start()
    yield c
    c.stop()


def quoted(name):
    return '"' + name.replace('"', '""') + '"'


@pytest.mark.parametrize("name", ACCEPTED_USERS)
def test_accepted_user_names_are_roles(cluster, name):
    resources.check_user_name(name)
    cluster.sql(f"CREATE ROLE {quoted(name)} LOGIN")
    assert cluster.sql(f"SELECT count(*) FROM pg_roles WHERE rolname = '{name}'") == "1"


@pytest.mark.parametrize("name", ACCEPTED_DATABASES)
def test_accepted_database_names_are_databases(cluster, name):
    cluster.sql(f"CREATE DATABASE {quoted(name)}")
    assert cluster.sql(f"SELECT count(*) FROM pg_database WHERE datname = '{name}'") == "1"


@pytest.mark.parametrize("name", resources.POSTGRES_RESERVED_ROLES)
def test_names_postgresql_reserves_are_refused_by_both(cluster, name):
    with pytest.raises(Exception):
        resources.check_user_name(name)
    with pytest.raises(AssertionError, match="reserved|syntax"):
        cluster.sql(f"CREATE ROLE {quoted(name)} LOGIN")


def test_a_64_character_name_would_be_truncated_by_postgresql(cluster):
    """Why 63 is the limit: PostgreSQL silently cuts a longer identifier (NAMEDATALEN)."""
    long = "v" * 64
    cluster.sql(f"CREATE ROLE {quoted(long)}")
    assert cluster.sql("SELECT max(length(rolname)) FROM pg_roles WHERE rolname LIKE 'vvv%'") \
        == "63"
