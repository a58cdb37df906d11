"""`appliance secret certificates ...`: TLS certificates (`/v1/secret/certificates/`).

The reference CLI's verbs and options (`add -p P -e EMAIL -d DOMAIN... [-n NAME]
[-m dns_core|manual --cert FILE --key FILE]`, `update`, `list`, `show`, `delete`), plus
`--wait` until the certificate daemon has issued it (docs/certificates.md).
"""

import argparse

from . import UsageError
from .common import (add_body_options, add_list_arguments, add_project_option,
                     add_wait_options, create, fields_epilog, session_client, update,
                     verb_adder, with_given_fields)
from .groups import emit_after_wait, on_item_or_collection, resolve, show_or_wait

COLLECTION = "/v1/secret/certificates/"
OPTION_OF_FIELD = {"name": "-n/--name", "description": "-D/--description",
                   "project_id": "-p/--project", "email": "-e/--email",
                   "domains": "-d/--domain", "method": "-m/--method", "cert": "--cert",
                   "key": "--key", "expiration_threshold": "--threshold", "tags": "--tag"}
WAITS_FOR = "the certificate daemon to issue it through ACME"
METHODS = ("dns_core", "manual")


def add_collection(collections, common, make_parser, handlers):
    """Add `certificates` to the subparsers of the `secret` group."""
    coll = collections.add_parser(
        "certificates", help=COLLECTION, parents=[common],
        description="TLS certificates: issued through ACME DNS-01 on the built-in DNS "
                    "(method dns_core) or uploaded with their key (manual)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  appliance secret certificates add -e ops@example.org "
               "-d example.test '*.example.test' --wait")
    verbs = coll.add_subparsers(dest="verb", metavar="VERB", required=True,
                                parser_class=make_parser)
    verb = verb_adder(verbs, common, "certificate")

    def waiting(sub):
        return add_wait_options(sub, WAITS_FOR)

    add_list_arguments(verb("list", "list certificates (uuid, project, name, email, "
                                    "domains, status)",
                            on_item_or_collection(handlers["list"], COLLECTION),
                            item=False))
    waiting(verb("show", "show a certificate (key and cert hidden unless --show-values)",
                 show_or_wait(handlers["show"], COLLECTION, WAITS_FOR)))
    add = waiting(verb("add", "add a certificate", _write("POST"), item=False,
                       aliases=("create",)))
    add.epilog = fields_epilog("appliance secret certificates add -p PROJECT -e "
                               "ops@example.org -d www.example.test --wait", COLLECTION,
                               OPTION_OF_FIELD)
    update = waiting(verb("update", "change a certificate (its status goes back to NEW; new "
                                    "domains or method: a new issuance)", _write("PUT"),
                          epilog="appliance secret certificates update web -d "
                                 "www.example.test api.example.test"))
    for sub in (add, update):
        _options(sub, create=sub is add)
    verb("delete", "delete a certificate",
         on_item_or_collection(handlers["delete"], COLLECTION))


def _options(sub, create):
    opt = sub.add_argument
    add_project_option(sub)
    if create:
        opt("-u", "--uuid", metavar="UUID", help="the new certificate's UUID")
    opt("-n", "--name", default="test_certificate" if create else None,
        help="default test_certificate (the reference's)" if create else None)
    opt("-D", "--description")
    opt("-e", "--email", help="contact of the ACME account")
    # the reference's -d is repeated (-d a -d b); several after one -d work too
    opt("-d", "--domain", "--domains", dest="domains", action="extend", nargs="+",
        metavar="DOMAIN", help="names in our DNS zones; *.name for a wildcard")
    opt("-m", "--method", choices=METHODS,
        help="dns_core (default): issued by the daemon; manual: give --cert and --key")
    opt("--cert", metavar="FILE", type=argparse.FileType("r"),
        help="PEM chain, leaf first (manual)")
    opt("--key", metavar="FILE", type=argparse.FileType("r"), help="PEM private key (manual)")
    opt("--threshold", type=int, metavar="DAYS",
        help="expiration_threshold: renewed this many days before it expires (default 14)")
    opt("--tag", action="append", metavar="TAG", help="a tag (repeat for several)")
    add_body_options(sub)


def _read(file):
    with file:
        return file.read()


def _body(args, create):
    body = {field: getattr(args, opt) for opt, field in (
        ("uuid", "uuid"), ("name", "name"), ("description", "description"),
        ("email", "email"), ("domains", "domains"), ("threshold", "expiration_threshold"),
        ("tag", "tags")) if getattr(args, opt, None) is not None}
    if args.method is not None:
        body["method"] = {"kind": args.method}
    for part in ("cert", "key"):
        if getattr(args, part) is not None:
            body[part] = _read(getattr(args, part))
    if create and "domains" not in body and not (args.fields or args.data):
        raise UsageError("give the certificate's domains: -d DOMAIN [DOMAIN ...]")
    return body


def _write(method):
    def handler(args, env):
        client = session_client(args, env)
        body = with_given_fields(_body(args, method == "POST"), args, env, method)
        target = resolve(client, COLLECTION, args.ref) if method == "PUT" else COLLECTION
        if method == "POST":
            sent = create(client, target, body, args.project)
        else:
            if args.project:
                body["project_id"] = args.project
            sent = update(client, target, body)
        return emit_after_wait(args, env, client, COLLECTION + sent["uuid"], sent, WAITS_FOR)
    return handler


