"""`appliance repo ...` (repositories) and `appliance elements ...` (the marketplace).

Elements are named as NAME or NAME==VERSION, by install and upgrade alike. Without a
version, they pick what the resolver would: higher repository priority, then release over
development, then higher version. `--wait` follows the status until the work is done,
printing each move.
"""

import argparse
import os

from appliance.kinds import ADMIN_PROJECT
from appliance.versions import VersionError, parse

from . import CliError, UsageError
from .client import ApiError
from .common import add_wait_options, emit, session_client
from .em import read_manifest
from .wait import Watched, wait_for

REPOS = "/v1/repo/repositories/"
ELEMENTS = "/v1/repo/elements/"
EM_ELEMENTS = "/v1/em/elements/"


def find_repo(client, ref):
    found = client.request("GET", REPOS, query=[("name", ref)]).payload()
    if not found:
        try:
            return client.request("GET", REPOS + ref).payload()
        except CliError:
            raise CliError(f"no repository {ref!r}") from None
    return found[0]


def follow(client, env, obj, path, done, timeout, field="status"):
    """Wait (appliance/cli/wait.py) until `done`, printing each move of `field` and its
    reason under the record's name."""
    def lines(current):
        reason = current.get("status_reason")
        return [(field, f"{current.get(field)}: {reason}" if reason else f"{current.get(field)}")]
    return wait_for(client, env, Watched(path, label=obj.get("name", path), done=done,
                                         lines=lines, shown=lambda current: current.get(field)),
                    timeout)


def _rank(element, priorities):
    version = parse(element["version"])
    return (priorities.get(element["repository"].rsplit("/", 1)[1], 0), version.is_release,
            version)


def pick(client, ref, installed=None):
    """The element record named by NAME or NAME==VERSION."""
    name, _, version = ref.partition("==")
    query = [("name", name)] + ([("version", version)] if version else [])
    found = client.request("GET", ELEMENTS, query=query).payload()
    if installed is not None:
        found = [e for e in found if (e["installation_state"] == "INSTALLED") == installed]
    if not found:
        raise CliError(f"no element {ref}" + (" installed" if installed else ""))
    priorities = {r["uuid"]: r["priority"]
                  for r in client.request("GET", REPOS).payload()}
    return max(found, key=lambda e: _rank(e, priorities))


