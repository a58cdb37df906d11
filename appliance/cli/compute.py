"""`appliance compute ...`: hypervisors, nodes, sets, volumes and placement policies.

The generic verbs with the collection filled in (as `groups.py` does), plus what compute
needs: the reference CLI's short options for a machine (`-i IMAGE -c 1 -r 1024 -d 10`),
an update of the image or disk size that re-sends the whole `disk_spec` with the root disk
changed (as the reference CLI does), the node actions, volume attach/detach, `--wait` with
progress, and the serial console.
"""

import argparse
import os
import urllib.request

from . import CliError, UsageError
from .common import (add_body_options, add_list_arguments, add_project_option,
                     add_wait_options, create, emit, fields_epilog, session_client, update,
                     verb_adder, with_given_fields)
from .groups import emit_after_wait, on_item_or_collection, resolve, show_or_wait, wait_active
from .wait import Watched, wait_for

WAITS_FOR = "the compute daemon to build it"
# CLI name -> (API collection, summary, create example)
COLLECTIONS = {
    "hypervisors": ("hypervisors", "libvirt connections that run nodes (admin only)",
                    "-n trial --uri test:///default --storage-pool default-pool --wait"),
    "nodes": ("nodes", "virtual machines",
              "-n web -i https://example.org/base.qcow2 -c 2 -r 2048 -d 20 --wait"),
    "sets": ("sets", "groups of identical nodes",
             "-n web -i https://example.org/base.qcow2 --replicas 3 --wait"),
    "volumes": ("volumes", "data disks, attached to one node at a time", "-n data --size 10"),
    "placement-policies": ("placement_policies", "affinity and anti-affinity of nodes",
                           "-n spread --kind hard-anti-affinity"),
}
MACHINES = ("nodes", "sets")
# a field of the body -> the option that sets it, for `add --help`
OPTION_OF_FIELD = {"name": "-n/--name", "description": "-D/--description",
                   "project_id": "-p/--project", "cores": "-c/--cores", "ram": "-r/--ram",
                   "disk_spec": "-i/--image, -d/--disk-size", "hostname": "--hostname",
                   "replicas": "--replicas", "size": "--size", "kind": "--kind",
                   "driver_spec": "--uri, --storage-pool, --underlay-address", "cores_ratio": "--cores-ratio",
                   "ram_ratio": "--ram-ratio"}


def add_group(commands, common, make_parser, handlers):
    group = commands.add_parser(
        "compute", help="hypervisors, nodes, sets, volumes, placement policies",
        description="compute: /v1/compute/...", parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  appliance compute nodes add -p PROJECT -i URL --wait\n"
               "  appliance compute nodes console web")
    collections = group.add_subparsers(dest="collection", metavar="COLLECTION", required=True,
                                       parser_class=make_parser)
    for name, (api, summary, example) in COLLECTIONS.items():
        coll = collections.add_parser(name, help=summary, parents=[common],
                                      description=f"{summary}: /v1/compute/{api}/")
        verbs = coll.add_subparsers(dest="verb", metavar="VERB", required=True,
                                    parser_class=make_parser)
        _add_verbs(verbs, common, name, api, example, handlers)


def _add_verbs(verbs, common, name, api, example, handlers):
    verb = verb_adder(verbs, common, "item", collection_path=f"/v1/compute/{api}/",
                      compute_collection=name)

    def waiting(sub):
        return add_wait_options(sub, WAITS_FOR)

    listing = verb("list", f"list {name}",
                   on_item_or_collection(handlers["list"], _collection_path), item=False)
    add_list_arguments(listing)
    waiting(verb("show", f"show one of {name}",
                 show_or_wait(handlers["show"], _collection_path, WAITS_FOR)))
    add = waiting(verb("add", f"add one of {name}", _write("POST"), item=False,
                       aliases=("create",)))
    add.epilog = fields_epilog(f"appliance compute {name} add {example}",
                               f"/v1/compute/{api}/", OPTION_OF_FIELD)
    update = waiting(verb("update", f"change fields of one of {name}", _write("PUT")))
    for sub in (add, update):
        _shape_options(sub, name, create=sub is add)
        add_body_options(sub)
    verb("delete", f"delete one of {name}",
         on_item_or_collection(handlers["delete"], _collection_path))
    if name == "nodes":
        for action in ("power-on", "power-off", "reboot"):
            verb(action, f"{action} the node", _action(action.replace("-", "_")))
        move = verb("migrate", "move the node, running, to another hypervisor (admin only); "
                    "--wait follows the move's progress", cmd_migrate,
                    epilog="appliance compute nodes migrate web-0 --hypervisor hv2 --wait")
        move.add_argument("--hypervisor", metavar="HYPERVISOR",
                          help="the target's UUID or name; left out, placement picks the "
                               "best other hypervisor")
        add_wait_options(move, "the compute daemon to move it")
        console = verb("console", "print the node's serial console (its last 64 KiB); "
                       "--follow keeps printing what it writes", cmd_console,
                       epilog="appliance compute nodes console web-0 --follow")
        console.add_argument("-f", "--follow", action="store_true",
                             help="keep asking for what is new (the action's offset), "
                                  "until interrupted")
        console.add_argument("--interval", type=float, default=1.0,
                             help="seconds between asks with --follow (default 1)")
    if name == "volumes":
        attach = waiting(verb("attach", "attach the volume to a node", cmd_attach))
        attach.add_argument("node", metavar="NODE", help="the node's UUID or name")
        waiting(verb("detach", "detach the volume from its node", _action("detach")))


