"""The design card's commands, literally, from the project root: `-i spark-pair`, `-i spark-single`, a wrong `-i`,
and the documented ad hoc vllm_args (docs/profiles.md) on a machine whose interpreter discovery would pick a broken
python."""

import re

import pytest
from ansible import constants as C

from tests.profiles import ROOT
from tests.runner import PINNED_IMAGE_ARGS, ansible_playbook, run, write_api_key

pytestmark = pytest.mark.playbook


def validate(inventory, state):
    """`site.yml --check --tags validate`, with the API key file the real inventories name already created."""
    write_api_key(state)
    return ansible_playbook(
        "site.yml",
        "-i",
        inventory,
        "--check",
        "--tags",
        "validate",
        *PINNED_IMAGE_ARGS,
        "-e",
        f"spark_serve_controller_dir={state}",
    )


@pytest.mark.parametrize(
    ("inventory", "expected"),
    [
        ("spark-pair", ["profile pair, rank 0 on spark-a", "profile pair, rank 1 on spark-b", "--headless"]),
        ("spark-single", ["profile single, rank 0 on spark-a", "--tensor-parallel-size 1"]),
    ],
)
def test_design_card_inventories_resolve_from_the_root(tmp_path, inventory, expected):
    assert (ROOT / inventory).resolve() == (ROOT / "inventories" / inventory).resolve()
    rc, out = validate(inventory, tmp_path)
    assert rc == 0, out[-4000:]
    for text in expected:
        assert text in out, text


@pytest.mark.parametrize("inventory", ["spark-duo", "inventories/spark-pairs", "localhost,"])
def test_wrong_inventory_says_no_spark_nodes_group_was_found(tmp_path, inventory):
    rc, out = validate(inventory, tmp_path)
    assert rc != 0
    assert "no spark_nodes group was found in the inventory" in out, out[-3000:]
    shown = inventory.rstrip(",") if inventory.endswith(",") else str(ROOT / inventory)
    assert shown in out, out[-3000:]
    assert "spark_serve_profile=(unset)" not in out
    assert not tmp_path.joinpath("pair").exists()


def documented_adhoc_command():
    """docs/profiles.md's ad hoc vllm_args command, exactly as a user copies it (continuation lines joined)."""
    page = (ROOT / "docs" / "profiles.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", page, re.S)
    command = next(block for block in blocks if block.lstrip().startswith("ansible localhost"))
    return command.replace("\\\n", " ").strip()


@pytest.fixture
def broken_pythons(tmp_path):
    """A PATH folder that shadows every bare interpreter name Ansible's discovery tries with a python that fails."""
    folder = tmp_path / "broken-bin"
    folder.mkdir()
    names = [name for name in C.config.get_config_value("INTERPRETER_PYTHON_FALLBACK") if "/" not in name]
    assert names, "Ansible's interpreter discovery list has no bare names to shadow"
    for name in [*names, "python"]:
        script = folder / name
        script.write_text('#!/bin/sh\necho "broken python: $0" >&2\nexit 1\n')
        script.chmod(0o755)
    return folder


def test_documented_adhoc_command_runs_although_discovery_would_pick_a_broken_python(broken_pythons):
    command = documented_adhoc_command()
    assert "-m vllm_args" in command and "ansible_python_interpreter" not in command
    # Control: with discovery (what Ansible does without the project's setting) the broken python is picked.
    rc, out = run(
        command.replace("ansible localhost", "ansible localhost -e ansible_python_interpreter=auto", 1),
        path_prefix=[broken_pythons],
        shell=True,
    )
    assert rc != 0 and "broken python" in out, out[-3000:]
    # The documented command as is: the project runs the controller's modules with Ansible's own python.
    rc, out = run(command, path_prefix=[broken_pythons], shell=True)
    assert rc != 0, "the documented example profile is the refused one (retention 1600 with MTP 4)"
    assert "broken python" not in out, out[-3000:]
    assert "engine.prefix_cache_retention_interval=1600" in out and "1616" in out, out[-3000:]


@pytest.mark.parametrize("inventory", ["spark-pair", "spark-single"])
def test_the_shipped_image_placeholder_is_refused_at_validation_naming_the_base_to_set(tmp_path, inventory):
    """README step 6 before step 4: the all-zero placeholder is refused by the first command, naming the variable a
    user sets, and no rank's spec is written with it."""
    write_api_key(tmp_path)
    rc, out = ansible_playbook(
        "site.yml", "-i", inventory, "--tags", "validate", "-e", f"spark_serve_controller_dir={tmp_path}"
    )
    assert rc != 0, out[-3000:]
    assert "image.digest=sha256:" + "0" * 64 + ": the all-zero placeholder the profiles ship (rule: image-pinned" in out
    assert "Set spark_serve_image_base to the arm64 vLLM build" in out, out[-3000:]
    assert not list(tmp_path.glob("*/rank*.spec.json"))
