"""Repository drivers (spec 2.6), chosen by `driver_spec.kind`.

A driver gives the repository's URI, an artifact's URI, the inventory, one element's full
data (its manifest and per-version inventory), and, where it can, upload. A driver handed
a spec of another kind refuses it (ValueError): the choice is by kind, never by guess.
"""

import base64
import json
import os
import urllib.parse

import yaml

from appliance.api import bodies, yaml_bodies
from appliance.tenancy import fetch

from . import inventory

TIMEOUT = 15
DEADLINE = 60                       # seconds for one file of a repository, all of it
MAX_BYTES = 32 * 1024 * 1024        # an inventory or a manifest is far smaller
MANIFEST_SUFFIXES = (".yaml", ".yml")


class DriverError(Exception):
    """The repository cannot be read: unreachable, refused, or malformed."""


class Driver:
    kind = None
    can_upload = False

    def __init__(self, spec, stored_elements=(), reach=None):
        if spec.get("kind") != self.kind:
            raise ValueError(f"driver {self.kind} refuses a repository of kind "
                             f"{spec.get('kind')}")
        self.spec = spec
        self.stored = list(stored_elements)   # the repository's RepoElements, for some kinds
        # the address rule of the repository's project (tenancy/addresses); None: this
        # driver may not fetch at all
        self.reach = reach

    def uri(self):
        return f"{self.kind}:"

    def artifact_uri(self, name, version, category, file_name):
        return f"{self.uri()}/{name}/{version}/{category}/{file_name}"

    def inventory(self):
        """{(name, version): inventory entry}."""
        raise DriverError(f"driver {self.kind} lists no inventory")

    def element(self, name, version):
        """(manifest, inventory entry) of one element version."""
        raise DriverError(f"driver {self.kind} cannot fetch {name} {version}")


class NginxDriver(Driver):
    """Any static HTTP server: <url>/inventory.json, <url>/<name>/<version>/..."""
    kind = "nginx"

    def uri(self):
        return self.spec["url"].rstrip("/")

    def _get(self, path):
        """The body of <url>/<path>, through the guarded fetcher (resolved once,
        checked by the repository project's address rule, bounded; no proxy)."""
        url = f"{self.uri()}/{path}"
        if self.reach is None:
            raise DriverError(f"GET {url}: no address rule given; nothing is fetched")
        headers = {"Accept": "application/json, */*"}
        if self.spec.get("username"):
            pair = f"{self.spec['username']}:{self.spec.get('password') or ''}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        try:
            return fetch.fetch_bytes(url, self.reach, MAX_BYTES, DEADLINE, timeout=TIMEOUT,
                                     headers=headers)
        except fetch.FetchError as e:
            raise DriverError(f"GET {e}") from None

    def inventory(self):
        raw = self._get("inventory.json")
        try:
            return inventory.check(json.loads(raw))
        except (ValueError, inventory.InventoryError) as e:
            raise DriverError(f"{self.uri()}/inventory.json: {e}") from None

    def element(self, name, version):
        quoted = f"{urllib.parse.quote(name)}/{urllib.parse.quote(version)}"
        try:
            manifest = yaml_bodies.load_yaml(
                self._get(f"{quoted}/manifests/{urllib.parse.quote(name)}.yaml"))
        except (yaml.YAMLError, bodies.ShapeError) as e:
            raise DriverError(f"manifest of {name} {version} is not YAML: {e}") from None
        if not isinstance(manifest, dict):
            raise DriverError(f"manifest of {name} {version} is not a mapping")
        try:
            item = json.loads(self._get(f"{quoted}/inventory.json"))
            entry = inventory.check({"elements": {name: {version: item}}})[(name, version)]
        except DriverError:
            entry = inventory.entry(name, version)      # the per-version inventory is optional
        except (ValueError, inventory.InventoryError) as e:
            raise DriverError(f"inventory of {name} {version}: {e}") from None
        return manifest, entry


def valid_manifest(path):
    """The manifest in `path` when it is one by spec 2.6's rules, else None."""
    if not path.endswith(MANIFEST_SUFFIXES):
        return None
    try:
        with open(path) as f:
            data = yaml_bodies.load_yaml(f)
    except (OSError, yaml.YAMLError, bodies.ShapeError, UnicodeDecodeError):
        return None
    if isinstance(data, dict) and all(k in data for k in ("name", "version", "resources")):
        data["version"] = str(data["version"])
        return data
    return None


class BootstrapDriver(Driver):
    """A local directory of YAML manifests."""
    kind = "bootstrap"

    def uri(self):
        return "file://" + os.path.abspath(self.spec["manifests_dir"])

    def _manifests(self):
        directory = self.spec["manifests_dir"]
        if not os.path.isdir(directory):
            raise DriverError(f"{directory} is not a directory")
        found = {}
        for file_name in sorted(os.listdir(directory)):
            manifest = valid_manifest(os.path.join(directory, file_name))
            if manifest is not None:
                found[(str(manifest["name"]), manifest["version"])] = manifest
        return found

    def inventory(self):
        return {key: inventory.entry(*key) for key in self._manifests()}

    def element(self, name, version):
        manifest = self._manifests().get((name, version))
        if manifest is None:
            raise DriverError(f"{name} {version} is not in {self.spec['manifests_dir']}")
        return manifest, inventory.entry(name, version)


class StoredDriver(Driver):
    """Elements live in the store: the inventory is what is stored."""

    def inventory(self):
        return {(e["name"], e["version"]): e.get("inventory") or inventory.entry(
            e["name"], e["version"]) for e in self.stored}

    def element(self, name, version):
        for e in self.stored:
            if (e["name"], e["version"]) == (name, version) and e.get("manifest"):
                return e["manifest"], e.get("inventory") or inventory.entry(name, version)
        raise DriverError(f"{name} {version} is not stored")


class DummyMigrationDriver(StoredDriver):
    """Attaches RepoElements of older installations: an empty inventory of its own."""
    kind = "dummy_migration"

    def inventory(self):
        return {}


class DatabaseDriver(StoredDriver):
    """Elements uploaded through the API and kept by the service."""
    kind = "database"
    can_upload = True


DRIVERS = {d.kind: d for d in (NginxDriver, BootstrapDriver, DummyMigrationDriver,
                               DatabaseDriver)}


def driver_for(spec, stored_elements=(), reach=None):
    """The driver of `spec`; `reach` (addresses.Reach of the repository's project) lets
    a fetching driver fetch."""
    cls = DRIVERS.get((spec or {}).get("kind"))
    if cls is None:
        raise ValueError(f"no driver of kind {(spec or {}).get('kind')}")
    return cls(spec, stored_elements, reach)
