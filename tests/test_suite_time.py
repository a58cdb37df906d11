"""The run's time by directory (tests/suite_time.py), as its summary prints it."""

from tests import suite_time


def test_a_test_counts_for_its_directory_under_tests_and_a_top_level_file_for_itself():
    assert suite_time._directory("tests/image/test_image.py::test_x[a/b]") == "tests/image"
    assert suite_time._directory("tests/test_house.py::test_y") == "tests/test_house.py"


def test_the_summary_ranks_directories_by_time_and_sums_the_rest():
    spent = {f"tests/d{i}": float(i) for i in range(1, 16)}
    tests = {f"tests/d{i}": {f"tests/d{i}/t.py::t{j}" for j in range(i)} for i in range(1, 16)}
    busy = {"tests/d15": (22.5, 15.0)}                       # 1.5 cores over its 15 s
    out = suite_time.lines(spent, tests, wall=120.0, busy=busy)
    assert out[0].startswith("time by directory") and "2.0 min" in out[0]
    shown = out[1:1 + suite_time.SHOWN]
    assert [line.split()[-1] for line in shown] == [f"tests/d{i}" for i in range(15, 3, -1)]
    assert "15 tests" in shown[0] and "12%" in shown[0]     # 15 s of a 120 s run
    assert "1.5 cores" in shown[0] and "- cores" in shown[1]
    # d1..d3: 6 s and 6 tests, in one line
    assert out[-1].split()[-3:] == ["3", "other", "directories"] and " 6 tests" in out[-1]
    assert len(out) == 2 + suite_time.SHOWN


def test_the_machine_s_busy_time_only_grows():
    first = suite_time._busy_seconds()
    sum(i * i for i in range(200000))
    assert first is not None and suite_time._busy_seconds() >= first
