"""tests/rotation.py: K consecutive commits reach every rotating test, a changed guarded path pulls its slice in, an
owed slice comes first, and the pace rule runs the gate alone on a slow day, owing the slice."""

import subprocess
import sys

import pytest

from tests import rotation
from tests.runner import ROOT


def test_k_consecutive_commits_cover_every_slice_and_k_is_at_most_4():
    assert len(rotation.SLICES) <= 4
    for start in (0, 7, 416):
        assert {rotation.rotation_slice(n) for n in range(start, start + len(rotation.SLICES))} == set(rotation.SLICES)


def test_every_extended_test_and_molecule_scenario_is_in_exactly_one_unit():
    """What the gate leaves out (pytest's own collection by marker, no hand-kept list of ids) falls in exactly one
    unit's selection: a new extended test or scenario must land in a slice."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            f"({rotation.EXTENDED}) or {rotation.MOLECULE}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    left_out = [line for line in out.splitlines() if "::" in line]
    assert len(left_out) >= 27 + 7, out[-2000:]  # the 27 extended tests and the 7 scenarios of session 31
    for test in left_out:
        units = [name for name, _, selection, _, _ in rotation.UNITS if any(test.startswith(s) for s in selection)]
        assert len(units) == 1, f"{test} is in {units or 'no unit'}: give it one slice in tests/rotation.py"


@pytest.mark.parametrize(
    ("changed", "guarded"),
    [
        (["roles/vllm_router/tasks/main.yml"], ["fleet"]),
        (["inventories/testbed-fleet-a/hosts.yml"], ["fleet"]),
        (["roles/roce_network/tasks/verify.yml"], ["quad", "node-roles"]),
        (["molecule/hf_model/converge.yml"], ["node-roles"]),
        (["README.md", "roles/vllm_routerx/x"], []),  # a name that only starts like a guarded folder
    ],
)
def test_a_changed_guarded_path_names_the_slices_that_guard_it(changed, guarded):
    assert rotation.guarding(changed) == guarded


def test_owed_slices_come_first_then_the_rotations_then_the_guarded_ones_each_once():
    ledger = {"owed": ["node-roles"]}
    assert rotation.wanted_slices(1, ledger, ["roles/vllm_router/x", "roles/hf_model/tasks/copy.yml"]) == [
        "node-roles",
        "fleet",
        "quad",
    ]


@pytest.mark.parametrize(
    ("elapsed_min", "pace", "run", "owed"),
    [
        (50, 1.0, ["fleet"], ["node-roles"]),  # an ordinary day: 50 + 25 <= 75, + 25 more would not be
        (50, 1.4, [], ["fleet", "node-roles"]),  # a slow day: the gate alone, both owed
        (20, 1.0, ["fleet", "node-roles"], []),  # room for a second slice
        (74, 0.5, [], ["fleet", "node-roles"]),
    ],
)
def test_the_pace_rule_keeps_the_projected_end_under_75_minutes(elapsed_min, pace, run, owed):
    got = rotation.fitting(["fleet", "node-roles"], elapsed_min * 60, pace, {})
    assert got == (run, owed)


def test_a_slowed_calibration_runs_the_gate_alone_and_says_which_slice_it_owes(monkeypatch):
    monkeypatch.setenv("SPARK_CI_PACE", "3")
    lines, decision = rotation.plan({}, elapsed_s=45 * 60, testbed_s=40 * 60)
    assert decision["run"] == [] and decision["owed"] == decision["wanted"] != []
    assert any("pace 3.00" in line and "runs nothing" in line and "owes" in line for line in lines), lines


def test_the_ledger_keeps_each_pass_with_its_reference_time_and_owes_skipped_and_failed_slices(tmp_path):
    ledger = rotation.record({}, ["quad"], {"fleet": (0, 1200.0), "node-roles": (1, 600.0)}, 1.5)
    assert ledger["owed"] == ["quad", "node-roles"]
    assert ledger["last_pass"]["fleet"]["reference_s"] == 800 and "node-roles" not in ledger["last_pass"]
    path = tmp_path / "ledger.json"
    rotation.write_ledger(ledger, path)
    assert rotation.read_ledger(path) == ledger
    assert rotation.estimate_s("fleet", ledger) == 800  # its own measured time replaces the table's
    assert rotation.read_ledger(tmp_path / "missing.json") == {}
