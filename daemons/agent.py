"""The node agent: `python -m daemons.agent` (docs/agent.md). Runs on every node (a VM, a
HW machine, the appliance itself) as root; it needs no state directory of the platform,
only its credential file and its own state directory.

Settings (APPLIANCE_AGENT_*): agent_credential_file (written by enrollment, the VM seed or
first boot), agent_root, agent_allowed_roots, agent_state_dir, agent_poll_wait. The
credential file {"endpoint", "agent", "node", "secret"} may also carry "root" and
"state_dir" (`appliance agent enroll --root/--state-dir`), which then win.
"""

import logging
import signal
import sys
import time

from appliance import config, daemon_state, logs
from appliance.agent.credential_file import CredentialError, layout, read_credential


def build(settings):
    """The runner of this node, from the settings and the credential file."""
    from appliance.agent.client import AgentClient
    from appliance.agent.host import Host
    from appliance.agent.runner import Runner
    cred = read_credential(settings["agent_credential_file"])
    root, state_dir, roots = layout(settings, cred)
    client = AgentClient(cred["endpoint"], cred["agent"], cred["secret"], ca=cred.get("ca"))
    host = Host(root=root, allowed_roots=roots, state_dir=state_dir, api=client,
                node=cred["node"], agent=cred["agent"], settings=settings,
                log=logging.getLogger("appliance.agent.driver"))
    return Runner(host, client, wait=settings["agent_poll_wait"],
                  log=logging.getLogger("appliance.agent"))


# how often a node not enrolled yet looks for its credential file again
CREDENTIAL_WAIT_SECONDS = 5.0


def main():
    try:
        settings = config.load()
    except config.ConfigError as e:
        print(f"agent: {e}", file=sys.stderr)
        return 2
    log = logs.setup("agent", str(settings["log_level"]).upper())
    daemon_state.record_started(settings["state_dir"], "agent")
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(1))
    path = settings["agent_credential_file"]
    runner, said = None, None
    # a node not enrolled yet (no file: `appliance up` on a workstation, a VM before
    # cloud-init wrote it) waits for its credential instead of failing and being
    # restarted in a loop; a file that is there but wrong is said once
    while runner is None and not stopping:
        try:
            runner = build(settings)
        except (CredentialError, ValueError) as e:
            if said is None:
                log.info("started; watching for the credential file %s", path)
            if str(e) != said:
                log.warning("%s; waiting for it", e)
                said = str(e)
            stop_wait(stopping, CREDENTIAL_WAIT_SECONDS)
    if runner is None:
        return 0
    runner.start()
    log.info("started; watching the payload of agent %s of node %s at %s",
             runner.host.agent, runner.host.node, runner.client.endpoint)
    while not stopping:
        time.sleep(0.2)
    runner.stop()
    return 0


def stop_wait(stopping, seconds):
    deadline = time.monotonic() + seconds
    while not stopping and time.monotonic() < deadline:
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
