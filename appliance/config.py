"""Settings: defaults < config file (YAML) < APPLIANCE_* variables < command-line flags.

Every key of DEFAULTS can be set in the file under its own name and overridden by the
variable APPLIANCE_<KEY IN CAPITALS> (so `api_port` by `APPLIANCE_API_PORT`).
"""

import os

from appliance.backup_schedule import ScheduleError, parse_schedule
from appliance.capabilities import settings as capability_settings
from appliance.capabilities import settings_checks as capability_settings_checks
from appliance.capability import load as load_attribute
from appliance.tenancy.quotas import setting_defaults as quota_defaults

DEFAULT_CONFIG_FILE = "/etc/appliance/appliance.yaml"
OUTSIDE = "allowed_outside_networks"

DEFAULTS = {
    "state_dir": "./var",
    "api_host": "127.0.0.1",
    "api_port": 11010,
    # request threads; agents' long polls and event streams wait on the API's event loop,
    # not in one of these (docs/long-lived.md)
    "api_threads": 32,
    # connections held open at once, idle ones included; past it new ones wait in the
    # listen backlog (docs/server.md: why 1000, and the descriptor limit)
    "api_connection_limit": 1000,
    "api_channel_timeout": 30.0,        # seconds a connection may stay silent
    # floods (docs/server.md, "Floods"): connections one address may hold (0: no cap; the
    # image's nginx is the API's only address), seconds a request's header may take from
    # its first byte, seconds a connection with no request in hand is kept
    "api_connections_per_address": 100,
    "api_header_timeout": 10.0,
    "api_idle_timeout": 10.0,
    "dns_host": "127.0.0.1",
    "dns_port": 5353,
    "admin_password": None,
    "max_body_bytes": 1024 * 1024,
    "max_upload_bytes": 32 * 1024 * 1024,
    # YAML bodies (manifests): checked before parsing; PyYAML's pure-Python parser
    # takes seconds a MiB (docs/validation.md)
    "max_yaml_bytes": 1024 * 1024,
    "token_ttl": 3600,
    "refresh_token_ttl": 86400,
    # password login throttling (docs/iam.md): failures free per key, then a wait that
    # doubles from login_first_delay up to the key's bound; failures are forgotten after
    # login_failure_memory seconds without one
    "login_free_failures_address": 20,
    "login_free_failures_user": 5,
    "login_first_delay": 1.0,
    "login_max_delay_address": 900.0,
    "login_max_delay_user": 60.0,
    "login_failure_memory": 3600.0,
    "realm_uuid": None,
    "mirror_url": None,
    "mirror_username": None,
    "mirror_password": None,
    "mirror_scope": None,               # project:<uuid> to scope the mirror's token
    "mirror_resync_seconds": 60.0,
    "mirror_retry_max_seconds": 60.0,
    "mirror_filter_retry_seconds": 3600.0,  # a refused tag filter is tried again after this
    "repo_url": None,
    # tags on DNS records: full (stored, filterable with q=tags:"..."), no_filter (stored,
    # q refused: an older upstream), none (no tags at all)
    "dns_tags": "full",
    # zones (comma-separated) reserved for the platform besides sqldb_zone: no project may
    # create them, nor a parent or child of them (docs/security.md, "DNS zones have one owner")
    "platform_zones": "",
    "log_level": "INFO",
    # false: the API process leaves the state's preparation (migrations, seeds) to whoever
    # ran bootstrap before it, and only refuses a state not at its schema version; the
    # image's API unit sets it, first boot having bootstrapped at this very boot
    # (docs/appliance-image.md, "Boot time")
    "api_bootstrap": True,
    # image part (issue 12, boot time): a file the API waits for before it opens the state,
    # loading its code meanwhile; the image's unit names first boot's mark of this boot,
    # so that the API's Python start runs beside first boot instead of after it
    "api_wait_for": None,
    # scheduled backups (docs/backup.md): off while backup_schedule is unset
    "backup_schedule": None,            # "daily at 03:00", "every 30 minutes", "every 6 hours"
    "backup_dir": None,                 # where they go (required with a schedule)
    "backup_keep": 7,                   # how many are kept; older ones are removed
    # the audit trail (docs/audit.md): its segments together stay under audit_max_bytes,
    # a segment's entries are kept audit_retention_days after its last one, and a new
    # segment starts past audit_segment_bytes (the unit that pruning removes)
    "audit_max_bytes": 256 * 1024 * 1024,
    "audit_retention_days": 90.0,
    "audit_segment_bytes": 8 * 1024 * 1024,
    # the store's change feed (docs/events.md): how many entries and how many seconds of
    # writes it keeps at least; a reader further behind is told to resync
    "feed_keep_entries": 100000,
    "feed_keep_seconds": 604800.0,
    # GET /v1/events (docs/events.md, docs/long-lived.md): at most this many streams at
    # once (one more gets 503 + Retry-After). On the API's event loop a stream holds no
    # thread (None: 1000); on a server without the hand-over each holds one (None: 4, and
    # never more than api_threads - 1); a comment every heartbeat
    "events_max_streams": None,
    "events_heartbeat_seconds": 15.0,
    # networks (docs/network.md): the admin project's default network, the pool that other
    # projects' default networks are cut from, and the routing of a new network
    "platform_network": "10.20.0.0/22",
    "project_networks": "10.32.0.0/12",
    "project_network_prefix": 24,
    "network_routing": "nat",           # nat | isolated (tests use isolated)
    # ---- node agents (docs/agent.md); the agent part of issue 14 ----
    # API side: the share of api_threads that payload long polls may hold at once where
    # they hold one (a WSGI server without the hand-over, docs/long-lived.md; a poll over
    # it is answered at once with Retry-After), and an enrollment token's lifetime
    "agent_poll_share": 0.75,
    # payload long polls waiting at once on the API's event loop (no thread each;
    # docs/long-lived.md); one more is answered at once with Retry-After
    "agent_max_polls": 10000,
    "agent_enroll_ttl": 3600,
    # the API's URL as a VM node sees it, written into its seed (None: the node's network
    # gateway on api_port, docs/agent.md)
    "agent_endpoint": None,
    # node side (daemons/agent.py): the credential file, the prefix of every path the
    # drivers write (a test's HW "node"), the absolute paths inside it they may touch
    # (comma-separated), the agent's own state, and a poll's wait in seconds
    "agent_credential_file": "/etc/appliance/agent.json",
    "agent_root": "/",
    "agent_allowed_roots": "/etc,/opt,/srv,/var/lib,/home,/root,/usr/local",
    "agent_state_dir": "/var/lib/appliance/agent",
    "agent_poll_wait": 25.0,
    # `appliance up` (make run) enrolls a development node of its own, its agent writing
    # under <state_dir>/node (docs/dev-node.md); the image never runs `appliance up`
    "dev_node": True,
    # services (the service part of issue 14, docs/services.md): how long a monopoly
    # service's lease lasts; its agent renews it every third of that
    "service_lease_seconds": 10.0,
    # tenant isolation (docs/security.md, "Addresses a project may reach"): networks
    # outside every project network that projects' LB pools and fetches (image,
    # repository and archive URLs) may reach; a YAML list or comma-separated CIDRs.
    # Other projects' networks and the appliance's addresses on its networks stay refused
    "allowed_outside_networks": "",
    # ---- certificates through ACME DNS-01 (docs/certificates.md) ----
    # the ACME directory and the CA bundle that its TLS is checked with (None: the
    # system's); tests point both at Pebble
    "acme_directory_url": "https://acme-v02.api.letsencrypt.org/directory",
    "acme_ca_bundle": None,
    # how long our DNS server may take to answer a challenge, and the ACME order to finish
    "acme_dns_wait_seconds": 30.0,
    "acme_order_timeout_seconds": 90.0,
    # a failed issuance is tried again after this, doubling up to the max (Let's Encrypt
    # allows 5 failed validations per name and hour)
    "acme_retry_first_seconds": 60.0,
    "acme_retry_max_seconds": 21600.0,
    # ---- what each capability declares (its descriptor's settings: appliance/<capability>/
    # __init__.py, read through appliance/capabilities.py) ----
    **capability_settings(),
    # ---- quotas per project (docs/quotas.md): quota_<name>, declared with what each
    # counts and why in appliance/tenancy/quotas.py; a negative value is no limit ----
    **quota_defaults(),
}


