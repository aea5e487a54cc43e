"""`make tiers`: the test tiers one after another, each timed with its ten slowest tests, while the test bed is built
in the background during the tiers that never touch it (unit, playbook, engine): its node images, its engine image
in its registry, its two nodes started. The test-bed tier then finds them ready; when the build failed, it says
so here and the test-bed fixtures build again and fail loudly. Every tier's JUnit report (each test's duration)
is kept in .testbed/logs/tier-<name>.xml.

    python tests/tiers.py            # from the project root, with .venv's python (the Makefile's way)
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
BUILD = f"{sys.executable} tests/testbed/testbed.py up --nodes 2 && {sys.executable} tests/testbed/engine_image.py push"
BUILD_TIMEOUT_S = 3600


def minutes(seconds):
    return f"{int(seconds) // 60} min {int(seconds) % 60} s"


def run_tier(name, marker, log_dir):
    started = time.monotonic()
    # The JUnit report keeps every test's duration (the console shows the ten slowest) for the next CI cut.
    report = log_dir / f"tier-{name}.xml"
    rc = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", marker, "--durations=10", f"--junitxml={report}"],
        cwd=ROOT,
        env=command_env(),
    ).returncode
    took = time.monotonic() - started
    print(f"CI: tier {name} took {minutes(took)} (exit {rc})", flush=True)
    return rc, took


def main():
    log_dir = ROOT / ".testbed" / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    build_log = log_dir / "tiers-build.log"
    started = time.monotonic()
    with build_log.open("w") as log:
        build = subprocess.Popen(BUILD, shell=True, cwd=ROOT, env=command_env(), stdout=log, stderr=subprocess.STDOUT)
    results = [run_tier(name, marker, log_dir) for name, marker in TIERS[:3]]
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
    results.append(run_tier(*TIERS[3], log_dir))
    print(
        "CI: tiers " + ", ".join(f"{name} {minutes(took)}" for (name, _), (_, took) in zip(TIERS, results, strict=True))
    )
    return next((rc for rc, _ in results if rc != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
