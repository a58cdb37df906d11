"""Where first boot reads and writes, all under one root so that tests point it at a
temporary directory (the fake fw_cfg, /etc, /run and /root are then plain directories)."""

import os
from dataclasses import dataclass

FW_CFG_DIR = "sys/firmware/qemu_fw_cfg/by_name"


@dataclass(frozen=True)
class Paths:
    root: str = "/"
    # a NoCloud seed already mounted (tests); None: look for a block device labelled cidata
    seed_dir: str | None = None
    # where the banner goes besides stdout (which the unit sends to the console)
    console: str | None = None

    def at(self, *parts):
        return os.path.join(self.root, *parts)

    @property
    def fw_cfg(self):
        return self.at(FW_CFG_DIR)

    @property
    def seed_labels(self):
        return [self.at("dev/disk/by-label", label) for label in ("cidata", "CIDATA")]

    @property
    def nginx_sites(self):
        return self.at("etc/nginx/sites-enabled")

    @property
    def etc_ssh(self):
        return self.at("etc/ssh")

    @property
    def agent_credential(self):
        """The appliance's own node agent's credential (daemons/agent.py reads it)."""
        return self.at("etc/appliance/agent.json")

    @property
    def root_ssh(self):
        return self.at("root/.ssh")

    @property
    def issue_dir(self):
        return self.at("etc/issue.d")

    @property
    def done_mark(self):
        """Made once the state is prepared and handed over at this boot (/run is a tmpfs):
        the API's unit waits for it (api_wait_for) instead of starting after first boot."""
        return self.at("run/appliance/firstboot-done")

    @property
    def systemd_runtime(self):
        return self.at("run/systemd/system")

    @property
    def libvirt_socket(self):
        return self.at("run/libvirt/libvirt-sock")

    @property
    def build_info(self):
        return self.at("etc/appliance/build-info.json")
