"""The setting `allowed_outside_networks`: a YAML list or comma-separated CIDRs, from the
file or APPLIANCE_ALLOWED_OUTSIDE_NETWORKS; a bad entry stops the start naming it."""

import pytest

from appliance import config


def test_from_a_yaml_list_and_from_the_variable(tmp_path):
    path = tmp_path / "appliance.yaml"
    path.write_text("allowed_outside_networks:\n  - 198.51.100.0/24\n  - 192.0.2.7\n")
    loaded = config.load(str(path), environ={})
    assert loaded["allowed_outside_networks"] == "198.51.100.0/24,192.0.2.7/32"
    loaded = config.load(str(path), environ={
        "APPLIANCE_ALLOWED_OUTSIDE_NETWORKS": "127.0.0.0/8"})
    assert loaded["allowed_outside_networks"] == "127.0.0.0/8"
    assert config.load(environ={})["allowed_outside_networks"] == ""


def test_a_bad_entry_is_refused_by_name():
    with pytest.raises(config.ConfigError, match="allowed_outside_networks: 'x.y' is not"):
        config.load(environ={"APPLIANCE_ALLOWED_OUTSIDE_NETWORKS": "10.0.0.0/8, x.y"})