def add_groups(commands, common, make_parser):
    def group(name, summary, example):
        parser = commands.add_parser(name, help=summary, description=summary, parents=[common],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=f"example:\n  {example}")
        return parser.add_subparsers(dest="verb", metavar="VERB", required=True,
                                     parser_class=make_parser)

    def verb(verbs, name, summary, example, handler, wait=False):
        sub = verbs.add_parser(name, help=summary, description=summary, parents=[common],
                               formatter_class=argparse.RawDescriptionHelpFormatter,
                               epilog=f"example:\n  {example}")
        sub.set_defaults(handler=handler)
        if wait:
            add_wait_options(sub, "the Element Manager to finish")
        return sub

    repo = group("repo", "element repositories",
                 "appliance repo add examples --dir examples --wait")
    add = verb(repo, "add", "add a repository",
               "appliance repo add main --url http://10.0.0.5/repo --lazy --wait", cmd_add, True)
    add.add_argument("name", help="a name for the repository")
    source = add.add_mutually_exclusive_group(required=True)
    source.add_argument("--url", help="an HTTP(S) repository (driver nginx)")
    source.add_argument("--dir", help="a directory of manifests on the appliance's machine, read by the API "
                             "(driver bootstrap); a relative path is taken from here")
    source.add_argument("--database", action="store_true",
                        help="elements uploaded through the API (driver database)")
    add.add_argument("--username", help="basic-auth user for --url")
    add.add_argument("--password-env", metavar="VAR",
                     help="take the basic-auth password from this environment variable")
    add.add_argument("--lazy", action="store_true", help="store names and versions only")
    add.add_argument("--priority", type=int,
                     help="higher wins when several repositories offer an element (default 8192)")
    add.add_argument("--refresh-rate", type=int, metavar="SECONDS",
                     help="how often the inventory is re-read (default 3600)")
    add.add_argument("--project", metavar="UUID",
                     help="owning project (default: the token's project, else the admin "
                          "project, whose repositories every project sees)")
    verb(repo, "list", "list repositories", "appliance repo list", cmd_repo_list)
    refresh = verb(repo, "refresh", "re-read a repository's inventory now",
                   "appliance repo refresh main --wait", cmd_refresh, True)
    refresh.add_argument("name")
    upload = verb(repo, "upload", "upload a manifest to a database repository",
                  "appliance repo upload uploads app.yaml", cmd_upload)
    upload.add_argument("name")
    upload.add_argument("file")

    elements = group("elements", "the marketplace: elements of every visible repository",
                     "appliance elements available\n  appliance elements install hello==1.0.0 --wait")
    available = verb(elements, "available",
                     "latest version of each element, and the version installed (if any)",
                     "appliance elements available --dev", cmd_available)
    available.add_argument("--dev", action="store_true", help="include development versions")
    versions = verb(elements, "versions", "every version of an element",
                    "appliance elements versions app", cmd_versions)
    versions.add_argument("name")
    versions.add_argument("--dev", action="store_true")
    install = verb(elements, "install", "install an element with its dependencies",
                   "appliance elements install app==1.2.0 --wait", cmd_install, True)
    install.add_argument("element", metavar="NAME[==VERSION]")
    upgrade = verb(elements, "upgrade",
                   "move an installed element to another version (default: the one the "
                   "resolver prefers)",
                   "appliance elements upgrade app==1.3.0 --wait", cmd_upgrade, True)
    upgrade.add_argument("element", metavar="NAME[==VERSION]")
    # Only to explain the old two-word form instead of argparse's bare "unrecognized".
    upgrade.add_argument("old_version", nargs="?", help=argparse.SUPPRESS)
    uninstall = verb(elements, "uninstall", "uninstall an element",
                     "appliance elements uninstall app --wait", cmd_uninstall, True)
    uninstall.add_argument("name")


def cmd_add(args, env):
    if args.url:
        spec = {"kind": "nginx", "url": args.url}
        if args.username:
            spec["username"] = args.username
        if args.password_env:
            if args.password_env not in env.environ:
                raise UsageError(f"${args.password_env} is not set")
            spec["password"] = env.environ[args.password_env]
    elif args.dir:
        # The API reads the directory from its own working directory: send an absolute path.
        spec = {"kind": "bootstrap", "manifests_dir": os.path.abspath(args.dir)}
    else:
        spec = {"kind": "database"}
    body = {"name": args.name, "driver_spec": spec, "sync_mode": "lazy" if args.lazy else "copy"}
    for key, value in (("priority", args.priority), ("refresh_rate", args.refresh_rate),
                       ("project_id", args.project)):
        if value is not None:
            body[key] = value
    client = session_client(args, env)
    if "project_id" not in body and not (client.session.scope or "").startswith("project:"):
        body["project_id"] = ADMIN_PROJECT
    repo = client.request("POST", REPOS, body=body).payload()
    if args.wait:
        repo = follow(client, env, repo, REPOS + repo["uuid"],
                      lambda r: r["status"] == "ACTIVE",
                      args.wait_timeout)
    emit(args, env, repo)
    return 0


def cmd_repo_list(args, env):
    repos = session_client(args, env).request("GET", REPOS).payload()
    emit(args, env, repos if getattr(args, "json", False) else [
        {k: r.get(k) for k in ("uuid", "name", "status", "priority", "sync_mode",
                               "synced_at")} | {"driver": r["driver_spec"]["kind"]}
        for r in repos])
    return 0


def cmd_refresh(args, env):
    client = session_client(args, env)
    repo = find_repo(client, args.name)
    before = repo.get("synced_at")
    client.request("POST", f"{REPOS}{repo['uuid']}/actions/refresh/invoke", body={})
    if args.wait:
        repo = follow(client, env, repo, REPOS + repo["uuid"],
                      lambda r: r.get("synced_at") != before and r["status"] == "ACTIVE",
                      args.wait_timeout, field="synced_at")
    emit(args, env, repo)
    return 0


