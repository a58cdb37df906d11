"""`appliance em ...`: install, upgrade and uninstall elements from manifest files.

A manifest file (YAML or JSON) is read here and sent as JSON; if the same name and
version were uploaded before, that manifest is used again. `--wait` follows the element
until it is ACTIVE (or gone, for uninstall), printing each resource's status as it moves.
"""

import argparse

import yaml

from . import CliError, UsageError
from .common import add_wait_options, emit, session_client
from .wait import Watched, wait_for

MANIFESTS = "/v1/em/manifests/"
ELEMENTS = "/v1/em/elements/"


def read_manifest(path):
    try:
        with open(path) as f:
            manifest = yaml.safe_load(f)
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise UsageError(f"{path} is not valid YAML or JSON: {e}") from None
    if not isinstance(manifest, dict) or "name" not in manifest or "version" not in manifest:
        raise UsageError(f"{path} is not a manifest (a mapping with name and version)")
    return manifest


def upload(client, manifest):
    found = client.request("GET", MANIFESTS, query=[
        ("name", str(manifest["name"])), ("version", str(manifest["version"]))]).payload()
    if found:
        return found[0]["uuid"]
    return client.request("POST", MANIFESTS, body=manifest).payload()["uuid"]


def find_element(client, name):
    found = client.request("GET", ELEMENTS, query=[("name", name)]).payload()
    return found[0] if found else None


def follow(client, env, element, timeout, until_gone=False):
    """Wait (appliance/cli/wait.py) until the element is ACTIVE and installed (or gone),
    printing each move of its status and of each of its resources."""
    def lines(current):
        reason = current.get("status_reason")
        return [("element", f"element {current['status']}" + (f": {reason}" if reason else ""))] + [
            (key, f"{key} {slot['status']}") for key, slot in sorted(current["resources"].items())]
    return wait_for(client, env, Watched(
        ELEMENTS + element["uuid"], label=element["name"], lines=lines,
        done=lambda current: current["status"] == "ACTIVE" and current["desired"] == "installed",
        until_gone=until_gone, gone="uninstalled"), timeout)


def element_view(element):
    """A show view: the element's fields, then one line per resource."""
    head = {k: element.get(k) for k in ("uuid", "name", "version", "status", "status_reason",
                                        "manifest", "last_repair")}
    rows = [{"resource": key, "status": slot["status"], "uuid": slot["uuid"],
             "reason": slot.get("reason") or "-"}
            for key, slot in sorted(element["resources"].items())]
    return head, rows


def add_em_group(commands, common, make_parser):
    em = commands.add_parser("em", help="install, upgrade, uninstall elements from manifest files",
                             description="the Element Manager: elements from manifest files",
                             parents=[common], formatter_class=argparse.RawDescriptionHelpFormatter,
                             epilog="example:\n  appliance em install examples/hello-1.0.0.yaml --wait\n"
                                    "  appliance em show hello")
    verbs = em.add_subparsers(dest="verb", metavar="VERB", required=True,
                              parser_class=make_parser)

    def verb(name, summary, example, handler):
        sub = verbs.add_parser(name, help=summary, description=summary, parents=[common],
                               formatter_class=argparse.RawDescriptionHelpFormatter,
                               epilog=f"example:\n  {example}")
        sub.set_defaults(handler=handler)
        return sub

    def wait_options(sub):
        add_wait_options(sub, "the Element Manager to finish")

    for name, summary in (("install", "install the element of a manifest file"),
                          ("upgrade", "upgrade the installed element to a manifest file")):
        example = "examples/hello-1.0.0.yaml" if name == "install" else "examples/hello-1.1.0.yaml"
        sub = verb(name, summary, f"appliance em {name} {example} --wait", _install(name))
        sub.add_argument("file", metavar="FILE", help="manifest, YAML or JSON")
        wait_options(sub)
    sub = verb("uninstall", "uninstall an element by name", "appliance em uninstall hello --wait",
               cmd_uninstall)
    sub.add_argument("name", metavar="NAME")
    wait_options(sub)
    verb("list", "list installed elements", "appliance em list", cmd_list)
    sub = verb("show", "an element with its resources and their statuses",
               "appliance em show hello", cmd_show)
    sub.add_argument("name", metavar="NAME")


def _install(action):
    def handler(args, env):
        manifest = read_manifest(args.file)
        client = session_client(args, env)
        manifest_uuid = upload(client, manifest)
        element = client.request("POST", f"{MANIFESTS}{manifest_uuid}/actions/{action}/invoke",
                                 body={}).payload()
        if args.wait:
            element = follow(client, env, element, args.wait_timeout)
        show_element(args, env, element)
        return 0
    return handler


def cmd_uninstall(args, env):
    client = session_client(args, env)
    element = find_element(client, args.name)
    if element is None:
        raise CliError(f"no element {args.name} is installed")
    manifest_uuid = element["manifest"].rsplit("/", 1)[1]
    result = client.request("POST", f"{MANIFESTS}{manifest_uuid}/actions/uninstall/invoke",
                            body={}).payload()
    if args.wait:
        follow(client, env, element, args.wait_timeout, until_gone=True)
        env.stdout.write(f"uninstalled {args.name}\n")
        return 0
    emit(args, env, result)
    return 0


def cmd_list(args, env):
    client = session_client(args, env)
    elements = client.request("GET", ELEMENTS).payload()
    emit(args, env, [{k: e.get(k) for k in ("uuid", "name", "version", "status",
                                           "status_reason")} for e in elements]
         if not getattr(args, "json", False) else elements)
    return 0


def cmd_show(args, env):
    client = session_client(args, env)
    element = find_element(client, args.name)
    if element is None:
        raise CliError(f"no element {args.name} is installed")
    show_element(args, env, element)
    return 0


def show_element(args, env, element):
    """The element's fields, then a table of its resources (--json: the record)."""
    if getattr(args, "json", False):
        emit(args, env, element)
        return
    head, rows = element_view(element)
    emit(args, env, head)
    env.stdout.write("\n")
    emit(args, env, rows)
