"""Compute daemon: will reconcile compute nodes with libvirt. Named "compute" rather than
"libvirt" so that the module never shadows the libvirt package it will import.

So far it only follows changes to the nodes; the libvirt logic comes in a later issue.
"""

import sys

from daemons.base import Daemon, run


class Compute(Daemon):
    name = "compute"
    kinds = ("compute_nodes",)


def main():
    return run(Compute)


if __name__ == "__main__":
    sys.exit(main())
