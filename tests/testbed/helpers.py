"""Running the project's playbooks and commands against the test bed (tests and benchmarks share these)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
INSTANCE = os.environ.get("SPARK_TESTBED_INSTANCE", "0")


ENV_BASE = dict(
    os.environ,
    ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
    ANSIBLE_NOCOLOR="1",
    ANSIBLE_FORCE_COLOR="0",
    PATH=f"{BIN}:{os.environ['PATH']}",
    SPARK_TESTBED_INSTANCE=INSTANCE,
)


def run(args, timeout=900, env=None):
    """(rc, combined output) of a command run from the project root with the project's Ansible config."""
    proc = subprocess.run(
        args, cwd=ROOT, env=dict(ENV_BASE, **(env or {})), capture_output=True, text=True, timeout=timeout
    )
    return proc.returncode, proc.stdout + proc.stderr


def playbook(path, inventory="inventories/testbed-pair", *extra, timeout=900):
    return run([str(BIN / "ansible-playbook"), "-i", inventory, path, *extra], timeout=timeout)


def node_exec(index, command, timeout=120):
    """Run a shell command inside test-bed node `index` (test set-up only, never a role's way in)."""
    return run(["docker", "exec", f"spark-serve-tb{INSTANCE}-node-{index}", "sh", "-c", command], timeout=timeout)
