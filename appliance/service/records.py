"""What a service record means, read by the API (`resources.py`) and the producer
(`targets.py`): kept out of the package's `__init__`, which imports `resources.py` to
register it, so that no module of the package imports the package back.
"""

KIND = "em_services"
MONOPOLY_KINDS = ("monopoly", "monopoly_oneshot")
# two independent axes, as systemd has them: (enabled at boot, running now)
TARGET_STATUSES = {"enabled": (True, True), "disabled": (False, False),
                   "started": (False, True), "stopped": (True, False)}
