import uuid

from tests.compute.conftest import N, S, created, node_body
from tests.iam.helpers import ADMIN_PROJECT

C = "/v1/config/configs"
PW = "/v1/secret/passwords"


def hw_node(client, project=ADMIN_PROJECT, **fields):
    return created(client.post(N, node_body(project_id=project, node_type="HW",
                                            disk_spec=None, **fields)))


def node_set(client, project=ADMIN_PROJECT):
    return created(client.post(S, {"name": f"s-{uuid.uuid4().hex[:8]}",
                                   "project_id": project, "cores": 1, "ram": 1024,
                                   "replicas": 0, "disk_spec": node_body()["disk_spec"]}))


def password(client, project=ADMIN_PROJECT, **fields):
    return created(client.post(PW, {"name": f"p-{uuid.uuid4().hex[:8]}",
                                    "project_id": project, **fields}))


def config_body(target_node, project=ADMIN_PROJECT, **fields):
    return {"name": f"c-{uuid.uuid4().hex[:8]}", "project_id": project,
            "path": f"/etc/app/{uuid.uuid4().hex[:8]}.conf",
            "target": {"kind": "node", "node": target_node},
            "body": {"kind": "text", "content": "hello\n"}, **fields}


def pw_link(pw_uuid, field="value"):
    return f"$core.secret.passwords.${pw_uuid}:{field}"
