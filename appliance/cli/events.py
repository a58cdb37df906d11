"""`appliance events [--follow]`: the appliance's lifecycle events (GET /v1/events,
docs/events.md), one readable line each, or one JSON object a line with --json.

--follow asks the API again and again with `follow=false&wait=...` (a long poll over the
same event stream) from the last revision it was told, through the ordinary client: so
the token refresh, the pinned certificate and the error handling are the same as every
other command's, a restart of the API costs nothing but a retry, and no event is missed.
"""

from __future__ import annotations

import argparse
import json

from appliance.cli.client import ApiError, Unreachable
from appliance.cli.common import (add_project_option, option, resolve_uuid, session_client,
                                  timeout)

EPILOG = """\
Each line: the time, what happened (created, updated, deleted, status_changed,
action_invoked), the resource and its name, the status change and its reason, who did it
(a user, a node's agent, or the platform's daemon) and the request id. You see the
events of what you may read, and only your project's with a project-scoped token.

Without --follow: the recent events, then exit. With --follow: then every new one until
Ctrl-C; if the API restarts, it carries on from the last event shown, missing none.

examples:
  appliance events
  appliance events --follow --kind compute_nodes --project demo
  appliance events --follow --json | jq -r 'select(.type=="status_changed") | .name'
  appliance events --since 2026-11-26T08:00:00Z

exit codes: 0 done (or Ctrl-C: 130), 1 refused (403, bad filter), 3 server error,
4 API unreachable (without --follow), 5 not logged in"""

EVENTS_PATH = "/v1/events"


def add_commands(commands, common, make_parser):
    events = commands.add_parser(
        "events", help="lifecycle events: what changed, who did it (--follow to keep on)",
        description="Print the appliance's lifecycle events.", epilog=EPILOG,
        parents=[common], formatter_class=argparse.RawDescriptionHelpFormatter)
    events.add_argument("-f", "--follow", action="store_true",
                        help="keep printing new events until Ctrl-C")
    events.add_argument("--kind", action="append", metavar="KIND", default=[],
                        help="only this store kind (repeatable), e.g. compute_nodes")
    add_project_option(events)
    events.add_argument("--uuid", metavar="UUID", help="only this resource's events")
    events.add_argument("--since", metavar="REVISION|TIME",
                        help="from after this revision (a number) or from this time "
                             "(RFC 3339); default: the recent ones")
    events.set_defaults(handler=cmd_events)


def parse_stream(text):
    """(events, the revision the stream ended at or None, resync notes)."""
    events, end, notes = [], None, []
    for block in text.split("\n\n"):
        fields = {}
        for line in block.split("\n"):
            if line.startswith(": end "):
                end = int(line[len(": end "):])
            elif line.startswith(":") or ":" not in line:
                continue
            else:
                name, _, value = line.partition(":")
                fields[name] = value[1:] if value.startswith(" ") else value
        if fields.get("event") == "lifecycle":
            events.append(json.loads(fields["data"]))
        elif fields.get("event") == "resync":
            notes.append(json.loads(fields["data"]))
            end = int(fields["id"])
    return events, end, notes


def line_of(event):
    actor = event.get("actor") or {}
    who = actor.get("type") or "?"
    if actor.get("name"):
        who += f" {actor['name']}"
    what = event.get("name") or event.get("uuid")
    parts = [event.get("timestamp", ""), f"{event.get('type', ''):<14}",
             f"{event.get('resource')} {what}"]
    if event.get("type") == "action_invoked":
        parts.append(f"action {event.get('action')}")
    if event.get("old_status") != event.get("status") and event.get("status"):
        change = f"{event.get('old_status') or '-'} -> {event['status']}"
        if event.get("status_reason"):
            change += f" ({event['status_reason']})"
        parts.append(change)
    parts.append(f"by {who}")
    if event.get("request_id"):
        parts.append(f"request {event['request_id']}")
    return "  ".join(parts)


def cmd_events(args, env):
    client = session_client(args, env)
    query = [("kind", k) for k in args.kind]
    if args.project:
        query.append(("project_id", resolve_uuid(client, "/v1/iam/projects", args.project)))
    if args.uuid:
        query.append(("uuid", args.uuid))
    since = args.since
    wait = max(1.0, min(20.0, timeout(args) - 5.0))
    while True:
        asked = [*query, ("follow", "false")]
        if since is not None:
            asked.append(("since", str(since)))
        if args.follow:
            asked.append(("wait", str(wait)))
        try:
            reply = client.request("GET", EVENTS_PATH, query=asked)
        except (Unreachable, ApiError) as error:
            if not args.follow or (isinstance(error, ApiError) and error.status < 500):
                raise
            env.stderr.write(f"warning: {error}; trying again\n")
            env.sleep(1.0)
            continue
        events, end, notes = parse_stream(reply.body.decode("utf-8", errors="replace"))
        for note in notes:
            env.stderr.write(f"warning: {note.get('message')}\n")
        for event in events:
            if option(args, "json"):
                env.stdout.write(json.dumps(event, separators=(",", ":")) + "\n")
            else:
                env.stdout.write(line_of(event) + "\n")
        env.stdout.flush()
        if end is not None:
            since = end
        elif events:
            since = events[-1]["revision"]
        if not args.follow:
            return 0

