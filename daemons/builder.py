"""Builder daemon: will fetch repository elements and build what manifests install.

So far it only follows changes to its kinds; the build logic comes in a later issue.
"""

import sys

from daemons.base import Daemon, run


class Builder(Daemon):
    name = "builder"
    kinds = ("em_manifests", "repo_repositories", "repo_elements")


if __name__ == "__main__":
    sys.exit(run(Builder))
