"""`make tiers`: the test tiers, each timed with its ten slowest tests, while the test bed is built in the background
during the tiers that never touch it (unit, playbook, engine): its node images, its engine image in its registries, two
isolated test beds (instances 0 and 1) started. The test-bed tier runs as two shards, one per test bed: the service
module (the pair's liveness, lock and key tests) on instance 0; the prepare stage's module, every other test-bed module
(the single node among them) and two of the pair's failed starts on instance 1, so one shard's waits (watchdog windows,
detection bounds, engine loads) overlap the other's work. The second shard, whose first minutes are the prepare stage
with no time bound to keep, starts as soon as its test bed is up, beside the playbook and engine tiers (with test-bed
images present the beds are up within a minute, and those tiers leave most of a core idle); the service shard, whose
watchdog tests time their detections, starts once those tiers have ended. When the build failed, it says so here and the
test-bed fixtures build again and fail loudly. Every tier's or step's JUnit report (each test's duration) is kept in
.testbed/logs/tier-<name>.xml, a step's output in .testbed/logs/tier-<name>.log.

After the test-bed tier, one slice of the tests the gate leaves out (the extended suite, the Molecule scenarios) runs
on test bed 0 when the machine's pace leaves room (tests/rotation.py): CI prints the plan first and the ledger last.

    python tests/tiers.py            # from the project root, with .venv's python (the Makefile's way)
    python tests/tiers.py testbed    # the named tiers only (unit, playbook, engine, testbed)
    python tests/tiers.py --plan     # every rotating test, its slice and last pass, what this commit would run
"""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests import rotation
from tests.runner import command_env

# The test-bed tests make test runs: not the Molecule scenarios (`make molecule`), not the extended suite (`make
# test-extended`: the quad and the fleet, and second proofs of paths these tests prove; docs/tests.md lists them and
# why): with them the tier outran CI's time limit on two busy cores.
TESTBED = "testbed and not molecule and not extended"
# Exclusive markers: every test runs in at most one tier; the test-bed tier's shards split its tests further.
TIERS = [
    ("unit", "not engine and not playbook and not testbed and not molecule"),
    ("playbook", "playbook and not engine and not testbed and not molecule"),
    ("engine", "engine and not testbed and not molecule"),
    ("testbed", TESTBED),
]
# The test-bed tier's shards, run at once, each on its own test bed: (name, instance, steps), a shard's steps one
# after another, each (name, pytest marker, selection). The service shard takes the pair's liveness, lock, key and
# fault tests. The other shard first prepares its pair from bare nodes and proves the prepare stage idempotent on it
# (test_prepare.py), then takes every other test-bed module (a new module always runs). The Molecule scenarios
# (`make molecule`) are not in this tier: each node role's convergence from bare, idempotence and verification is
# what test_prepare.py proves for every role at once, and on two busy cores they took about 24 minutes.
SERVICE_MODULES = ["tests/testbed/test_service.py"]
PREPARE_MODULE = "tests/testbed/test_prepare.py"
# Two of the pair's failed starts (test_service.py's last tests) need no watchdog and no other test's state: they
# balance the shards from the other one, whose test bed serves the same pair (its stalls stay: with them there the
# other shard ended last, 3 minutes after this one).
FAILED_STARTS = [
    f"tests/testbed/test_service.py::{name}"
    for name in (
        "test_worker_that_cannot_start_is_found_in_seconds",
        "test_a_node_short_of_memory_is_refused_naming_both_numbers_before_any_rank_starts",
    )
]
SHARDS = [
    (
        "service",
        "0",
        [
            (
                "testbed-service",
                TESTBED,
                [*SERVICE_MODULES, *(f"--deselect={t}" for t in FAILED_STARTS)],
            )
        ],
    ),
    (
        "rest",
        "1",
        [
            ("testbed-prepare", TESTBED, [PREPARE_MODULE]),
            (
                "testbed-rest",
                TESTBED,
                [f"--ignore={module}" for module in (PREPARE_MODULE, *SERVICE_MODULES)],
            ),
            ("testbed-failed-starts", TESTBED, FAILED_STARTS),
        ],
    ),
]
BUILD = " && ".join(
    f"SPARK_TESTBED_INSTANCE={instance} {sys.executable} tests/testbed/testbed.py up --nodes 2 && "
    f"SPARK_TESTBED_INSTANCE={instance} {sys.executable} tests/testbed/engine_image.py push"
    for _, instance, _ in SHARDS
)
BUILD_TIMEOUT_S = 3600
# CI's hard limit is 90 min: install and lint (about 5 min on two busy cores) and the build's wait come first, so a
# shard may run until 82 min into the test-bed tier and its report still lands inside the limit.
SHARD_TIMEOUT_S = 82 * 60
# A rotating slice is stopped here, so that CI's report lands inside its hard limit of 90 min.
ROTATION_DEADLINE_S = 86 * 60
# The shard that starts beside the playbook and engine tiers (its first step has no time bound to keep).
EARLY_SHARD = "rest"


