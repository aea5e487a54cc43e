"""The CI rotation: every test `make test`'s gate leaves out (the extended test-bed suite, the Molecule scenarios)
belongs to one of K slices, and each CI run adds one slice after the gate, so that K consecutive runs reach every
test (docs/tests.md, "The rotation"). Pure decisions here; tests/tiers.py runs them.

- Which slice: the one the commit history's length picks (`git rev-list --count HEAD` modulo K), unless a slice is
  owed (an earlier run skipped it for pace; the machine's ledger remembers), and every slice guarding a path the
  submission changed since the last run the ledger knows.
- Whether at all: only while the projected end stays under PROJECTED_END_LIMIT_S, from the time CI has taken so far
  and each slice's measured time scaled by this run's pace (the gate's test-bed tier against its reference time);
  otherwise the gate runs alone, says so, and the ledger owes the slice to the next run.
- When each test last passed: the ledger (outside the clone, on the machine CI runs on) keeps each unit's last pass
  (commit, date, seconds); CI prints it first and last, `python tests/tiers.py --plan` prints it without running.
"""

import json
import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEDGER = Path(os.environ.get("SPARK_CI_LEDGER", "/var/lib/spark-serve-ci/rotation.json"))
PROJECTED_END_LIMIT_S = 75 * 60  # CI's hard limit is 90 min; the rest is the margin of a slow day
REFERENCE_TESTBED_S = 45 * 60  # the gate's test-bed tier on an ordinary day (session 31: 45:06)
EXTENDED = "testbed and extended and not molecule"
MOLECULE = "molecule"

# A unit is what one pytest selection runs: (name, marker, selection, seconds at the reference pace, the paths whose
# change it guards). The seconds come from session 31's figures on two busy cores (`make test-extended`: the 27
# extended tests in 65 min 27 s, the fleet's rolling update 765 s and first starts 425 s, the quad's first start 390 s;
# `make molecule` 10 to 24 min; the image and model faults about 8); once a unit passes in CI the ledger keeps its own.
PAIR_EXTRA_TESTS = [
    "tests/testbed/test_engine_paths.py::test_status_reports_a_container_edited_by_hand_and_deploy_restores_its_policy",
    "tests/testbed/test_release.py::test_a_rejected_deploy_is_rolled_back_and_both_records_stay",
    "tests/testbed/test_service.py::test_stale_containers_and_port_squatters_are_replaced_and_the_start_warms_up",
    "tests/testbed/test_service.py::test_a_deploy_stops_a_running_auto_restart_and_leaves_no_trip_behind",
    "tests/testbed/test_service.py::test_a_pair_whose_nodes_both_lost_power_serves_again_without_a_playbook_run",
    "tests/testbed/test_service.py::test_a_stall_mid_start_is_found_within_30_s_blaming_the_right_node",
    "tests/testbed/test_service_single.py",
]
UNITS = [
    (
        "quad",
        EXTENDED,
        ["tests/testbed/test_service_quad.py"],
        20 * 60,
        [
            "inventories/testbed-quad",
            "roles/roce_network",
            "roles/fabric_firewall",
            "roles/hf_model/tasks/copy.yml",
            "module_utils/hybrid_block.py",
            "module_utils/engine_block_rules.py",
            "module_utils/roce_checks.py",
        ],
    ),
    (
        "fleet",
        EXTENDED,
        ["tests/testbed/test_fleet.py"],
        25 * 60,
        [
            "inventories/testbed-fleet",
            "roles/vllm_router",
            "roles/front_door",
            "playbooks/fleet.yml",
            "playbooks/vars/fleet.yml",
            "library/vllm_fleet.py",
            "module_utils/fleet_rollout.py",
            "module_utils/router_checks.py",
        ],
    ),
    (
        "pair-extra",
        EXTENDED,
        PAIR_EXTRA_TESTS,
        15 * 60,
        [
            "inventories/testbed-single",
            "roles/vllm_service/files",
            "roles/vllm_service/templates",
            "roles/vllm_release",
            "action_plugins/vllm_staged_start.py",
            "module_utils/rank_watch.py",
            "module_utils/rank_commands.py",
        ],
    ),
    (
        "node-roles",
        f"{MOLECULE} or ({EXTENDED})",
        ["tests/testbed/test_molecule.py", "tests/testbed/test_image_and_model.py"],
        25 * 60,
        [
            "molecule",
            "roles/spark_preflight",
            "roles/nvidia_driver",
            "roles/container_toolkit",
            "roles/roce_network",
            "roles/fabric_firewall",
            "roles/engine_image",
            "roles/hf_model",
        ],
    ),
]
SLICES = [unit[0] for unit in UNITS]  # one unit a slice: each fits the rotation's room beside the gate


def unit(name):
    return next(u for u in UNITS if u[0] == name)


def git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()


def read_ledger(path=LEDGER):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def write_ledger(ledger, path=LEDGER):
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(ledger, indent=2, sort_keys=True) + "\n")
    temporary.replace(path)


def rotation_slice(commit_count):
    """The slice the commit history's length picks: K consecutive commits cover every slice."""
    return SLICES[commit_count % len(SLICES)]


