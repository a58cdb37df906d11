import glob
import os

import pytest

from appliance.api.audit import SEGMENT


def trail_files(state_dir):
    """The raw segment files of a state directory's audit trail."""
    return sorted(p for p in glob.glob(os.path.join(state_dir, "audit-*"))
                  if SEGMENT.match(os.path.basename(p)))


def trail_bytes(state_dir):
    data = b""
    for path in trail_files(state_dir):
        with open(path, "rb") as f:
            data += f.read()
    return data


def entries(client, **query):
    """Every entry the client may read (the whole list, no paging)."""
    resp = client.get("/v1/audit/", query=query or None)
    assert resp.status == 200, resp
    return resp.json


@pytest.fixture(scope="module")
def admin(server):
    return server.client(server.login("admin", "admin-password-for-tests"))
