"""The vendored front-end libraries are the files VERSIONS.json names, byte for byte.

The console serves static/vendor/ as it is in the tree; a hand edit or a partial
`make console-vendor` would otherwise go unnoticed. The versions must also be the ones
package-lock.json pins, so that re-running the target reproduces the same files.
"""

import hashlib
import json
import pathlib

CONSOLE = pathlib.Path(__file__).resolve().parents[2] / "appliance" / "console"
VENDOR = CONSOLE / "static" / "vendor"


def test_every_vendored_file_matches_its_sha256():
    versions = json.loads((VENDOR / "VERSIONS.json").read_text())
    assert {"preact.mjs", "preact-hooks.mjs", "htm.mjs"} <= set(versions)
    on_disk = {p.name for p in VENDOR.iterdir()} - {"VERSIONS.json"}
    assert on_disk == set(versions), "a vendored file is not listed in VERSIONS.json, or one listed is missing"
    for name, entry in versions.items():
        digest = hashlib.sha256((VENDOR / name).read_bytes()).hexdigest()
        assert digest == entry["sha256"], f"{name} differs from VERSIONS.json"


def test_versions_are_the_lockfile_pins():
    lock = json.loads((CONSOLE / "vendor-src" / "package-lock.json").read_text())["packages"]
    pinned = json.loads((CONSOLE / "vendor-src" / "package.json").read_text())["dependencies"]
    versions = json.loads((VENDOR / "VERSIONS.json").read_text())
    for name, entry in versions.items():
        locked = lock[f"node_modules/{entry['package']}"]
        assert entry["version"] == locked["version"] == pinned[entry["package"]], name
        assert entry["integrity"] == locked["integrity"], name


def test_modules_import_only_relative_paths_and_never_eval():
    """The browser has no import map (the CSP forbids inline script), and no eval."""
    for path in VENDOR.glob("*.mjs"):
        text = path.read_text()
        assert 'from"preact"' not in text.replace(" ", "") and "from'preact'" not in text
        assert "eval(" not in text and "new Function" not in text, path.name
