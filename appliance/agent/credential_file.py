"""The node side of an agent's credential: the file {"endpoint", "agent", "node",
"secret"} that enrollment, the VM seed or first boot wrote, which may also carry "root"
and "state_dir" (`appliance agent enroll --root/--state-dir`), which then win over the
settings. The node agent (daemons/agent.py) and `appliance agent status` read it.

Apart from credentials.py, which issues credentials on the platform side: that module
loads hashlib's OpenSSL binding (hmac, secrets), which the node agent has no use for
(tests/supervisor/test_imports.py).
"""

import json


class CredentialError(Exception):
    """A credential file that is missing or unusable; str() says which and why."""


def read_credential(path):
    """The credential file's contents, with its four keys checked."""
    try:
        with open(path) as f:
            cred = json.load(f)
    except OSError as e:
        raise CredentialError(f"cannot read the credential file {path}: {e.strerror}") \
            from None
    except ValueError:
        raise CredentialError(f"the credential file {path} is not JSON") from None
    missing = [k for k in ("endpoint", "agent", "node", "secret")
               if not isinstance(cred.get(k), str) or not cred[k]] \
        if isinstance(cred, dict) else ["all"]
    if missing:
        raise CredentialError(f"the credential file {path} lacks {', '.join(missing)}")
    return cred


def layout(settings, cred):
    """(root, state dir, allowed roots) of this agent."""
    roots = [r.strip() for r in str(settings["agent_allowed_roots"]).split(",") if r.strip()]
    return (cred.get("root") or settings["agent_root"],
            cred.get("state_dir") or settings["agent_state_dir"], roots)
