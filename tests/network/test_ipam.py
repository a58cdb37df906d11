"""IPAM, pure: layouts, the lowest free address, project cidrs, cidr rules, settings."""

import pytest

from appliance import config
from appliance.network import ipam


def test_layout_of_the_platform_network():
    assert ipam.layout("10.20.0.0/22") == {
        "cidr": "10.20.0.0/22", "mask": "255.255.252.0", "prefix": 22,
        "gateway": "10.20.0.1", "dns": "10.20.0.2", "dhcp_start": "10.20.0.20",
        "dhcp_end": "10.20.3.254"}
    assert ipam.lease_count(ipam.layout("10.20.0.0/22")) == 1024 - 20 - 1


@pytest.mark.parametrize("cidr, start, end, count", [
    ("10.32.7.0/24", "10.32.7.20", "10.32.7.254", 235),
    ("192.168.4.32/27", "192.168.4.52", "192.168.4.62", 11),
    # under a /27, .20 would leave too few leases or fall outside: leases follow the DNS
    ("172.16.0.16/28", "172.16.0.19", "172.16.0.30", 12),
    ("10.1.2.8/29", "10.1.2.11", "10.1.2.14", 4),
])
def test_lease_range_keeps_network_gateway_dns_and_broadcast_out(cidr, start, end, count):
    lay = ipam.layout(cidr)
    assert (lay["dhcp_start"], lay["dhcp_end"], ipam.lease_count(lay)) == (start, end, count)
    first = cidr.split("/")[0].rsplit(".", 1)
    assert lay["gateway"] == f"{first[0]}.{int(first[1]) + 1}"
    assert lay["dns"] == f"{first[0]}.{int(first[1]) + 2}"


def test_lowest_free_fills_holes_first_and_ends_at_none():
    lay = ipam.layout("10.1.2.8/29")
    assert ipam.lowest_free(lay, []) == "10.1.2.11"
    assert ipam.lowest_free(lay, ["10.1.2.11", "10.1.2.13"]) == "10.1.2.12"
    # addresses outside the range (an old port, the gateway) change nothing
    assert ipam.lowest_free(lay, ["10.1.2.9", "10.1.2.11", "10.1.2.12"]) == "10.1.2.13"
    assert ipam.lowest_free(lay, ["10.1.2.11", "10.1.2.12", "10.1.2.13", "10.1.2.14"]) is None


def test_project_cidr_skips_taken_and_overlapping_networks():
    pool = "10.32.0.0/12"
    assert ipam.project_cidr(pool, 24, []) == "10.32.0.0/24"
    assert ipam.project_cidr(pool, 24, ["10.32.0.0/24", "10.32.1.0/24"]) == "10.32.2.0/24"
    # a hole is reused; a larger network and a small one inside the next /24 are skipped
    assert ipam.project_cidr(pool, 24, ["10.32.1.0/24"]) == "10.32.0.0/24"
    assert ipam.project_cidr(pool, 24, ["10.32.0.0/23", "10.32.2.64/29",
                                        "10.20.0.0/22"]) == "10.32.3.0/24"
    assert ipam.project_cidr(pool, 24, ["10.32.0.0/16"]) == "10.33.0.0/24"


def test_project_cidr_of_a_full_pool_is_none():
    assert ipam.project_cidr("10.32.0.0/23", 24, ["10.32.0.0/24", "10.32.1.0/24"]) is None
    assert ipam.project_cidr("10.32.0.0/23", 24, ["10.32.0.0/23"]) is None


@pytest.mark.parametrize("cidr, words", [
    ("10.32.0.0/30", "too small"),
    ("10.32.0.0/32", "too small"),
    ("8.8.8.0/24", "not a private network"),
    ("100.64.0.0/24", "not a private network"),
    ("127.0.0.0/24", "not a private network"),
    ("10.32.0.1/24", "the network is 10.32.0.0/24"),
    ("10.32.0.0", "no prefix length"),
    ("10.32.0.0/33", "not an IPv4 network"),
    ("fd00::/64", "not an IPv4 network"),
    ("ten/24", "not an IPv4 network"),
    ("", "not an IPv4 network"),
    (24, "must be a string"),
])
def test_bad_cidrs_name_the_rule(cidr, words):
    with pytest.raises(ValueError, match=words):
        ipam.parse_cidr(cidr)


def test_overlapping_names_the_network_met():
    assert ipam.overlapping("10.32.0.0/24", ["10.0.0.0/24", "10.32.0.128/25"]) == \
        "10.32.0.128/25"
    assert ipam.overlapping("10.32.0.0/24", ["10.32.1.0/24"]) is None


@pytest.mark.parametrize("key, value, words", [
    ("platform_network", "1.2.3.0/24", "platform_network: 1.2.3.0/24 is not a private"),
    ("project_networks", "10.32.0.0/30", "project_networks: 10.32.0.0/30 is too small"),
    ("project_network_prefix", "8", "project_network_prefix: 8 must be between 12"),
    ("project_network_prefix", "30", "project_network_prefix: 30 must be between 12"),
    ("project_networks", "10.20.0.0/16", "overlaps"),
    ("network_routing", "bridged", "network_routing: 'bridged' is not one of"),
])
def test_bad_network_settings_stop_the_start(key, value, words):
    with pytest.raises(config.ConfigError, match=words):
        config.load(environ={f"APPLIANCE_{key.upper()}": value})


def test_network_settings_from_the_environment():
    settings = config.load(environ={"APPLIANCE_NETWORK_ROUTING": "isolated",
                                    "APPLIANCE_PROJECT_NETWORK_PREFIX": "26"})
    assert settings["network_routing"] == "isolated"
    assert settings["project_network_prefix"] == 26
    assert settings["platform_network"] == "10.20.0.0/22"
