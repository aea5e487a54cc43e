"""The profile's restart policy: `unless-stopped` by default on one node, `no` on a pair, and a pair that asks for a
policy under which Docker would restart one rank alone is refused by the shared checks (playbooks/profile.yml) that
site.yml and every entry playbook run first (deploy.yml alone: tests/playbook/test_entry_playbooks.py)."""

import json

import pytest
import yaml

from tests.profiles import profiles, site_check
from tests.runner import ansible_playbook_argv, run, write_api_key

pytestmark = pytest.mark.playbook


@pytest.mark.parametrize("policy", ["unless-stopped", "always", "on-failure"])
def test_pair_refuses_a_policy_that_restarts_one_rank_alone(tmp_path, policy):
    rc, out, state = site_check(tmp_path, "pair", {"container": {"restart": policy}})
    assert rc != 0
    assert f"container.restart={policy}: a profile of 2 nodes must use `no`" in out, out[-3000:]
    assert "cannot rejoin" in out and "nothing was changed" in out
    # Refused on the controller: no play touched a node.
    assert "PLAY [Check every node before changing any]" not in out
    assert not state.exists()


@pytest.mark.parametrize(("name", "overrides"), [("pair", {}), ("pair", {"container": {"restart": "no"}})])
def test_pair_with_no_restart_policy_passes(tmp_path, name, overrides):
    rc, out, _ = site_check(tmp_path, name, overrides)
    assert rc == 0, out[-3000:]


@pytest.mark.parametrize(
    ("name", "expected"),
    [("single", "unless-stopped"), ("testbed-single", "unless-stopped"), ("pair", "no"), ("testbed", "no")],
)
def test_default_policy_follows_the_node_count(tmp_path, name, expected):
    """The role's resolved policy for each shipped profile (the testbed-single profile names none: the default)."""
    book = tmp_path / "policy.yml"
    book.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "resolve",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "validate",
                            "ansible.builtin.include_role": {
                                "name": "vllm_service",
                                "tasks_from": "validate",
                                "public": True,
                            },
                        },
                        {"name": "show", "ansible.builtin.debug": {"msg": "policy={{ vllm_service_restart }}"}},
                    ],
                }
            ]
        )
    )
    kept = ("nodes", "container", "platform")
    extra = {
        "vllm_service_api_key_file": str(write_api_key(tmp_path)),
        "vllm_service_profile": {k: v for k, v in profiles()[name].items() if k in kept},
    }
    rc, out = run(ansible_playbook_argv("-i", "localhost,", "-c", "local", str(book), "-e", json.dumps(extra)))
    assert rc == 0, out[-3000:]
    assert f'"msg": "policy={expected}"' in out, out[-2000:]
