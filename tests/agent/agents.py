"""Real agent processes (daemons/agent.py) for tests and benches, with the test
capability "testfile" installed in them (tests/agent/testcap.py)."""

import json
import os
import signal
import subprocess
import sys

from tests.processes import stop

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCH = ("import sys; sys.path.insert(0, {root!r}); from tests.agent import testcap; "
          "testcap.install(); from daemons.agent import main; sys.exit(main())")


class AgentProcess:
    """One HW "node": its root prefix, state dir and credential file under `base`."""

    def __init__(self, base, credential, endpoint, wait=25, env=None):
        self.base = str(base)
        self.root = os.path.join(self.base, "root")
        self.state_dir = os.path.join(self.base, "state")
        self.credential_file = os.path.join(self.base, "agent.json")
        self.log_path = os.path.join(self.base, "agent.log")
        self.wait = wait
        self.env = env or {}
        self.credential = credential
        os.makedirs(self.root, exist_ok=True)
        with open(self.credential_file, "w") as f:
            json.dump({"endpoint": endpoint, "root": self.root, "state_dir": self.state_dir,
                       **credential}, f)
        self.proc = None

    def start(self):
        env = {**os.environ, "APPLIANCE_AGENT_CREDENTIAL_FILE": self.credential_file,
               "APPLIANCE_AGENT_POLL_WAIT": str(self.wait), "APPLIANCE_LOG_LEVEL": "INFO",
               "APPLIANCE_CONFIG": os.devnull, **self.env}
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-c", LAUNCH.format(root=ROOT)],
                                     env=env, cwd=ROOT, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        return self

    def kill(self):
        stop(self.proc, signum=signal.SIGKILL)
        self.log.close()

    def stop(self):
        code = stop(self.proc)
        self.log.close()
        return code

    def file(self, path):
        try:
            with open(self.root + path) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def logs(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()
