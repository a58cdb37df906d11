"""Issue 28's goals that are reached, held by the instrument that measures them
(tests/house_counts.py, `make house`): one list wires the capabilities in, and one function
replaces whole files on a node."""

from tests.house_counts import (WIRING, file_writers, files_naming, node_side_files,
                                read_floors, sort_writers)


def test_only_the_one_list_wires_a_capability_in():
    capabilities = [r.path.split("/")[1] for r in read_floors() if r.group == "capabilities"]
    wiring = {rel for by in files_naming(capabilities).values() for rel in by[WIRING]
              if rel.endswith(".py")}
    # units and the image recipe name the daemons they run; Python names none but the list
    assert wiring == {"appliance/capabilities.py"}, (
        "name the capability in its descriptor (appliance/capability.py) instead: "
        f"{sorted(wiring - {'appliance/capabilities.py'})}")


def test_one_whole_file_writer_on_the_node():
    whole, _, stale = sort_writers(file_writers(node_side_files()))
    assert [w.split(":")[0] + " " + w.split(" ", 1)[1] for w in whole] == \
        ["appliance/files.py _replace"], "write whole files with appliance.files.write_file"
    assert not stale, f"gone: remove them from NOT_WHOLE_FILE in tests/house_counts.py: {stale}"
