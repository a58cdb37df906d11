"""Mirror daemon: will keep domains marked `sync_to_ecosystem` in step with the upstream
DNS API (APPLIANCE_MIRROR_URL).

So far it only follows changes to the domains; the sync logic comes in a later issue.
"""

import sys

from daemons.base import Daemon, run


class Mirror(Daemon):
    name = "mirror"
    kinds = ("dns_domains",)


if __name__ == "__main__":
    sys.exit(run(Mirror))
