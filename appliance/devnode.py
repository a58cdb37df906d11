"""The development node of `appliance up` (`make run`): a node of the appliance's own on a
workstation, so that load balancers, configs, services and DBaaS have somewhere to run
without a hand-made node record, enrollment and agent (docs/dev-node.md).

It is what first boot makes in the image (appliance/firstboot/register.py): an admin
project HW node and its agent named "appliance", which appliance/tenancy/nodes.py
appliance_node() finds, so the same tenant rules hold (only the platform targets it).
What differs is where it lives:

- the agent's "/" is ROOT (<state>/node): every file a driver writes (configs, the LB's
  nginx, PostgreSQL's data) lands under it, never in the workstation's /etc or /var;
- the node's address is 127.0.0.1, so DBaaS endpoints and LB node endpoints resolve,
  and its LB nginx listens on 127.0.0.1 only (agent_lb_listen); DBaaS instances take
  clients from loopback (sqldb_client_networks, unless set);
- with a root prefix and no systemd the LB and DBaaS drivers run nginx and PostgreSQL
  themselves, as the host tests do: nginx as the user who ran `make run`, PostgreSQL as
  the OS user postgres when that user is root (PostgreSQL refuses root);
- services need systemd as PID 1: they go ERROR saying so (appliance/service/node.py).

The image never runs `appliance up` (systemd units run each process), so none of this
reaches it. Off with `dev_node: false` (APPLIANCE_DEV_NODE=0).
"""

import json
import logging
import os

from appliance.kinds import COMPUTE_NODES

log = logging.getLogger("appliance.devnode")

NAME = "dev-node"
ROOT = "node"                       # <state>/node: the node's "/"
AGENT_STATE = "node-agent"          # <state>/node-agent: the agent's own state
CREDENTIAL = "node-agent.json"      # <state>/node-agent.json (0600)
ADDRESS = "127.0.0.1"
CLIENTS = "127.0.0.0/8"
DESCRIPTION = "the development node of `appliance up` (docs/dev-node.md)"


def enabled(settings):
    return bool(settings.get("dev_node"))


def paths(settings):
    """(root prefix, agent state dir, credential file) of the development node."""
    state = settings["state_dir"]
    return (os.path.join(state, ROOT), os.path.join(state, AGENT_STATE),
            os.path.join(state, CREDENTIAL))


def child_settings(settings):
    """`settings` with what the children need for the development node: the agent's
    credential file, its LBs listening on loopback only, and DBaaS clients allowed from
    loopback (where a workstation's clients are; unless sqldb_client_networks is set).
    Every child gets these (they are one environment)."""
    _, _, credential = paths(settings)
    out = dict(settings, agent_credential_file=credential)
    if not str(out.get("agent_lb_listen") or "").strip():
        out["agent_lb_listen"] = ADDRESS
    if not str(out.get("sqldb_client_networks") or "").strip():
        out["sqldb_client_networks"] = CLIENTS
    return out


def network():
    """The node's default_network: loopback, set by the platform (no IPAM serves a HW
    node; the operator would set a real machine's address)."""
    return {"network": None, "subnet": None, "port": None, "ipv4": ADDRESS, "mask": 8,
            "mac": None, "gateway": None, "dns": None}


def register(store, settings, cores=None, ram=None):
    """The node record and its agent's credential file (idempotent: a second start
    finds both). Returns the node record."""
    from appliance.files import write_file  # noqa: PLC0415
    from appliance.firstboot.register import (  # noqa: PLC0415
        enroll_self, local_endpoint, memory_mb, register_self)
    root, agent_state, credential = paths(settings)
    node, made = register_self(store, NAME, network(), cores or os.cpu_count() or 1,
                               ram or memory_mb())
    if node.get("description") != DESCRIPTION:
        node = store.collection(COMPUTE_NODES).update(node["uuid"],
                                                        {"description": DESCRIPTION})
    os.makedirs(root, exist_ok=True)
    os.makedirs(agent_state, mode=0o700, exist_ok=True)
    # the OS user postgres (DBaaS as root) reaches its data directory through the state
    # directory (made 0700) and the root prefix: traversable, not listable, as the
    # image's state directory is (appliance/firstboot hand_over); the prefix as / is
    state = settings["state_dir"]
    os.chmod(state, os.stat(state).st_mode & 0o7777 | 0o111)
    os.chmod(root, 0o755)
    enroll_self(store, node, settings, credential)
    # the file as first boot writes it, plus where this node lives; the endpoint follows
    # api_host/api_port of this start (the credential itself is kept)
    with open(credential) as f:
        cred = json.load(f)
    wanted = dict(cred, endpoint=local_endpoint(settings), root=root, state_dir=agent_state)
    if wanted != cred:
        write_file(os.path.abspath(credential), json.dumps(wanted, indent=1) + "\n", 0o600)
    log.info("development node %s %s (root %s)", node["uuid"],
             "registered" if made else "found", root)
    return node


def register_in_child(settings):
    """register() in a forked child, as bootstrap runs (appliance/supervisor.py): the
    supervisor keeps no store open. True when it worked; a failure is logged and the
    appliance runs on without the node."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            from state import Store  # noqa: PLC0415
            store = Store(settings["state_dir"])
            try:
                register(store, settings)
                code = 0
            finally:
                store.close()
        except BaseException:
            log.exception("cannot register the development node")
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def credential(settings):
    """The credential file's content, or None (a test's look at the node's uuid)."""
    try:
        with open(paths(settings)[2]) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