def guarding(changed_paths):
    """Every slice that guards one of the changed paths (a path guarded by a folder is under it)."""

    def guards(prefix, path):
        return path == prefix or path.startswith(prefix.rstrip("/") + "/") or path.startswith(prefix + "-")

    return [name for name, _, _, _, paths in UNITS if any(guards(p, c) for p in paths for c in changed_paths)]


def wanted_slices(commit_count, ledger, changed_paths):
    """In order: what an earlier run owes, the rotation's pick, then the slices the change touches (each once)."""
    order = [*ledger.get("owed", []), rotation_slice(commit_count), *guarding(changed_paths)]
    return [name for i, name in enumerate(order) if name in SLICES and name not in order[:i]]


def estimate_s(name, ledger):
    """A slice's time at the reference pace: its last measured time in the ledger, else the table's."""
    measured = ledger.get("last_pass", {}).get(name, {})
    return measured.get("reference_s") or unit(name)[3]


def pace(testbed_s):
    """How slowly this machine runs today against the reference (1.0: an ordinary day); SPARK_CI_PACE overrides it
    (a slowed calibration, to see the rule act)."""
    forced = os.environ.get("SPARK_CI_PACE")
    return float(forced) if forced else max(testbed_s / REFERENCE_TESTBED_S, 0.5)


def fitting(wanted, elapsed_s, run_pace, ledger):
    """(slices to run, slices owed) under the projected-end rule: the wanted slices in their order while each still
    ends in time; the first that would not, and every one after it, are owed to the next run."""
    run, projected = [], elapsed_s
    for name in wanted:
        projected += estimate_s(name, ledger) * run_pace
        if projected > PROJECTED_END_LIMIT_S:
            break  # in order: a later, smaller slice never overtakes an owed one
        run.append(name)
    return run, wanted[len(run) :]


def changed_since(ledger):
    """Paths changed since the last commit CI ran on this machine (every tracked path when it is unknown here)."""
    base = ledger.get("last_commit", "")
    if base and subprocess.run(["git", "merge-base", "--is-ancestor", base, "HEAD"], cwd=ROOT).returncode == 0:
        return git("diff", "--name-only", base, "HEAD").splitlines(), base
    return [], ""


def plan(ledger=None, elapsed_s=None, testbed_s=None):
    """What this commit's CI would run: lines to print, and the decision (run, owed, wanted)."""
    ledger = read_ledger() if ledger is None else ledger
    count = int(git("rev-list", "--count", "HEAD") or 0)
    changed, base = changed_since(ledger)
    wanted = wanted_slices(count, ledger, changed)
    lines = [
        f"CI rotation: {len(SLICES)} slices ({', '.join(SLICES)}); commit {git('rev-parse', '--short', 'HEAD')} "
        f"is number {count}, its slice {rotation_slice(count)}; owed {ledger.get('owed') or 'none'}; "
        + (
            f"guarded paths changed since {base[:10]}: {', '.join(guarding(changed)) or 'none'}"
            if base
            else "no earlier run on this machine: no guarded change known"
        )
    ]
    decision = {"wanted": wanted, "run": wanted, "owed": []}
    if elapsed_s is not None:
        run_pace = pace(testbed_s)
        decision["run"], decision["owed"] = fitting(wanted, elapsed_s, run_pace, ledger)
        lines.append(
            f"CI rotation: pace {run_pace:.2f} (the gate's test-bed tier {testbed_s / 60:.1f} min against "
            f"{REFERENCE_TESTBED_S // 60}), {elapsed_s / 60:.1f} min so far: runs {decision['run'] or 'nothing'}"
            + (
                f", owes {decision['owed']} to the next run (projected end over {PROJECTED_END_LIMIT_S // 60} min)"
                if decision["owed"]
                else ""
            )
        )
    lines += table(ledger, wanted)
    return lines, decision


def table(ledger, wanted):
    """Every unit: its slice, its time, its last pass on this machine, and whether this commit wants it."""
    rows = []
    for name, marker, selection, _, _ in UNITS:
        last = ledger.get("last_pass", {}).get(name)
        passed = (
            f"last passed {last['commit'][:10]} on {last['date']} in {last['seconds'] // 60} min"
            if last
            else ("never passed in CI on this machine")
        )
        mark = "*" if name in wanted else " "
        rows.append(
            f" {mark} {name:<10} ~{estimate_s(name, ledger) // 60:.0f} min  {passed}  [-m '{marker}' "
            f"{' '.join(s.split('/')[-1] for s in selection)}]"
        )
    return rows


def record(ledger, owed, results, run_pace):
    """The ledger after a run: each passed slice's commit, date and time; what the next run owes."""
    commit = git("rev-parse", "HEAD")
    passes = dict(ledger.get("last_pass", {}))
    for name, (rc, seconds) in results.items():
        if rc == 0:
            passes[name] = {
                "commit": commit,
                "date": time.strftime("%Y-%m-%d"),
                "seconds": int(seconds),
                "reference_s": int(seconds / run_pace),
            }
    failed = [name for name, (rc, _) in results.items() if rc != 0]
    return {"last_commit": commit, "last_pass": passes, "owed": [*owed, *failed]}
