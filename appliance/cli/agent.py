"""`appliance agent enroll` and `appliance agent status`: local commands of a node's agent
(docs/agent.md). Enrollment needs no login: the single-use token an admin minted on the
node (`appliance action compute/nodes/<uuid> enroll`) is the authentication."""

from __future__ import annotations

import argparse
import json

from appliance.cli import CliError, UsageError, output
from appliance.cli.client import ApiError, normalize_endpoint
from appliance.cli.common import option, timeout

EPILOG_ENROLL = """\
Trades the token for the node's agent credential and writes it (mode 0600) to the
credential file, which the agent (daemons/agent.py) reads. With --root and --state-dir
the file also tells the agent where its files and its own state go (a HW "node" sharing
a host with others).

examples:
  appliance agent enroll --endpoint https://appliance.example:443 --token T
  appliance agent enroll --endpoint http://127.0.0.1:11010 --token T --root /srv/n1 \\
      --state-dir /srv/n1-state --credential-file /srv/n1-agent.json"""

EPILOG_STATUS = """\
What the agent has applied, from its state directory: the node, the last payload's
hash, the last contact with the API, and each item with its status."""


def add_commands(commands, common, make_parser):
    agent = commands.add_parser("agent", help="the node agent: enroll, status",
                                description="The node agent's local commands.",
                                parents=[common])
    sub = agent.add_subparsers(dest="agent_command", metavar="COMMAND", required=True,
                               parser_class=make_parser)
    enroll = sub.add_parser("enroll", help="enroll this node's agent with a token",
                            description="Enroll this node's agent.", epilog=EPILOG_ENROLL,
                            parents=[common],
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    enroll.add_argument("--token", required=True, help="the enrollment token")
    enroll.add_argument("--name", help="the agent's name (default agent-<node>)")
    enroll.add_argument("--root", metavar="DIR", help="prefix of every path the agent "
                                                      "writes (default /)")
    enroll.add_argument("--state-dir", metavar="DIR", help="the agent's own state")
    status = sub.add_parser("status", help="what the agent applied, and how it went",
                            description="Show the agent's view.", epilog=EPILOG_STATUS,
                            parents=[common],
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    for parser, handler in ((enroll, cmd_enroll), (status, cmd_status)):
        parser.add_argument("--credential-file", metavar="FILE",
                            help="default the setting agent_credential_file "
                                 "(APPLIANCE_AGENT_CREDENTIAL_FILE; /etc/appliance/agent.json)")
        parser.set_defaults(handler=handler)


def _settings(env):
    from appliance import config  # noqa: PLC0415 (local commands only)
    try:
        return config.load(environ=env.environ)
    except config.ConfigError as e:
        raise UsageError(str(e)) from None


def cmd_enroll(args, env):
    import os  # noqa: PLC0415
    from appliance.files import write_file  # noqa: PLC0415
    endpoint = option(args, "endpoint")
    if not endpoint:
        raise UsageError("--endpoint URL is required: the API as this node reaches it")
    endpoint = normalize_endpoint(endpoint)
    settings = _settings(env)
    path = args.credential_file or settings["agent_credential_file"]
    body = {"token": args.token, **({"name": args.name} if args.name else {})}
    resp = env.transport("POST", f"{endpoint}/v1/ua/enroll",
                         {"Content-Type": "application/json", "Accept": "application/json"},
                         json.dumps(body).encode(), timeout(args))
    try:
        data = json.loads(resp.body) if resp.body else {}
    except ValueError:
        data = {}
    if resp.status != 200:
        raise ApiError(resp.status, data.get("type"), data.get("message") or
                       f"enrollment refused ({resp.status})")
    cred = {"endpoint": endpoint, "agent": data["agent"], "node": data["node"],
            "secret": data["secret"]}
    for key, value in (("root", args.root), ("state_dir", args.state_dir)):
        if value:
            cred[key] = os.path.abspath(value)
    try:
        full = os.path.abspath(path)
        write_file(full, json.dumps(cred, indent=1) + "\n", 0o600,
                   private=(os.path.dirname(full), None, 0o700))
    except OSError as e:
        raise CliError(f"cannot write the credential file {path}: {e.strerror}") from None
    shown = {"agent": cred["agent"], "node": cred["node"], "credential_file": path}
    if option(args, "json"):
        output.write_json(env.stdout, shown)
    else:
        env.stdout.write(f"enrolled agent {cred['agent']} of node {cred['node']}; "
                         f"credential written to {path}\n")
    return 0


def cmd_status(args, env):
    import datetime  # noqa: PLC0415
    from appliance.agent.credential_file import (CredentialError, layout,  # noqa: PLC0415
                                                 read_credential)
    from appliance.agent.runner import read_state  # noqa: PLC0415
    settings = _settings(env)
    path = args.credential_file or settings["agent_credential_file"]
    try:
        cred = read_credential(path)
    except CredentialError as e:
        raise CliError(str(e)) from None
    root, state_dir, _ = layout(settings, cred)
    try:
        state = read_state(state_dir) or {}
    except (OSError, ValueError) as e:
        raise CliError(f"cannot read the agent's state in {state_dir}: {e}") from None
    items = [{"uuid": u, "kind": e["item"]["kind"], "master": e["item"]["master"],
              "hash": e["item"]["hash"], "status": e["actual"].get("status"),
              "reason": e["actual"].get("reason")}
             for u, e in sorted(state.get("items", {}).items())]
    contact = state.get("contact")
    view = {"agent": cred["agent"], "node": cred["node"], "endpoint": cred["endpoint"],
            "root": root, "state_dir": state_dir, "payload_hash": state.get("hash"),
            "last_contact": datetime.datetime.fromtimestamp(
                contact, datetime.timezone.utc).isoformat() if contact else None,
            "items": items}
    if option(args, "json"):
        output.write_json(env.stdout, view)
        return 0
    for key in ("agent", "node", "endpoint", "root", "state_dir", "payload_hash",
                "last_contact"):
        env.stdout.write(f"{key}: {view[key] if view[key] is not None else '-'}\n")
    env.stdout.write(f"items: {len(items)}\n")
    for item in items:
        env.stdout.write(f"  {item['kind']:<10} {item['master']} {item['status']}"
                         f"{': ' + item['reason'] if item['reason'] else ''}\n")
    return 0
