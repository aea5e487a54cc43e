"""Running the project's playbooks and commands against the test bed (tests and benchmarks share these)."""

import contextlib
import hashlib
import shutil

import yaml

from tests.runner import BIN, ENV_BASE, INSTANCE, ROOT, ansible_playbook, run

__all__ = [
    "BIN",
    "ENV_BASE",
    "INSTANCE",
    "ROOT",
    "assert_never_ran",
    "local_patch",
    "node_container",
    "node_exec",
    "playbook",
    "run",
]


def playbook(path, inventory="inventories/testbed-pair", *extra, timeout=900):
    return ansible_playbook("-i", inventory, path, *extra, timeout=timeout)


def node_container(index):
    """The Docker container that is test-bed node `index` (tests/testbed/testbed.py)."""
    return f"spark-serve-tb{INSTANCE}-node-{index}"


def node_exec(index, command, timeout=120):
    """Run a shell command inside test-bed node `index` (test set-up only, never a role's way in)."""
    return run(["docker", "exec", node_container(index), "sh", "-c", command], timeout=timeout)


def role_task_names(role):
    """The name of every task in roles/<role>/tasks, blocks included."""

    def walk(tasks):
        for task in tasks or []:
            if isinstance(task, dict):
                yield from [task["name"]] if "name" in task else []
                for section in ("block", "rescue", "always"):
                    yield from walk(task.get(section))

    return [
        name
        for path in sorted((ROOT / "roles" / role / "tasks").glob("*.yml"))
        for name in walk(yaml.safe_load(path.read_text()))
    ]


def assert_never_ran(out, role, task=""):
    """No task of `role` whose name starts with `task` ran in a playbook's output `out`, and such a task exists
    (a renamed task must not make the assertion pass by itself)."""
    names = [name for name in role_task_names(role) if name.startswith(task)]
    assert names, f"roles/{role} has no task named '{task}...': the test asserts on a name that does not exist"
    banner = f"TASK [{role} : {task}"
    assert banner not in out, f"{banner}...] ran:\n{out[-3000:]}"


LOCAL_PATCH = """--- a/vllm/platforms/cpu.py
+++ b/vllm/platforms/cpu.py
@@ -1,1 +1,2 @@
+# a user's own patch (tests/testbed)
 # SPDX-License-Identifier: Apache-2.0
"""


@contextlib.contextmanager
def local_patch(tmp_path, mark=""):
    """A copy of images/ whose testbed folder has a user's own series (patches.local/, one harmless patch, `mark` in
    its comment): another recipe, another image. Never the checkout's own folder: the other shard's test bed reads it
    meanwhile. Yields the extra vars that point the playbooks at the copy."""
    images = tmp_path / "images"
    shutil.copytree(ROOT / "images", images, ignore=shutil.ignore_patterns("patches.local", "provenance.json"))
    local = images / "testbed" / "patches.local"
    local.mkdir()
    patch = LOCAL_PATCH.replace("(tests/testbed)", f"(tests/testbed) {mark}".rstrip())
    (local / "0001-local.patch").write_text(patch)
    (local / "series").write_text("0001-local.patch\n")
    (local / "SHA256SUMS").write_text(f"{hashlib.sha256(patch.encode()).hexdigest()}  0001-local.patch\n")
    yield ["-e", f"spark_serve_images_dir={images}"]
