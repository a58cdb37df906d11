"""Agent daemon: will render configs onto this node's data plane.

So far it only follows changes to configs; rendering comes in a later issue.
"""

import sys

from daemons.base import Daemon, run


class Agent(Daemon):
    name = "agent"
    kinds = ("config_configs",)


def main():
    return run(Agent)


if __name__ == "__main__":
    sys.exit(main())
