"""Delivery daemon: will place the effective values of secrets under
<state-dir>/data-plane/.

So far it only follows changes to secrets; delivery comes in a later issue.
"""

import sys

from daemons.base import Daemon, run


class Delivery(Daemon):
    name = "delivery"
    kinds = ("secret_secrets",)


if __name__ == "__main__":
    sys.exit(run(Delivery))
