"""DNS daemon: will serve the zones of dns_domains and dns_records on dns_host:dns_port.

So far it only follows changes to them; the server comes in a later issue.
"""

import sys

from daemons.base import Daemon, run


class DNS(Daemon):
    name = "dns"
    kinds = ("dns_domains", "dns_records")


if __name__ == "__main__":
    sys.exit(run(DNS))
