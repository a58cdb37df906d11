"""Copy the pinned npm builds of Preact, its hooks and htm into ../static/vendor/.

Run by `make console-vendor` after `npm ci` in this directory. The browser loads these
files as ES modules without an import map (an inline import map would need the CSP to
allow inline script), so the one bare import (`from "preact"` in the hooks build) is
rewritten to the relative file. VERSIONS.json records each file's package, version, the
npm tarball's integrity from package-lock.json and the sha256 of the file as vendored;
tests/console/test_app_vendor.py checks the files against it.
"""

import hashlib
import json
import pathlib
import re

HERE = pathlib.Path(__file__).resolve().parent
OUT = HERE.parent / "static" / "vendor"
FILES = [  # (package, file in the package, vendored name)
    ("preact", "dist/preact.mjs", "preact.mjs"),
    ("preact", "hooks/dist/hooks.mjs", "preact-hooks.mjs"),
    ("htm", "dist/htm.mjs", "htm.mjs"),
    ("preact", "LICENSE", "LICENSE-preact"),
    ("htm", "LICENSE", "LICENSE-htm"),
]
BARE_PREACT = re.compile(r"""from\s*(["'])preact\1""")


def main():
    lock = json.loads((HERE / "package-lock.json").read_text())["packages"]
    OUT.mkdir(parents=True, exist_ok=True)
    versions = {}
    for package, source, name in FILES:
        text = (HERE / "node_modules" / package / source).read_text()
        if name.endswith(".mjs"):
            text = BARE_PREACT.sub('from"./preact.mjs"', text)
        (OUT / name).write_text(text)
        entry = lock[f"node_modules/{package}"]
        versions[name] = {"package": package, "version": entry["version"],
                          "source": source, "integrity": entry["integrity"],
                          "sha256": hashlib.sha256(text.encode()).hexdigest()}
    (OUT / "VERSIONS.json").write_text(json.dumps(versions, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
