"""Every entry playbook works alone on an inventory: it imports playbooks/profile.yml first, so a bad profile (and a
pair's restart policy that Docker would use to restart one rank alone) is refused by name on the controller before
any host is reached, without site.yml's validate stage. Under site.yml, which imports several entry playbooks, the
profile is resolved once."""

import json
import re

import pytest
import yaml

from tests.profiles import local_inventory, site_check
from tests.runner import ansible_playbook_argv, run

pytestmark = pytest.mark.playbook

ENTRY_PLAYBOOKS = ["prepare", "deploy", "status", "rollback", "benchmark", "diagnose", "door"]

# The first play of each entry playbook that reaches a node (or, for benchmark, the head's endpoint).
NODE_PLAYS = {
    "prepare": "Check every node before changing any",
    "deploy": "Start the vLLM service",
    "status": "Report the state of every vLLM rank",
    "rollback": "Roll the vLLM service back to a deployment that passed",
    "benchmark": "Find how the controller reaches the service (roles/vllm_service/tasks/endpoint.yml)",
    "diagnose": "Diagnose the vLLM service",
    "door": "Apply the front door's keys and tenants on the head (nginx reload; the engine is untouched)",
}


def unreachable_inventory(tmp_path, profile_name, overrides):
    """local_inventory's hosts moved to TEST-NET addresses over SSH: a run that got past the shared checks would
    find them unreachable within a second, never act on this machine."""
    inv = local_inventory(tmp_path, profile_name, overrides)
    hosts_file = inv / "hosts.yml"
    hosts = yaml.safe_load(hosts_file.read_text())
    for i, node in enumerate(hosts["all"]["children"]["spark_nodes"]["hosts"].values()):
        node.update(ansible_connection="ssh", ansible_host=f"192.0.2.{10 + i}", ansible_ssh_timeout=1)
    hosts_file.write_text(yaml.safe_dump(hosts))
    return inv


def entry_run(tmp_path, playbook, profile_name, overrides, extra_vars=None):
    inv = unreachable_inventory(tmp_path, profile_name, overrides)
    state = tmp_path / "state"
    argv = ansible_playbook_argv(f"playbooks/{playbook}.yml", "--check", "-i", str(inv))
    extra = ["-e", json.dumps(extra_vars)] if extra_vars else []
    rc, out = run([*argv, "-e", f"spark_serve_controller_dir={state}", *extra], timeout=120)
    return rc, out, state


@pytest.mark.parametrize("playbook", ENTRY_PLAYBOOKS)
def test_an_entry_playbook_alone_refuses_a_bad_profile_by_name_before_any_host(tmp_path, playbook):
    rc, out, state = entry_run(tmp_path, playbook, "single", {"model": {"revision": "main"}, "nodes": 65})
    assert rc != 0, out[-3000:]
    assert re.search(r"^- model\.revision: 'main' .*pattern", out, re.M), out[-3000:]
    assert re.search(r"^- nodes: 65 .*maximum of 64", out, re.M), out[-3000:]
    assert f"PLAY [{NODE_PLAYS[playbook]}]" not in out, out[-3000:]
    assert "UNREACHABLE" not in out and "192.0.2." not in out, out[-3000:]
    assert not state.exists()


@pytest.mark.parametrize("playbook", ["deploy", "rollback"])
def test_the_restart_policy_refusal_fires_from_an_entry_playbook_alone(tmp_path, playbook):
    rc, out, state = entry_run(tmp_path, playbook, "pair", {"container": {"restart": "always"}})
    assert rc != 0, out[-3000:]
    assert "container.restart=always: a profile of 2 nodes must use `no`" in out, out[-3000:]
    assert "cannot rejoin" in out and "nothing was changed" in out
    assert f"PLAY [{NODE_PLAYS[playbook]}]" not in out, out[-3000:]
    assert "UNREACHABLE" not in out
    assert not state.exists()


def test_deploy_alone_with_a_good_profile_gets_past_the_shared_checks_to_the_nodes(tmp_path):
    """The profile resolved by deploy.yml itself is enough to reach the node play (here: unreachable hosts)."""
    rc, out, _ = entry_run(tmp_path, "deploy", "pair", {})
    assert rc != 0
    assert "PLAY [Start the vLLM service]" in out, out[-3000:]
    assert "UNREACHABLE" in out, out[-3000:]
    assert "spark_serve_resolved' is undefined" not in out, out[-3000:]


def test_site_resolves_the_profile_once_although_it_imports_several_entry_playbooks(tmp_path):
    rc, out, _ = site_check(tmp_path, "pair")
    assert rc == 0, out[-3000:]
    assert out.count("TASK [Resolve the profile with the inventory's overrides and check it against the schema]") == 1
    assert out.count("Check the restart policy against the node count]") == 1, out[-3000:]


def test_the_doors_bad_tenants_are_refused_all_at_once_by_name_before_any_host(tmp_path):
    tenants = [
        {"name": "Alice", "key_file": str(tmp_path / "alice.key")},
        {"name": "bob", "key_file": str(tmp_path / "none.key"), "max_concurrent": -1},
        {"name": "carol", "key_file": str(tmp_path / "carol.key")},
    ]
    (tmp_path / "alice.key").write_text("sk-alice-0123456789abcdef\n")
    (tmp_path / "carol.key").write_text("sk-local-test-key\n")  # the operator's key again
    rc, out, state = entry_run(tmp_path, "door", "pair", {}, {"vllm_service_tenants": tenants})
    assert rc != 0, out[-3000:]
    assert "4 violation(s) in the door keys; nothing was changed" in out, out[-3000:]
    for named in (
        "front_door_tenants[0].name='Alice': not a tenant name",
        "front_door_tenants[1].max_concurrent=-1: not a whole number",
        f"front_door_tenants[1].key_file={tmp_path / 'none.key'}: no such file on the controller",
        "front_door_tenants: operator and carol have the same key",
    ):
        assert named in out, (named, out[-3000:])
    assert "sk-local-test-key" not in out and "sk-alice" not in out
    assert f"PLAY [{NODE_PLAYS['door']}]" not in out and "UNREACHABLE" not in out, out[-3000:]
    assert not state.exists()


def test_tenants_on_a_shared_prefix_cache_may_not_read_each_others_cache_hits(tmp_path):
    (tmp_path / "bob.key").write_text("sk-bob-0123456789abcdef\n")
    tenants = {"vllm_service_tenants": [{"name": "bob", "key_file": str(tmp_path / "bob.key")}]}
    rc, out, _ = entry_run(tmp_path, "deploy", "pair", {"engine": {"enable_prompt_tokens_details": True}}, tenants)
    assert rc != 0, out[-3000:]
    assert "engine.enable_prompt_tokens_details=true with 1 tenant(s) at the door" in out, out[-3000:]
    assert "allow_cached_tokens_across_tenants: true" in out
    assert f"PLAY [{NODE_PLAYS['deploy']}]" not in out
    acknowledged = {"engine": {"enable_prompt_tokens_details": True}, "allow_cached_tokens_across_tenants": True}
    rc, out, _ = entry_run(tmp_path / "ack", "deploy", "pair", acknowledged, tenants)
    assert f"PLAY [{NODE_PLAYS['deploy']}]" in out, out[-3000:]