def _shape_options(sub, name, create):
    opt = sub.add_argument
    opt("-n", "--name")
    opt("-D", "--description")
    if create and name != "hypervisors":
        add_project_option(sub)
    if name in MACHINES:
        opt("-c", "--cores", type=int)
        opt("-r", "--ram", type=int, help="MB")
        opt("-i", "--image", help="root disk image: an http(s) URL, a repository artifact "
                                  "(/v1/repo/artifacts/UUID), or a file of this machine "
                                  "(a path: sent as file://, for a hypervisor on this "
                                  "machine, admin only)")
        opt("-d", "--disk-size", type=int, help="root disk size, GB")
    if name == "nodes":
        opt("--hostname")
    if name == "sets":
        opt("--replicas", type=int)
    if name == "volumes":
        opt("--size", type=int, help="GB")
    if name == "hypervisors":
        opt("--uri", help="libvirt connection URI (driver_spec.connection_uri)")
        opt("--storage-pool", help="the libvirt storage pool of the nodes' disks "
                                   "(driver_spec.storage_pool, default \"default\"; "
                                   "test:///default has \"default-pool\")")
        opt("--underlay-address", help="the hypervisor's IPv4 address that carries "
                                       "project networks between hypervisors "
                                       "(driver_spec.underlay_address; docs/network.md)")
        opt("--host-key", help="a qemu+ssh hypervisor's SSH host key, pinned: the key line "
                               "`ssh-keyscan -t ed25519 HOST` prints after the host name "
                               "(driver_spec.host_key; docs/compute.md, \"Remote "
                               "hypervisors\")")
        opt("--migration-address", help="where other hypervisors' QEMU reach this one to "
                                        "move a node here (driver_spec.migration_address; "
                                        "docs/compute.md, \"Moving a node\")")
        opt("--cores-ratio", type=float, help="CPU overcommit (1.0)")
        opt("--ram-ratio", type=float, help="RAM overcommit (1.0)")
    if name == "placement-policies" and create:
        opt("--kind", choices=["soft-anti-affinity", "hard-anti-affinity", "soft-affinity",
                               "hard-affinity"])


# a hypervisor's options that are parts of its driver_spec: option dest -> field
DRIVER_SPEC_OPTIONS = {"uri": "connection_uri", "storage_pool": "storage_pool",
                       "underlay_address": "underlay_address", "host_key": "host_key",
                       "migration_address": "migration_address"}


def _from_options(args):
    names = {"name": "name", "description": "description", "cores": "cores", "ram": "ram", "hostname": "hostname", "replicas": "replicas",
             "size": "size", "kind": "kind", "cores_ratio": "cores_ratio",
             "ram_ratio": "ram_ratio"}
    return {field: getattr(args, opt) for opt, field in names.items()
            if getattr(args, opt, None) is not None}


def _image_url(image):
    """A path to a file here as the file:// URL the API takes (make run's hypervisor is
    this machine); a URL or an artifact path as given."""
    if image is None or "://" in image or image.startswith("/v1/"):
        return image
    if not os.path.isfile(image):
        raise UsageError(f"--image {image}: not a URL (http, https, file) and no such file")
    return "file://" + urllib.request.pathname2url(os.path.abspath(image))


def _root_disk(spec, image, size):
    """`spec` with its root disk's image and size replaced (the reference CLI's update)."""
    spec = dict(spec or {"kind": "root_disk"})
    if spec.get("kind") == "disks":
        if not spec.get("disks"):
            raise CliError("disk_spec has no disks: give disk_spec:= instead")
        first = dict(spec["disks"][0])
        first.update({k: v for k, v in (("image", image), ("size", size)) if v is not None})
        return {**spec, "disks": [first] + spec["disks"][1:]}
    spec.update({k: v for k, v in (("image", image), ("size", size)) if v is not None})
    return spec