class ConfigError(Exception):
    pass


def _coerce(key, value):
    default = DEFAULTS[key]
    if value is None or default is None or isinstance(value, type(default)):
        return value
    if isinstance(default, bool):
        return str(value).lower() in ("1", "true", "yes", "on")
    if isinstance(default, float):
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key} must be a number, not {value!r}") from None
    if isinstance(default, int):
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key} must be an integer, not {value!r}") from None
    return str(value)


def load(config_file=None, environ=None, overrides=None):
    """The effective settings as a dict. `overrides` are command-line values (None = unset)."""
    environ = os.environ if environ is None else environ
    settings = dict(DEFAULTS)
    path = config_file or environ.get("APPLIANCE_CONFIG")
    if path is None and os.path.exists(DEFAULT_CONFIG_FILE):
        path = DEFAULT_CONFIG_FILE
    if path:
        # Imported here: every process loads settings, few have a config file to parse.
        import yaml  # noqa: PLC0415
        try:
            with open(path) as f:
                loaded = yaml.safe_load(f) or {}
        except OSError as e:
            raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {path} is not valid YAML: {e}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping")
        unknown = sorted(set(loaded) - set(DEFAULTS))
        if unknown:
            raise ConfigError(f"unknown keys in {path}: {', '.join(unknown)}")
        settings.update(loaded)
    if isinstance(settings.get(OUTSIDE), (list, tuple)):
        settings[OUTSIDE] = ",".join(str(n) for n in settings[OUTSIDE])
    for key in DEFAULTS:
        var = "APPLIANCE_" + key.upper()
        if environ.get(var) not in (None, ""):
            settings[key] = environ[var]
    for key, value in (overrides or {}).items():
        if value is not None:
            settings[key] = value
    settings = {k: _coerce(k, v) for k, v in settings.items()}
    settings["state_dir"] = os.path.abspath(settings["state_dir"])
    _check_backup(settings)
    _check_capabilities(settings)
    _check_audit(settings)
    _check_feed(settings)
    _check_outside(settings)
    return settings


