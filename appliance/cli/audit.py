"""`appliance audit list`: the audit trail, GET /v1/audit/ (docs/audit.md)."""

from __future__ import annotations

import argparse

from appliance.cli import ExitStatus
from appliance.cli.common import (DEFAULT_PAGE_SIZE, emit, fetch_listing, option, positive_int,
                                  resolve_uuid, session_client)

PATH = "/v1/audit/"
EPILOG = """\
Every state-changing request (who, from where, which resource, the answer's status) and
every login, successful or not. Admins read all of it; a project's owner reads its own
project's entries (log in with --project). Never a body: no value, no password.

examples:
  appliance audit list --since 2026-11-26T08:00:00Z
  appliance audit list --actor alice --kind secret_secrets
  appliance audit list --project demo --all --json"""


def add_commands(commands, common, make_parser):
    audit = commands.add_parser("audit", help="the audit trail: who changed what, when",
                                description="The audit trail.", parents=[common])
    sub = audit.add_subparsers(dest="audit_command", metavar="COMMAND", required=True,
                               parser_class=make_parser)
    listing = sub.add_parser("list", help="list audit entries, oldest first",
                             description="List audit entries, oldest first.", epilog=EPILOG,
                             parents=[common],
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    listing.add_argument("--actor", action="append", default=[], metavar="USER",
                         help="a user's or agent's name or UUID (a login: the username "
                              "tried); repeat for any of")
    # no -p: that option names the project a command writes in (with a default); this one
    # is a filter, with none
    listing.add_argument("--project", "--project-id", dest="project",
                         action="append", default=[], metavar="PROJECT",
                         help="only this project's entries: its name or UUID; repeat for "
                              "any of")
    listing.add_argument("--kind", action="append", default=[], metavar="KIND",
                         help="a store kind such as secret_secrets; repeat for any of")
    listing.add_argument("--since", metavar="TIME", help="from this RFC 3339 time on")
    listing.add_argument("--until", metavar="TIME", help="before this RFC 3339 time")
    listing.add_argument("--limit", metavar="N", type=positive_int, help="page size")
    listing.add_argument("--marker", metavar="UUID", help="start after this entry")
    listing.add_argument("--all", action="store_true",
                         help=f"walk every page (pages of --limit, default {DEFAULT_PAGE_SIZE})")
    listing.set_defaults(handler=cmd_list)


def row(entry: dict) -> dict:
    """An entry as a table row for people."""
    actor = entry.get("actor") or {}
    login = entry.get("login")
    who = actor.get("name") or actor.get("id") or actor.get("type")
    if login and not login.get("succeeded"):
        who = f"{login.get('username')} (login failed)"
    return {"created_at": entry.get("created_at"), "actor": who,
            "source": entry.get("source"), "method": entry.get("method"),
            "path": entry.get("path"), "status": entry.get("status"),
            "project_id": entry.get("project_id"), "request_id": entry.get("request_id")}


def cmd_list(args: argparse.Namespace, env) -> int:
    client = session_client(args, env)
    query: list[tuple[str, str]] = [("actor", a) for a in args.actor]
    query += [("project_id", resolve_uuid(client, "/v1/iam/projects/", p))
              for p in args.project]
    query += [("kind", k) for k in args.kind]
    query += [(name, value) for name, value in (("since", args.since), ("until", args.until))
              if value]
    items, next_marker = fetch_listing(client, PATH, query, args)
    emit(args, env, items if option(args, "json") else [row(e) for e in items], PATH)
    if next_marker:
        env.stderr.write(f"more entries follow: add --all, or --limit "
                         f"{args.limit or DEFAULT_PAGE_SIZE} --marker {next_marker}\n")
    return ExitStatus.SUCCESS
