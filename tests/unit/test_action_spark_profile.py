"""action_plugins/spark_profile.py without a playbook: value-by-value templating, overrides, schema, refusals."""

from unittest import mock

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.action import spark_profile
from ansible.template import Templar, trust_as_template

from tests.profiles import ROOT, profiles

SCHEMA = str(ROOT / "schemas" / "profile.schema.json")


def trusted(value):
    """Values as Ansible loads them from the inventory's YAML: their templates are trusted."""
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [trusted(item) for item in value]
    return trust_as_template(value) if isinstance(value, str) else value


def run(task_vars, name="single", **args):
    task_vars = trusted(dict(task_vars, inventory_dir="/inventories/test"))
    task = mock.MagicMock(args=dict(args, name=name, schema=SCHEMA), async_val=0, check_mode=False)
    templar = Templar(loader=DataLoader(), variables=task_vars)
    action = spark_profile.ActionModule(task, mock.MagicMock(), mock.MagicMock(), DataLoader(), templar, None)
    return action.run(task_vars=task_vars)


def test_the_profile_is_resolved_with_overrides_merged_recursively():
    result = run(
        {
            "spark_serve_profiles": profiles(),
            "spark_serve_profile_overrides": {"engine": {"max_num_seqs": "{{ seqs }}"}, "extra_args": ["-O3"]},
            "seqs": 3,
        }
    )
    assert not result.get("failed"), result
    resolved = result["ansible_facts"]["spark_serve_resolved"]
    assert resolved["engine"]["max_num_seqs"] == 3, "an override's template is rendered"
    assert resolved["engine"]["max_model_len"] == profiles()["single"]["engine"]["max_model_len"], (
        "merged, not replaced"
    )
    assert resolved["extra_args"] == ["-O3"]
    assert result["_ansible_no_log"] is True, "the resolved profile may hold credentials: its output is hidden"


@pytest.mark.parametrize(
    "task_vars,name,expected",
    [
        ({"spark_serve_profiles": ["single"]}, "single", "spark_serve_profiles (group_vars/all/profiles.yml) must be"),
        (
            {"spark_serve_profiles": {"single": 3}},
            "single",
            "spark_serve_profiles.single (group_vars/all/profiles.yml)",
        ),
        ({"spark_serve_profiles": {"a": {}}}, None, "spark_serve_profile=None (/inventories/test): must name one of a"),
        ({"spark_serve_profiles": {"a": {}}}, "b", "spark_serve_profile='b' (/inventories/test): must name one of a"),
    ],
)
def test_wrong_types_and_names_are_refused_naming_variable_and_file(task_vars, name, expected):
    result = run(task_vars, name=name)
    assert result["failed"] and expected in result["msg"], result["msg"]


def test_every_undefined_template_and_schema_problem_is_listed_at_once_without_secrets():
    result = run(
        {
            "spark_serve_profiles": profiles(),
            "spark_serve_profile_overrides": {"engine": {"max_num_seqs": "{{ nobody }}"}, "env": {"X": "{{ nor }}"}},
        }
    )
    problems = result["problems"]
    assert len(problems) == 2 and "nothing was changed" in result["msg"]
    assert problems[0].startswith("spark_serve_profile_overrides.engine.max_num_seqs (/inventories/test)")
    assert "'nobody' is undefined" in problems[0] and "[rule: template]" in problems[0]
    assert problems[1].startswith("spark_serve_profile_overrides.env.X") and "'nor'" in problems[1]

    secret = "sk-do-not-print"
    result = run(
        {
            "spark_serve_profiles": profiles(),
            "spark_serve_profile_overrides": {"model": {"revision": "main"}, "env": {"API_KEY": [secret]}},
        }
    )
    fields = [line.split(":")[0] for line in result["problems"]]
    assert fields == ["env.API_KEY", "model.revision"], result["problems"]
    assert secret not in str(result)
