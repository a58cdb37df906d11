"""A supervised child that starts nginx exactly as the LB node driver does on a host
without systemd (appliance.lb.node.Driver: `nginx -c ... -p ...`, which daemonizes into a
session of its own), writes where it listens to $LB_CHILD_BASE/nginx.json, then idles as
the agent would. Run by test_supervisor's stop test, in a supervisor of its own."""

import json
import os
import pathlib
import time
import types

from tests.lb.nginxnode import Node, one_route


def main():
    base = pathlib.Path(os.environ["LB_CHILD_BASE"])
    node = Node(base)
    # nginx listens whether or not the pool's endpoint answers: no backend needed
    value, port, _pool = one_route(node, types.SimpleNamespace(port=9))
    result = node.apply(value)
    if result["status"] != "ACTIVE":
        raise SystemExit(f"the LB did not apply: {result}")
    tmp = base / "nginx.json.tmp"
    tmp.write_text(json.dumps({"pid": node.driver.pid(), "address": node.address,
                               "port": port}))
    tmp.rename(base / "nginx.json")
    while True:
        time.sleep(1)
