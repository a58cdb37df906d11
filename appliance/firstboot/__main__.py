"""`python -m appliance.firstboot`: what appliance-firstboot.service runs."""

import os
import subprocess
import sys

from appliance import config, logs
from appliance.firstboot import Paths, run


def main():
    paths = Paths()
    # It rewrites /etc/ssh's host keys, root's authorized keys and nginx's sites: only
    # ever on the image, which the build marks with its build-info file.
    if not os.path.exists(paths.build_info):
        print(f"not an appliance image ({paths.build_info} is missing): nothing done",
              file=sys.stderr)
        return 2
    settings = config.load()
    log = logs.setup("firstboot", settings["log_level"])
    if not os.path.isdir(paths.fw_cfg):
        # udev loads it when QEMU offers fw_cfg; this boot may be ahead of udev
        subprocess.run(["modprobe", "-q", "qemu_fw_cfg"], capture_output=True, timeout=60)
    try:
        run(settings, paths)
    except Exception:
        log.exception("first boot failed: the appliance's units do not start")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
