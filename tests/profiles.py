"""Load the shipped profiles the way Ansible sees them and map one to vllm_args parameters."""

import copy
import functools
import json
from pathlib import Path

import yaml
from jinja2.nativetypes import NativeEnvironment

from tests.runner import PINNED_IMAGE_ARGS, ansible_playbook_argv, run

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "schemas" / "profile.schema.json").read_text())


def render(value, env=None):
    """Template strings rendered like Ansible does with no inventory overrides (defaults apply; a template that is one
    expression keeps its type, as the shipped engine image's mapping)."""
    env = env or NativeEnvironment()
    if isinstance(value, dict):
        return {k: render(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, env) for v in value]
    if isinstance(value, str) and "{{" in value:
        return env.from_string(value).render()
    return value


@functools.cache
def _loaded_group_vars():
    return render(yaml.safe_load((ROOT / "group_vars" / "all" / "profiles.yml").read_text()))


def group_vars():
    """A fresh copy each call (parsed once per process: the case tables load a profile thousands of times)."""
    return copy.deepcopy(_loaded_group_vars())


def profiles():
    return group_vars()["spark_serve_profiles"]


def profile(name):
    return copy.deepcopy(profiles()[name])


def vllm_args_params(prof, rank=0, master_addr="192.0.2.10", config_as_path=False):
    """The profile's share of the parameters roles/vllm_service/tasks/render.yml passes to vllm_args for one rank
    (model_config read here, or passed as its path the way the role passes it, with the tuned-table folder left for
    the module to list); tests/unit/test_profiles.py pins these names to the role's."""
    config_path = ROOT / prof["model"]["config"]
    model_config = str(config_path) if config_as_path else json.loads(config_path.read_text())
    tuned = ROOT / prof["tuned_config_dir"] if "tuned_config_dir" in prof else None
    params = {
        "engine": prof["engine"],
        "env": prof.get("env", {}),
        "engine_version": prof["engine_version"],
        "platform": prof["platform"],
        "cuda_version": prof.get("cuda_version"),
        "model": prof["model"]["id"],
        "revision": prof["model"]["revision"],
        "trust_remote_code": prof["model"].get("trust_remote_code"),
        "allow_unsafe_env": prof.get("allow_unsafe_env"),
        "model_config": model_config,
        "nodes": prof["nodes"],
        "node_rank": rank,
        "master_addr": master_addr,
        "extra_args": prof.get("extra_args", []),
        "moe_table": prof.get("moe_table"),
        "tuned_config_dir": str(tuned) if tuned else None,
        "tuned_config_files": sorted(p.name for p in tuned.iterdir()) if tuned and tuned.is_dir() else None,
    }
    if config_as_path:
        del params["tuned_config_files"]
    return {key: value for key, value in params.items() if value is not None}


def set_in(path, value):
    """A profile mutation: set the dotted path to value (creating mappings on the way)."""

    def mutate(prof):
        node = prof
        keys = path.split(".")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value

    return mutate


def extra(*args):
    """A profile mutation: replace extra_args."""

    def mutate(prof):
        prof["extra_args"] = list(args)

    return mutate


def local_inventory(tmp_path, profile_name, overrides=None):
    """An inventory whose nodes are connection=local names: validation must not contact them anyway."""
    nodes = profiles()[profile_name]["nodes"]
    inv = tmp_path / "inventory"
    (inv / "group_vars").mkdir(parents=True)
    hosts = {
        f"node-{i}": {"ansible_connection": "local", "roce_network_address": f"127.0.0.{10 + i}"} for i in range(nodes)
    }
    (inv / "hosts.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {"spark_nodes": {"hosts": hosts}},
                    "hosts": {
                        "localhost": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                        }
                    },
                }
            }
        )
    )
    key = tmp_path / "api-key"
    key.write_text("sk-local-test-key\n")
    group = {
        "spark_serve_profile": profile_name,
        "spark_serve_profile_overrides": overrides or {},
        "vllm_service_api_key_file": str(key),  # as every shipped real inventory names one
        "spark_serve_image_digest": PINNED_IMAGE_ARGS[1].split("=", 1)[1],  # as README step 4 has a user set
    }
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(group))
    return inv


def validate_argv(inventory, state):
    """`ansible-playbook site.yml --check --tags validate` on `inventory` (None: the default one), writing under
    `state` as its controller folder."""
    chosen = ["-i", str(inventory)] if inventory else []
    playbook = ansible_playbook_argv("site.yml", "--check", "--tags", "validate")
    return [*playbook, *chosen, *PINNED_IMAGE_ARGS, "-e", f"spark_serve_controller_dir={state}"]


def site_check(tmp_path, profile_name, overrides=None):
    inv = local_inventory(tmp_path, profile_name, overrides)
    state = tmp_path / "state"
    rc, out = run(validate_argv(inv, state))
    return rc, out, state
