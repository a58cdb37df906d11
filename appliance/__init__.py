"""appliance: a small private cloud on one box."""

__version__ = "0.1.0"
API_VERSIONS = ["v1"]