def _write(method):
    def handler(args, env):
        client = session_client(args, env)
        collection = args.collection_path
        body = _from_options(args)
        target = resolve(client, collection, args.ref) if method == "PUT" else collection
        if getattr(args, "image", None) is not None or getattr(args, "disk_size", None):
            current = client.request("GET", target).payload().get("disk_spec") \
                if method == "PUT" else None
            body["disk_spec"] = _root_disk(current, _image_url(args.image), args.disk_size)
        given = {field: getattr(args, opt) for opt, field in DRIVER_SPEC_OPTIONS.items()
                 if getattr(args, opt, None) is not None}
        if given:
            # the API takes driver_spec whole: an update of one part re-sends the rest
            spec = client.request("GET", target).payload().get("driver_spec") or {} \
                if method == "PUT" else {}
            body["driver_spec"] = {**spec, "kind": "libvirt", **given}
        with_given_fields(body, args, env, method)
        if method == "POST" and args.compute_collection in MACHINES:
            # the reference CLI's defaults; the API asks for both
            body = {"cores": 1, "ram": 1024, **body}
        sent = create(client, target, body, getattr(args, "project", None)) \
            if method == "POST" else update(client, target, body)
        item = collection + sent["uuid"]
        return _finish(args, env, client, item, sent)
    return handler


def _collection_path(args):
    return args.collection_path


def _finish(args, env, client, item, obj):
    if getattr(args, "wait", False) and "status" in obj:
        try:
            obj = wait_active(client, item, env, args.wait_timeout, WAITS_FOR)
        except CliError:
            env.stderr.write(f"{item} was saved; the wait failed\n")
            raise
    emit(args, env, obj, item)
    return 0




def _action(name, body=None):
    def handler(args, env):
        client = session_client(args, env)
        item = resolve(client, args.collection_path, args.ref)
        answer = client.request("POST", f"{item}/actions/{name}/invoke",
                                body=body or {}).payload()
        if getattr(args, "wait", False):
            # the action answers with nothing or the item; --wait shows the item once ACTIVE
            return emit_after_wait(args, env, client, item, None, WAITS_FOR)
        emit(args, env, answer, item)
        return 0
    return handler


def cmd_attach(args, env):
    client = session_client(args, env)
    node = resolve(client, "/v1/compute/nodes/", args.node)
    return _action("attach", {"node": node.rsplit("/", 1)[1]})(args, env)


def cmd_migrate(args, env):
    client = session_client(args, env)
    item = resolve(client, args.collection_path, args.ref)
    body = {}
    if args.hypervisor is not None:
        body["hypervisor"] = resolve(client, "/v1/compute/hypervisors/",
                                     args.hypervisor).rsplit("/", 1)[1]
    answer = client.request("POST", f"{item}/actions/migrate/invoke", body=body).payload()
    if args.wait:
        answer = wait_for(client, env, Watched(
            item, done=lambda obj: not _moving(obj), lines=_move_lines,
            shown=lambda obj: f"moving ({_move_lines(obj)[0][1]})",
            waits_for="the compute daemon to move it"), args.wait_timeout)
        state = (answer.get("migration") or {}).get("state")
        if state != "done":
            raise CliError(f"{item} was not moved ({state}): "
                           f"{(answer.get('migration') or {}).get('reason')}")
    emit(args, env, answer, item)
    return 0


def _moving(obj):
    return (obj.get("migration") or {}).get("state") in ("requested", "running")


def _move_lines(obj):
    m = obj.get("migration") or {}
    text = f"move to {m.get('target')}: {m.get('state')}"
    if m.get("state") == "running" and m.get("progress") is not None:
        text += f" {m['progress']}%"
    if m.get("reason"):
        text += f": {m['reason']}"
    return [("migration", text)]


def cmd_console(args, env):
    client = session_client(args, env)
    item = resolve(client, args.collection_path, args.ref)
    payload = client.request("GET", f"{item}/actions/console").payload()
    if getattr(args, "json", False) and not getattr(args, "follow", False):
        emit(args, env, payload, item)
        return 0
    env.stdout.write(payload.get("log") or "")
    if not getattr(args, "follow", False):
        return 0
    if args.interval <= 0:
        raise UsageError("--interval: a number of seconds above 0")
    # the console action's offset: each ask brings what the node wrote since the last
    offset = payload.get("next_offset", 0)
    try:
        while True:
            env.stdout.flush()
            env.sleep(args.interval)
            payload = client.request("GET", f"{item}/actions/console",
                                     query=[("offset", str(offset))]).payload()
            env.stdout.write(payload.get("log") or "")
            offset = payload.get("next_offset", offset)
    except KeyboardInterrupt:
        return 0