def _check_outside(settings):
    from appliance.tenancy.addresses import parse_networks  # noqa: PLC0415 (small, pure)
    try:
        nets = parse_networks(settings[OUTSIDE])
    except ValueError as e:
        raise ConfigError(str(e)) from None
    settings[OUTSIDE] = ",".join(str(n) for n in nets)


def _check_capabilities(settings):
    """Each capability checks its own settings (its descriptor's check_settings)."""
    for check in capability_settings_checks():
        try:
            load_attribute(check)(settings)
        except ValueError as e:
            raise ConfigError(str(e)) from None


def _check_audit(settings):
    segment, total = settings["audit_segment_bytes"], settings["audit_max_bytes"]
    if segment < 4096:
        raise ConfigError(f"audit_segment_bytes must be 4096 or more, not {segment}")
    if total < segment:
        raise ConfigError(f"audit_max_bytes ({total}) must be at least audit_segment_bytes "
                          f"({segment}): the trail keeps its current segment whole")
    if not settings["audit_retention_days"] > 0:
        raise ConfigError("audit_retention_days must be more than 0, not "
                          f"{settings['audit_retention_days']}")


def _check_feed(settings):
    if settings["feed_keep_entries"] < 100:
        raise ConfigError("feed_keep_entries must be 100 or more (the change feed's "
                          f"window), not {settings['feed_keep_entries']}")
    streams = settings["events_max_streams"]
    if streams is not None:
        try:
            settings["events_max_streams"] = streams = int(streams)
        except (TypeError, ValueError):
            raise ConfigError(f"events_max_streams must be an integer, not {streams!r}") \
                from None
    if streams is not None and not streams >= 0:
        raise ConfigError(f"events_max_streams must be 0 or more, not {streams}")
    if settings["agent_max_polls"] < 0:
        raise ConfigError(f"agent_max_polls must be 0 or more, not {settings['agent_max_polls']}")
    if settings["events_heartbeat_seconds"] <= 0:
        raise ConfigError("events_heartbeat_seconds must be above 0")
    if settings["feed_keep_seconds"] < 60:
        raise ConfigError("feed_keep_seconds must be 60 or more (the change feed's "
                          f"window), not {settings['feed_keep_seconds']}")


def _check_backup(settings):
    if settings["backup_keep"] < 1:
        raise ConfigError(f"backup_keep must be 1 or more, not {settings['backup_keep']}")
    if settings["backup_schedule"] is None:
        return
    try:
        parse_schedule(settings["backup_schedule"])
    except ScheduleError as e:
        raise ConfigError(str(e)) from None
    if not settings["backup_dir"]:
        raise ConfigError("backup_dir: where scheduled backups go; required with "
                          "backup_schedule")
    settings["backup_dir"] = os.path.abspath(settings["backup_dir"])
