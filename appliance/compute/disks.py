"""`disk_spec` of nodes and sets, as the reference shapes it (kinds `root_disk` and
`disks`), and image URLs. Pure functions: the API checks bodies with them, the set planner
and the daemon read specs through `disk_list`.
"""

import urllib.parse

from appliance.api.errors import BadRequest, Forbidden
from appliance.api.validation import Validator
from appliance.tenancy import fetch, quotas

from . import images

TIERS = ("COLD", "WARM", "HOT")
SIZE = {"type": "integer", "minimum": 1, "maximum": 1000000}
ROOT_LABEL = "root-volume"
DEFAULTS = {"tier": "WARM", "ephemeral": True}


def _nullable(schema):
    return {**schema, "type": [schema["type"], "null"]}


ROOT_DISK = {
    "type": "object", "additionalProperties": False, "required": ["kind", "image"],
    "properties": {
        "kind": {"const": "root_disk"},
        "image": {"type": "string", "minLength": 1, "maxLength": 255},
        "size": SIZE,
        "tier": {"enum": list(TIERS)},
        "ephemeral": {"type": "boolean"},
    }}
DISK = {
    "type": "object", "additionalProperties": False, "required": ["size"],
    "properties": {
        "size": SIZE,
        "label": _nullable({"type": "string", "minLength": 1, "maxLength": 128}),
        "image": _nullable({"type": "string", "minLength": 1, "maxLength": 256}),
        "mount_point": _nullable({"type": "string", "minLength": 1, "maxLength": 512}),
        "fs": _nullable({"type": "string", "minLength": 1, "maxLength": 256}),
        "tier": {"enum": list(TIERS)},
        "ephemeral": {"type": "boolean"},
    }}
DISKS = {
    "type": "object", "additionalProperties": False, "required": ["kind", "disks"],
    "properties": {"kind": {"const": "disks"},
                   "disks": {"type": "array", "items": DISK, "maxItems": 64}}}
# what the field itself declares: the kind; each kind is then checked by its own schema,
# so that a message names the field at fault rather than "matches none of oneOf"
FIELD_SCHEMA = {"type": "object", "required": ["kind"],
                "properties": {"kind": {"enum": ["root_disk", "disks"]}},
                "description": "kind root_disk {image, size GB (10), tier, ephemeral} or "
                               "kind disks {disks: [{size, label, image, mount_point, fs, "
                               "tier, ephemeral}]}; disks[0] is the root disk"}
_BY_KIND = {"root_disk": Validator(ROOT_DISK), "disks": Validator(DISKS)}


def check_image(where, image, platform, artifact=None, reach=None):
    """http(s) URLs for everyone; `file://` (a path on the hypervisor) only for platform
    callers, since it reads any file the daemon can read; or a repository artifact of
    category `images` by its path, `/v1/repo/artifacts/<uuid>`, which `artifact(uuid)`
    returns when the caller may see it (None otherwise). `reach` (the caller's
    addresses.Reach): an http(s) URL whose host is an address it refuses is a 400; a
    name is judged by the compute daemon when it downloads."""
    if images.artifact_uuid(image) is not None:
        record = artifact(images.artifact_uuid(image)) if artifact else None
        if record is None:
            raise BadRequest(f"{where}: no repository artifact {image}")
        if not images.is_image_artifact(record):
            raise BadRequest(f"{where}: artifact {image} is a {record['urn'].split(':')[0]}"
                             f", not an {images.ARTIFACT_CATEGORY} artifact")
        return
    try:
        parts = urllib.parse.urlsplit(image)
    except ValueError:          # e.g. an unclosed IPv6 bracket
        raise BadRequest(f"{where}: not a URL") from None
    scheme = parts.scheme.lower()
    if scheme in ("http", "https"):
        if not parts.netloc:
            raise BadRequest(f"{where}: must be an http(s) URL with a host")
        why = fetch.literal_refusal(image, reach) if reach is not None else None
        if why:
            raise BadRequest(f"{where}: {why}")
        return
    if scheme == "file":
        if not platform:
            raise Forbidden(f"{where}: file:// images are for administrators only")
        return
    raise BadRequest(f"{where}: must be an http(s) URL, a repository artifact "
                     f"({images.ARTIFACT_PREFIX}<uuid>), or file:// for administrators")


def normalize(spec, platform, artifact=None, reach=None):
    """The spec checked, with the reference's defaults filled in; 400/403 otherwise.
    `artifact`, `reach`: as check_image takes them."""
    _BY_KIND[spec["kind"]].check_at(spec, "disk_spec")
    if spec["kind"] == "root_disk":
        spec = {**DEFAULTS, "size": 10, **spec}
        check_image("disk_spec.image", spec["image"], platform, artifact, reach)
        return spec
    disks = [{**DEFAULTS, **disk} for disk in spec["disks"]]
    labels, mounts = set(), set()
    for i, disk in enumerate(disks):
        where = f"disk_spec.disks[{i}]"
        if disk.get("image") is not None:
            check_image(f"{where}.image", disk["image"], platform, artifact, reach)
        if disk.get("mount_point") is not None:
            if disk["mount_point"] in mounts:
                raise BadRequest(f"{where}.mount_point: {disk['mount_point']} is used twice")
            mounts.add(disk["mount_point"])
        if i == 0:
            if disk.get("image") is None:
                raise BadRequest(f"{where}.image: required (the root disk is made from an "
                                 "image)")
            if disk.get("mount_point") not in (None, "/"):
                raise BadRequest(f"{where}.mount_point: the root disk's must be /")
            continue
        label = disk.get("label")
        if label is None:
            raise BadRequest(f"{where}.label: required for a disk other than the first")
        if label == ROOT_LABEL:
            raise BadRequest(f"{where}.label: {ROOT_LABEL} is reserved for the root disk")
        if label in labels:
            raise BadRequest(f"{where}.label: {label} is used twice")
        labels.add(label)
        if disk.get("fs") is not None and disk.get("image") is not None:
            raise BadRequest(f"{where}: fs or image, not both")
    return {"kind": "disks", "disks": disks}


def disk_list(spec):
    """The disks of a spec, root first, each with its defaults."""
    if not spec:
        return []
    if spec.get("kind") == "root_disk":
        return [{**DEFAULTS, "size": 10, **spec}]
    return [{**DEFAULTS, **d} for d in spec.get("disks") or []]


def disk_sizes(spec):
    """The GB of each disk of a spec: what the quota `disk` counts (tenancy/quotas.py)."""
    return [d.get("size") or 0 for d in disk_list(spec)]


quotas.declare_disk_sizes(disk_sizes)


def root_image(spec):
    disks = disk_list(spec)
    return disks[0].get("image") if disks else None


def check_change(old, new):
    """A disk that exists keeps its tier and ephemeral flag (another storage pool would
    mean moving it) and never shrinks (data beyond the new end would be lost)."""
    for i, (before, after) in enumerate(zip(disk_list(old), disk_list(new))):
        if (before["tier"], before["ephemeral"]) != (after["tier"], after["ephemeral"]):
            raise BadRequest("disk_spec: Changing tier or ephemeral of an existing disk is "
                             "unsupported")
        if after["size"] < before["size"]:
            raise BadRequest(f"disk_spec: disk {i} cannot shrink (from {before['size']} "
                             f"to {after['size']} GB)")
