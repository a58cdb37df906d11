"""Placement (appliance/compute/placement.py): capacity with ratios, the four policy kinds,
the ranking key, and reasons that name what is short."""

from appliance.compute.placement import capacity, free, node_disk, place


def hv(uuid, cores=4, ram=8192, disk=100, status="ACTIVE", **kw):
    return {"uuid": uuid, "name": uuid, "status": status, "all_cores": cores, "all_ram": ram,
            "all_disk": disk, "cores_ratio": 1.0, "ram_ratio": 1.0, **kw}


def node(uuid, cores=1, ram=1024, size=10, hypervisor=None, policies=()):
    return {"uuid": uuid, "cores": cores, "ram": ram, "hypervisor": hypervisor,
            "disk_spec": {"kind": "root_disk", "image": "http://x/i.raw", "size": size},
            "placement_policies": list(policies)}


def policy(uuid, kind):
    return {"uuid": uuid, "name": f"pol-{kind}", "kind": kind}


def test_capacity_applies_the_ratios_but_not_to_disk():
    assert capacity(hv("a", cores=4, ram=1000, disk=50, cores_ratio=2.5, ram_ratio=1.5)) \
        == (10.0, 1500.0, 50)


def test_free_subtracts_only_nodes_placed_on_that_hypervisor():
    placed = [node("n1", cores=2, ram=2048, size=30, hypervisor="a"),
              node("n2", cores=3, hypervisor="b")]
    assert free(hv("a"), placed) == (2, 6144, 70)


def test_disks_kind_sums_every_disk():
    n = {"disk_spec": {"kind": "disks", "disks": [{"size": 5, "image": "x"}, {"size": 7}]}}
    assert node_disk(n) == 12


def test_spreads_by_free_ram_then_breaks_ties_by_uuid():
    hvs = [hv("a"), hv("b")]
    assert place(node("n"), hvs, [], {}) == ("a", None)
    assert place(node("n"), hvs, [node("x", ram=2048, hypervisor="a")], {}) == ("b", None)


def test_overcommit_ratio_makes_room():
    n = node("n", cores=6)
    assert place(n, [hv("a", cores=4)], [], {})[0] is None
    assert place(n, [hv("a", cores=4, cores_ratio=2.0)], [], {}) == ("a", None)


def test_only_active_hypervisors_take_nodes():
    assert place(node("n"), [hv("a", status="ERROR")], [], {}) == (None, "no ACTIVE hypervisor")


def test_reason_names_each_resource_that_is_short():
    hvs = [hv("a", cores=2, ram=4096, disk=100), hv("b", cores=1, ram=2048, disk=5)]
    where, reason = place(node("n", cores=3, ram=1024, size=200), hvs, [], {})
    assert where is None
    assert "cores (needs 3, at most 2 free)" in reason
    assert "disk (needs 200 GB, at most 100 GB free)" in reason
    assert "RAM" not in reason
    where, reason = place(node("n", ram=9000, size=5), hvs, [], {})
    assert reason == "no hypervisor has enough RAM (needs 9000 MB, at most 4096 MB free)"


def test_used_capacity_counts_towards_the_reason():
    placed = [node("x", cores=4, hypervisor="a")]
    assert place(node("n"), [hv("a")], placed, {}) == (
        None, "no hypervisor has enough cores (needs 1, at most 0 free)")


def test_hard_anti_affinity_excludes_and_names_the_policy():
    pol = policy("p", "hard-anti-affinity")
    placed = [node("x", hypervisor="a", policies=["p"])]
    assert place(node("n", policies=["p"]), [hv("a"), hv("b")], placed, {"p": pol}) == ("b", None)
    placed.append(node("y", hypervisor="b", policies=["p"]))
    where, reason = place(node("n", policies=["p"]), [hv("a"), hv("b")], placed, {"p": pol})
    assert where is None and "'pol-hard-anti-affinity' (hard-anti-affinity)" in reason


def test_hard_affinity_follows_the_group_and_fails_when_its_host_is_full():
    pol = policy("p", "hard-affinity")
    hvs = [hv("a", cores=2), hv("b", cores=8)]
    # no member placed yet: any hypervisor, ranked as usual
    assert place(node("n", policies=["p"]), hvs, [], {"p": pol}) == ("b", None)
    placed = [node("x", hypervisor="a", policies=["p"])]
    assert place(node("n", policies=["p"]), hvs, placed, {"p": pol}) == ("a", None)
    placed.append(node("y", hypervisor="a", policies=["p"]))
    where, reason = place(node("n", policies=["p"]), hvs, placed, {"p": pol})
    assert where is None and "(hard-affinity)" in reason


def test_soft_anti_affinity_prefers_the_emptier_host_but_never_refuses():
    pol = policy("p", "soft-anti-affinity")
    # b has less free RAM, but a holds a member of the group: b wins
    placed = [node("x", ram=512, hypervisor="a", policies=["p"]),
              node("z", ram=4096, hypervisor="b")]
    assert place(node("n", policies=["p"]), [hv("a"), hv("b")], placed, {"p": pol}) == ("b", None)
    placed.append(node("y", ram=512, hypervisor="b", policies=["p"]))
    # both hold one member: back to free RAM
    assert place(node("n", policies=["p"]), [hv("a"), hv("b")], placed, {"p": pol}) == ("a", None)


def test_soft_affinity_packs_with_the_group():
    pol = policy("p", "soft-affinity")
    placed = [node("x", ram=4096, hypervisor="b", policies=["p"])]
    assert place(node("n", policies=["p"]), [hv("a"), hv("b")], placed, {"p": pol}) == ("b", None)
    # packing never overrides capacity
    full = [node("x", cores=4, hypervisor="b", policies=["p"])]
    assert place(node("n", policies=["p"]), [hv("a"), hv("b")], full, {"p": pol}) == ("a", None)


def test_the_node_itself_never_counts_against_its_own_placement():
    me = node("n", cores=4, hypervisor="a")
    assert place(me, [hv("a")], [me], {}) == ("a", None)