def cmd_upload(args, env):
    manifest = read_manifest(args.file)
    client = session_client(args, env)
    repo = find_repo(client, args.name)
    element = client.request("POST", f"{REPOS}{repo['uuid']}/actions/upload/invoke", body={
        "element_name": str(manifest["name"]), "element_version": str(manifest["version"]),
        "manifest": manifest, "description": manifest.get("description")}).payload()
    emit(args, env, element)
    return 0


def _rows(elements):
    return [{k: e.get(k) for k in ("name", "version", "status", "installation_state",
                                   "development", "uuid")} for e in elements]


def cmd_available(args, env):
    # Every version is read, development ones too: an installed version must show even
    # when it is not the newest, or is a development one that --dev would hide.
    client = session_client(args, env)
    elements = client.request("GET", ELEMENTS).payload()
    latest, installed = {}, installed_versions(client)
    for e in elements:
        if e["installation_state"] == "INSTALLED":
            installed.setdefault(e["name"], e["version"])
        try:
            key = parse(e["version"])
        except VersionError:
            continue
        if e.get("development") and not args.dev:
            continue
        if e["name"] not in latest or key > parse(latest[e["name"]]["version"]):
            latest[e["name"]] = e
    # `version` is the newest one offered; `installed`, the one installed (or null).
    emit(args, env, [{"uuid": latest.get(name, {}).get("uuid"), "name": name,
                      "version": latest.get(name, {}).get("version"),
                      "installed": installed.get(name),
                      "development": latest.get(name, {}).get("development")}
                     for name in sorted(set(latest) | set(installed))])
    return 0


def installed_versions(client):
    """name -> version of every installed element, from the Element Manager: an element
    installed from a manifest file is installed too, though no repository put it there."""
    try:
        return {e["name"]: e["version"] for e in client.request("GET", EM_ELEMENTS).payload()}
    except ApiError as exc:
        if exc.status != 403:
            raise
        return {}  # no right to read the Element Manager: the repositories' view must do


def cmd_versions(args, env):
    query = [("name", args.name)] + ([] if args.dev else [("development", "false")])
    elements = session_client(args, env).request("GET", ELEMENTS, query=query).payload()
    emit(args, env, _rows(sorted(elements, key=lambda e: parse(e["version"]))))
    return 0


def _finish(args, env, client, element, done):
    if args.wait:
        element = follow(client, env, element, ELEMENTS + element["uuid"], done, args.wait_timeout)
    emit(args, env, element)
    return 0


def cmd_install(args, env):
    client = session_client(args, env)
    element = pick(client, args.element, installed=False)
    result = client.request("POST", f"{ELEMENTS}{element['uuid']}/actions/install/invoke",
                            body={}).payload()
    return _finish(args, env, client, result, lambda e: e["status"] == "ACTIVE")


def cmd_upgrade(args, env):
    if args.old_version is not None:
        raise UsageError(f"name the target as NAME==VERSION, as install does: "
                         f"appliance elements upgrade {args.element}=={args.old_version}")
    name = args.element.partition("==")[0]
    client = session_client(args, env)
    current = pick(client, name, installed=True)
    target = pick(client, args.element)
    if target["uuid"] == current["uuid"]:
        raise CliError(f"{name} {current['version']} is installed already"
                       + ("" if "==" in args.element else
                          "; it is the version the resolver prefers; name another as NAME==VERSION"))
    result = client.request("POST", f"{ELEMENTS}{current['uuid']}/actions/upgrade/invoke",
                            body={"target": target["uuid"]}).payload()
    return _finish(args, env, client, result, lambda e: e["status"] == "ACTIVE")


def cmd_uninstall(args, env):
    client = session_client(args, env)
    current = pick(client, args.name, installed=True)
    result = client.request("POST", f"{ELEMENTS}{current['uuid']}/actions/uninstall/invoke",
                            body={}).payload()
    return _finish(args, env, client, result,
                   lambda e: e["status"] == "AVAILABLE" and not e.get("element"))
