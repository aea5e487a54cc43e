"""Benchmark: a no-op rerun of site.yml's prepare play on an already prepared test-bed pair.

Prints wall time and changed count per node (target: changed=0). Run after `make demo` (or any run that
prepared the pair): python tests/bench/prepare_noop_bench.py [runs]
"""

import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.runner import ansible_playbook_argv, command_env


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    print("| run | wall (s) | changed per node |")
    print("|---|---|---|")
    for run in range(1, runs + 1):
        started = time.monotonic()
        proc = subprocess.run(
            ansible_playbook_argv("-i", "inventories/testbed-pair", "site.yml", "--tags", "prepare"),
            cwd=ROOT,
            env=command_env(),
            capture_output=True,
            text=True,
            timeout=1800,
        )
        seconds = time.monotonic() - started
        if proc.returncode != 0:
            raise SystemExit(proc.stdout[-3000:])
        changed = dict(re.findall(r"^(node-\d+)\s+:.*changed=(\d+)", proc.stdout, re.MULTILINE))
        print(f"| {run} | {seconds:.1f} | {changed} |")


if __name__ == "__main__":
    main()
