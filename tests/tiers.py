"""`make tiers`: the test tiers, each timed with its ten slowest tests, while the test bed is built in the background
during the tiers that never touch it (unit, playbook, engine): its node images, its engine image in its registries,
two isolated test beds (instances 0 and 1) started. The test-bed tier then runs as two shards at once, one per test
bed: the service modules (the pair's liveness, lock, key and fault tests, the single node, then the fleet) on
instance 0, every other test-bed module on instance 1, so one shard's waits
(watchdog windows, detection bounds, engine loads) overlap the other's work. When the build failed, it says so here
and the test-bed fixtures build again and fail loudly. Every tier's JUnit report (each test's duration) is kept in
.testbed/logs/tier-<name>.xml, a shard's output in .testbed/logs/tier-<name>.log.

    python tests/tiers.py            # from the project root, with .venv's python (the Makefile's way)
    python tests/tiers.py testbed    # the named tiers only (unit, playbook, engine, testbed)
"""

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.runner import command_env

# Exclusive markers: every test runs in exactly one tier (the Molecule scenarios in none: `make molecule`).
TIERS = [
    ("unit", "not engine and not playbook and not testbed and not molecule"),
    ("playbook", "playbook and not engine and not testbed and not molecule"),
    ("engine", "engine and not testbed and not molecule"),
    ("testbed", "testbed and not molecule"),
]
# The test-bed tier's shards: (name, test-bed instance, pytest selection). The first names its modules, run in this
# order; the second takes every other test-bed module, so a new module always runs. The fleet's module comes last in
# the first shard (after 36 min): the other shard (34 min) has ended by then, so its session load and engine
# restarts never share the cores with the pair's timing-bound watchdog tests (in one CI they did, and both failed).
SERVICE_MODULES = [
    "tests/testbed/test_service.py",
    "tests/testbed/test_service_single.py",
    "tests/testbed/test_fleet.py",
]
SHARDS = [
    ("testbed-service", "0", SERVICE_MODULES),
    ("testbed-rest", "1", [f"--ignore={module}" for module in SERVICE_MODULES]),
]
BUILD = " && ".join(
    f"SPARK_TESTBED_INSTANCE={instance} {sys.executable} tests/testbed/testbed.py up --nodes 2 && "
    f"SPARK_TESTBED_INSTANCE={instance} {sys.executable} tests/testbed/engine_image.py push"
    for _, instance, _ in SHARDS
)
BUILD_TIMEOUT_S = 3600
SHARD_TIMEOUT_S = 4800


def minutes(seconds):
    return f"{int(seconds) // 60} min {int(seconds) % 60} s"


def pytest_command(marker, report, *selection):
    # The JUnit report keeps every test's duration (the console shows the ten slowest) for the next CI cut.
    return [sys.executable, "-m", "pytest", "-m", marker, "--durations=10", f"--junitxml={report}", *selection]


def run_tier(name, marker, log_dir):
    started = time.monotonic()
    rc = subprocess.run(pytest_command(marker, log_dir / f"tier-{name}.xml"), cwd=ROOT, env=command_env()).returncode
    took = time.monotonic() - started
    print(f"CI: tier {name} took {minutes(took)} (exit {rc})", flush=True)
    return rc, took


def run_testbed_shards(marker, log_dir):
    """Every shard at once, each on its own test bed with its own temp folder; their outputs follow in turn."""
    started, shards = time.monotonic(), []
    for name, instance, selection in SHARDS:
        log = (log_dir / f"tier-{name}.log").open("w")
        basetemp = ROOT / ".testbed" / instance / "pytest-tmp"
        basetemp.parent.mkdir(parents=True, exist_ok=True)  # pytest creates the folder, not its parents
        command = [
            *pytest_command(marker, log_dir / f"tier-{name}.xml", *selection),
            "-p",
            "no:cacheprovider",
            f"--basetemp={basetemp}",
        ]
        env = command_env({"SPARK_TESTBED_INSTANCE": instance})
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        shards.append((name, instance, proc, log))
    ended = {}
    while len(ended) < len(shards) and time.monotonic() - started < SHARD_TIMEOUT_S:  # bounded by the CI limit
        for name, _, proc, _ in shards:
            if name not in ended and proc.poll() is not None:
                ended[name] = time.monotonic() - started
        time.sleep(2)
    results = []
    for name, instance, proc, log in shards:
        if name not in ended:
            proc.kill()
        rc = proc.wait()
        log.close()
        print(f"\n===== shard {name} (test bed {instance}) =====\n{Path(log.name).read_text()}", flush=True)
        print(f"CI: shard {name} took {minutes(ended.get(name, SHARD_TIMEOUT_S))} (exit {rc})", flush=True)
        results.append(rc)
    took = time.monotonic() - started
    rc = next((rc for rc in results if rc != 0), 0)
    print(f"CI: tier testbed took {minutes(took)} (exit {rc})", flush=True)
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
    results = []
    if any(name == "testbed" for name, _ in tiers):
        with build_log.open("w") as log:
            build = subprocess.Popen(BUILD, shell=True, cwd=ROOT, env=command_env(), stdout=log, stderr=log)
    for name, marker in tiers:
        if name == "testbed":
            wait_for_the_build(build, build_log, started)
            results.append(run_testbed_shards(marker, log_dir))
        else:
            results.append(run_tier(name, marker, log_dir))
    took = ", ".join(f"{name} {minutes(took)}" for (name, _), (_, took) in zip(tiers, results, strict=True))
    print(f"CI: tiers {took}")
    return next((rc for rc, _ in results if rc != 0), 0)


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
    sys.exit(main(sys.argv[1:]))