def minutes(seconds):
    return f"{int(seconds) // 60} min {int(seconds) % 60} s"


def cpu_times():
    """(idle, total) jiffies of the whole machine since boot (/proc/stat; idle counts iowait too)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return fields[3] + fields[4], sum(fields)


def idle_percent(before):
    """The machine's idle share of its CPU time since `before` (cpu_times())."""
    idle, total = (now - then for now, then in zip(cpu_times(), before, strict=True))
    return 100.0 * idle / max(total, 1)


def pytest_command(marker, report, *selection):
    # The JUnit report keeps every test's duration (the console shows the ten slowest) for the next CI cut.
    return [sys.executable, "-m", "pytest", "-m", marker, "--durations=10", f"--junitxml={report}", *selection]


def run_tier(name, marker, log_dir):
    started = time.monotonic()
    rc = subprocess.run(pytest_command(marker, log_dir / f"tier-{name}.xml"), cwd=ROOT, env=command_env()).returncode
    took = time.monotonic() - started
    print(f"CI: tier {name} took {minutes(took)} (exit {rc})", flush=True)
    return rc, took


def run_shard(instance, steps, log_dir, deadline, results):
    """A shard's steps in turn on its test bed (own temp folder, JUnit report and log each): results[step] =
    (rc, seconds since the tier began)."""
    basetemp = ROOT / ".testbed" / instance / "pytest-tmp"
    basetemp.parent.mkdir(parents=True, exist_ok=True)  # pytest creates the folder, not its parents
    env = command_env({"SPARK_TESTBED_INSTANCE": instance})
    for step, marker, selection in steps:
        command = [
            *pytest_command(marker, log_dir / f"tier-{step}.xml", *selection),
            "-p",
            "no:cacheprovider",
            f"--basetemp={basetemp}",
        ]
        with (log_dir / f"tier-{step}.log").open("w") as log:
            timeout_s, cpu = max(1, deadline - time.monotonic()), cpu_times()
            try:
                done = subprocess.run(command, cwd=ROOT, env=env, stdout=log, stderr=log, timeout=timeout_s)
                results[step] = (done.returncode, time.monotonic(), idle_percent(cpu))
            except subprocess.TimeoutExpired:
                results[step] = ("timed out", time.monotonic(), idle_percent(cpu))


def run_testbed_shards(log_dir, build, build_log, started, tiers, results):
    """The other tiers at once, one after another (`results[name]`), the early shard as soon as its test bed is up
    (on a new machine the build outlasts those tiers), the late shard once they have ended, each shard on its own
    test bed; each step's output follows once all have ended."""
    others = threading.Thread(target=lambda: results.update({n: run_tier(n, m, log_dir) for n, m in tiers}))
    others.start()
    wait_for_the_build(build, build_log, started)
    began, steps_done, cpu = time.monotonic(), {}, cpu_times()
    threads = {
        name: threading.Thread(target=run_shard, args=(instance, steps, log_dir, began + SHARD_TIMEOUT_S, steps_done))
        for name, instance, steps in SHARDS
    }
    threads[EARLY_SHARD].start()
    others.join()
    for name, thread in threads.items():
        if name != EARLY_SHARD:
            thread.start()
    for thread in threads.values():
        thread.join()
    return report_shards(log_dir, began, steps_done, cpu)


def report_shards(log_dir, began, steps_done, cpu):
    codes = []
    for name, instance, steps in SHARDS:
        for step, _, _ in steps:
            rc, ended, idle = steps_done.get(step, ("not run", began, 0.0))
            codes.append(rc)
            print(f"\n===== {step} (shard {name}, test bed {instance}) =====", flush=True)
            print((log_dir / f"tier-{step}.log").read_text(), flush=True)
            print(
                f"CI: {step} ended {minutes(ended - began)} into the tier (exit {rc}); the machine's CPU was "
                f"{idle:.0f} % idle while it ran",
                flush=True,
            )
    took = time.monotonic() - began
    rc = next((rc for rc in codes if rc != 0), 0)
    print(f"CI: tier testbed took {minutes(took)} (exit {rc}); CPU {idle_percent(cpu):.0f} % idle", flush=True)
    return rc, took


