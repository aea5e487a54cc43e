"""Malformed profile files through `site.yml --tags validate`: each refusal names the file (and line, for YAML)
and the field, never an Ansible templating internals message, and writes nothing."""

import json

import pytest

from tests.profiles import local_inventory
from tests.runner import ansible_playbook, ansible_playbook_argv, run

pytestmark = pytest.mark.playbook


def validate(tmp_path, inventory, *extra_vars):
    state = tmp_path / "state"
    args = ansible_playbook_argv("site.yml", "--tags", "validate", "-i", str(inventory))
    for extra in extra_vars:
        args += ["-e", json.dumps(extra)]
    rc, out = run(args + ["-e", f"spark_serve_controller_dir={state}"])
    assert rc != 0, out
    assert not state.exists(), "a refused profile wrote rendered arguments"
    assert "Traceback" not in out and "<<< caused by >>>" not in out, out
    return out


def test_yaml_syntax_error_names_the_file_and_line(tmp_path):
    inventory = local_inventory(tmp_path, "single")
    broken = inventory / "group_vars" / "all.yml"
    broken.write_text("spark_serve_profile: single\nspark_serve_profile_overrides:\n  engine: {max_num_seqs: 4\n")
    out = validate(tmp_path, inventory)
    assert f"{broken} line 4, column 1: YAML parsing failed" in out, out


def test_profiles_of_the_wrong_type_name_the_variable_and_file(tmp_path):
    out = validate(tmp_path, local_inventory(tmp_path, "single"), {"spark_serve_profiles": ["single"]})
    assert "spark_serve_profiles (group_vars/all/profiles.yml) must be a mapping" in out, out


def test_a_profile_and_overrides_of_the_wrong_type_are_both_named(tmp_path):
    inventory = local_inventory(tmp_path, "single")
    out = validate(
        tmp_path,
        inventory,
        {"spark_serve_profiles": {"single": "fast please"}},
        {"spark_serve_profile_overrides": ["engine"]},
    )
    assert "spark_serve_profiles.single (group_vars/all/profiles.yml): must be a mapping, got str" in out, out
    assert f"spark_serve_profile_overrides ({inventory}): must be a mapping" in out, out
    assert "2 problem(s)" in out


def test_undefined_jinja_names_the_field_it_sits_in(tmp_path):
    inventory = local_inventory(
        tmp_path, "single", {"engine": {"max_num_seqs": "{{ seqs_nobody_defined }}"}, "env": {"X": "{{ nor_this }}"}}
    )
    out = validate(tmp_path, inventory)
    assert "spark_serve_profile_overrides.engine.max_num_seqs" in out and "seqs_nobody_defined" in out, out
    assert "spark_serve_profile_overrides.env.X" in out and "nor_this" in out, out


@pytest.mark.parametrize(
    ("playbook", "node_play"),
    [
        ("playbooks/status.yml", "Report the state of every vLLM rank"),
        ("playbooks/diagnose.yml", "Diagnose"),
        ("playbooks/benchmark.yml", "Benchmark"),
    ],
)
def test_every_entry_playbook_resolves_the_profile_with_the_inventorys_overrides(tmp_path, playbook, node_play):
    """One profile play for all: a bad override stops status, diagnose and benchmark on the controller, named,
    before their plays reach a node."""
    inventory = local_inventory(tmp_path, "single", {"engine": {"max_num_seqs": "{{ seqs_nobody_defined }}"}})
    rc, out = ansible_playbook(playbook, "-i", str(inventory))
    assert rc != 0, out
    assert "spark_serve_profile_overrides.engine.max_num_seqs" in out and "seqs_nobody_defined" in out, out
    assert f"PLAY [{node_play}" not in out, out
    assert "Traceback" not in out, out
