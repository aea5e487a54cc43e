"""The one way tests, benchmarks and the demo run the project's commands: from the project root, with its
ansible.cfg, this virtualenv's tools first on the PATH, no colours, and the test bed's instance passed on."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
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


def command_env(env=None, path_prefix=()):
    """ENV_BASE with `env` on top and `path_prefix` directories before everything on the PATH."""
    environment = dict(ENV_BASE, **(env or {}))
    environment["PATH"] = os.pathsep.join([*map(str, path_prefix), environment["PATH"]])
    return environment


def run(args, timeout=900, env=None, path_prefix=(), **kwargs):
    """(rc, combined output) of a command run from the project root."""
    proc = subprocess.run(
        args,
        cwd=ROOT,
        env=command_env(env, path_prefix),
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )
    return proc.returncode, proc.stdout + proc.stderr


def ansible_playbook_argv(*args):
    """This virtualenv's ansible-playbook with `args` (a playbook, -i, -e, ...): the one command line every test,
    benchmark and the demo runs a playbook with."""
    return [str(BIN / "ansible-playbook"), *map(str, args)]


def ansible_playbook(*args, timeout=900, **kwargs):
    """(rc, combined output) of ansible-playbook with `args`, run from the project root as run() runs a command."""
    return run(ansible_playbook_argv(*args), timeout=timeout, **kwargs)


# README step 4 before anything validates on the real inventories, whose gb10 profiles refuse the shipped all-zero
# placeholder: a registry image's digest (never pulled: these runs reach no node).
PINNED_IMAGE_ARGS = ("-e", "spark_serve_image_digest=sha256:" + "1" * 64)


def write_api_key(controller_dir):
    """The API key file the real inventories name (<spark_serve_controller_dir>/api-key), as a user creates it."""
    controller_dir.mkdir(parents=True, exist_ok=True)
    key = controller_dir / "api-key"
    key.write_text("sk-" + "0123456789abcdef" * 2 + "\n")
    key.chmod(0o600)
    return key


def promtool(*args):
    """Prometheus' promtool (make system unpacks it into .tools/, or $PROMTOOL): CompletedProcess; a missing one
    fails the test, never skips it."""
    path = Path(os.environ.get("PROMTOOL") or ROOT / ".tools/bin/promtool")
    if not path.is_file():
        pytest.fail(f"promtool not found at {path}: run make system")
    return subprocess.run([str(path), *map(str, args)], capture_output=True, text=True, timeout=60, check=False)
