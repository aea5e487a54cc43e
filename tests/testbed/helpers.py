"""Running the project's playbooks and commands against the test bed (tests and benchmarks share these)."""

from tests.runner import BIN, ENV_BASE, INSTANCE, ROOT, run

__all__ = ["BIN", "ENV_BASE", "INSTANCE", "ROOT", "node_exec", "playbook", "run"]


def playbook(path, inventory="inventories/testbed-pair", *extra, timeout=900):
    return run([str(BIN / "ansible-playbook"), "-i", inventory, path, *extra], timeout=timeout)


def node_exec(index, command, timeout=120):
    """Run a shell command inside test-bed node `index` (test set-up only, never a role's way in)."""
    return run(["docker", "exec", f"spark-serve-tb{INSTANCE}-node-{index}", "sh", "-c", command], timeout=timeout)
