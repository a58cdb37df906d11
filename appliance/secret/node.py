"""The node side of SSH-key targets: one line per key in a block the agent manages inside
the user's authorized_keys; lines outside the block are the user's and stay as they are.

    # BEGIN appliance managed keys
    ssh-ed25519 AAAA... comment appliance:<key uuid>
    # END appliance managed keys

The user's home comes from the node's passwd (under the root prefix in host tests). The
file is written with the node toolbox, `host.write_file` (docs/node-toolbox.md: allowed
roots, no symlink out of them, temporary file and rename), 0600 and owned by the user, in a
directory created 0700 and owned by the user when missing.
"""

import posixpath

from appliance.configs.node import Refused, check_allowed, user_entry

BEGIN = "# BEGIN appliance managed keys"
END = "# END appliance managed keys"


def tag(master):
    return f" appliance:{master}"


def edit(text, master, line):
    """`text` with the block's line of `master` set to `line` (None: removed)."""
    lines = text.splitlines()
    if BEGIN in lines and END in lines[lines.index(BEGIN):]:
        start = lines.index(BEGIN)
        end = lines.index(END, start)
        before, block, after = lines[:start], lines[start + 1:end], lines[end + 1:]
    else:
        before, block, after = lines, [], []
    block = [entry for entry in block if not entry.endswith(tag(master))]
    if line is not None:
        block.append(line + tag(master))
    out = before + ([BEGIN, *sorted(block), END] if block else []) + after
    return "".join(f"{entry}\n" for entry in out)


class Driver:
    def __init__(self, host):
        self.host = host

    def _where(self, value):
        uid, gid, home = user_entry(self.host.root, value["user"])
        if gid is None or not home:
            raise Refused(f"user {value['user']}: no such user on this node")
        path = value["authorized_keys"]
        if not path.startswith("/"):
            path = posixpath.join(home, path)
        check_allowed(self.host, path)
        return path, uid, gid, home

    def _set(self, value, master, line):
        path, uid, gid, home = self._where(value)
        current = self.host.read_file(path)
        if current is None and line is None:
            return                      # no file: no line to drop
        wanted = edit((current or b"").decode("utf-8", "replace"), master, line)
        self.host.write_file(path, wanted.encode(), 0o600, (uid, gid),
                             private=(home, (uid, gid), 0o700))

    def apply(self, item, applied):
        try:
            if applied and applied.get("value") and (
                    applied["value"]["user"], applied["value"]["authorized_keys"]) != (
                    item["value"]["user"], item["value"]["authorized_keys"]):
                self.remove(applied)        # the key moved to another user or file
            self._set(item["value"], item["master"], item["value"]["key"])
        except Refused as e:
            return {"status": "ERROR", "reason": str(e), "value": {}}
        except OSError as e:
            return {"status": "ERROR", "reason": f"authorized_keys: {e.strerror or e}",
                    "value": {}}
        return {"status": "ACTIVE", "reason": None, "value": {}}

    def remove(self, applied):
        if not (applied or {}).get("value"):
            return
        try:
            self._set(applied["value"], applied["master"], None)
        except (Refused, FileNotFoundError):
            pass        # the user or the file is gone: no line left to drop