def main(chosen):
    """Run the chosen tiers (all when none is named); the test bed is built while the others run."""
    unknown = sorted(set(chosen) - {name for name, _ in TIERS})
    if unknown:
        print(f"CI: no tier named {', '.join(unknown)}; the tiers are {', '.join(name for name, _ in TIERS)}")
        return 2
    tiers = [(name, marker) for name, marker in TIERS if name in chosen or not chosen]
    log_dir = ROOT / ".testbed" / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    build_log = log_dir / "tiers-build.log"
    started = time.monotonic()
    results = {}
    others = [(name, marker) for name, marker in tiers if name != "testbed"]
    if len(others) == len(tiers):
        for name, marker in others:
            results[name] = run_tier(name, marker, log_dir)
    else:
        print("\n".join(rotation.plan()[0]), flush=True)
        with build_log.open("w") as log:
            build = subprocess.Popen(BUILD, shell=True, cwd=ROOT, env=command_env(), stdout=log, stderr=log)
        results["testbed"] = run_testbed_shards(log_dir, build, build_log, started, others, results)
        results["rotation"] = run_rotation(log_dir, results["testbed"], started)
        tiers = [*tiers, ("rotation", "")]
    took = ", ".join(f"{name} {minutes(results[name][1])}" for name, _ in tiers)
    print(f"CI: tiers {took}")
    return next((results[name][0] for name, _ in tiers if results[name][0] != 0), 0)


def ci_elapsed_s(tiers_started):
    """Seconds since CI began (.ci/run exports SPARK_CI_STARTED, its epoch), else since the tiers began."""
    began = os.environ.get("SPARK_CI_STARTED")
    return time.time() - int(began) if began else time.monotonic() - tiers_started


def run_rotation(log_dir, gate, tiers_started):
    """The rotation's slices that fit this run's pace, one after another on test bed 0, after a passed gate; the
    ledger then holds what passed and what the next run owes. (rc, seconds)."""
    began = time.monotonic()
    ledger = rotation.read_ledger()
    if gate[0] != 0:
        print("CI rotation: not run (the gate failed); the ledger is left as it was", flush=True)
        return 0, 0.0
    lines, decision = rotation.plan(ledger, ci_elapsed_s(tiers_started), gate[1])
    print("\n".join(lines), flush=True)
    run_pace = rotation.pace(gate[1])
    if decision["run"]:  # the other shard's test bed is done: its idle engines would share the slice's cores
        subprocess.run(
            [sys.executable, "tests/testbed/testbed.py", "down"],
            cwd=ROOT,
            env=command_env({"SPARK_TESTBED_INSTANCE": "1"}),
            capture_output=True,
            timeout=300,
            check=False,
        )
    results = {name: run_slice(name, log_dir, tiers_started) for name in decision["run"]}
    ledger = rotation.record(ledger, decision["owed"], results, run_pace)
    rotation.write_ledger(ledger)
    print("\n".join(rotation.plan(ledger)[0][:1] + rotation.table(ledger, decision["run"])), flush=True)
    return next((rc for rc, _ in results.values() if rc != 0), 0), time.monotonic() - began


def run_slice(name, log_dir, tiers_started):
    """One slice's pytest selection on test bed 0, bounded by CI's hard limit; (rc, seconds)."""
    _, marker, selection, _, _ = rotation.unit(name)
    started, report = time.monotonic(), log_dir / f"tier-rotation-{name}.xml"
    command = [*pytest_command(marker, report, *selection), "-p", "no:cacheprovider"]
    timeout_s = max(60, ROTATION_DEADLINE_S - ci_elapsed_s(tiers_started))
    with (log_dir / f"tier-rotation-{name}.log").open("w") as log:
        try:
            rc = subprocess.run(
                command,
                cwd=ROOT,
                env=command_env({"SPARK_TESTBED_INSTANCE": "0"}),
                stdout=log,
                stderr=log,
                timeout=timeout_s,
            ).returncode
        except subprocess.TimeoutExpired:
            rc = "timed out"
    took = time.monotonic() - started
    print((log_dir / f"tier-rotation-{name}.log").read_text(), flush=True)
    print(f"CI rotation: slice {name} took {minutes(took)} (exit {rc})", flush=True)
    return rc, took


def wait_for_the_build(build, build_log, started):
    try:
        build_rc = build.wait(timeout=max(1, BUILD_TIMEOUT_S - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        build.kill()
        build_rc = "timed out"
    print(
        f"CI: test bed built in the background, ready {minutes(time.monotonic() - started)} after the tiers began "
        f"(exit {build_rc}; log {build_log.relative_to(ROOT)})",
        flush=True,
    )
    if build_rc != 0:
        print(build_log.read_text()[-3000:], flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--plan"]:
        print("\n".join(rotation.plan()[0]))
        sys.exit(0)
    sys.exit(main(sys.argv[1:]))
