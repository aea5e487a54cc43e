"""site.yml stops at validation with a clear report, on inventories that touch no host; vllm_args ad hoc."""

import json
import re
import sys

import pytest
import yaml

from tests.profiles import ROOT, local_inventory, profiles, site_check, validate_argv
from tests.runner import BIN, ansible_playbook_argv, run, write_api_key

pytestmark = pytest.mark.playbook


@pytest.mark.parametrize("name", sorted(profiles()))
def test_site_check_renders_every_shipped_profile(tmp_path, name):
    rc, out, state = site_check(tmp_path, name)
    assert rc == 0, out
    assert "effective block" in out
    assert "vllm serve" in out
    assert not state.exists(), "check mode wrote the rendered arguments"


def test_a_real_profile_without_a_key_is_refused_unless_it_allows_it(tmp_path):
    group = local_inventory(tmp_path, "pair") / "group_vars" / "all.yml"
    keyless = {k: v for k, v in yaml.safe_load(group.read_text()).items() if k != "vllm_service_api_key_file"}
    group.write_text(yaml.safe_dump(keyless))
    rc, out = run(validate_argv(group.parents[1], tmp_path / "state"))
    assert rc != 0
    assert 'vllm_service_api_key_file="": a gb10 profile without an API key (rule: the API of real Sparks' in out, out
    assert "nothing was changed" in out
    group.write_text(yaml.safe_dump(dict(keyless, spark_serve_profile_overrides={"allow_unauthenticated": True})))
    rc, out = run(validate_argv(group.parents[1], tmp_path / "state"))
    assert rc == 0, out[-3000:]


def test_a_key_the_door_cannot_hold_is_refused_at_validation(tmp_path):
    inventory = local_inventory(tmp_path, "pair")
    key = tmp_path / "api-key"
    key.write_text("not a token\n")  # a space: the door compares the header as one word
    rc, out = run(validate_argv(inventory, tmp_path / "state"))
    assert rc != 0
    assert f"front_door_api_key_file={key}: the key must be 16 to 512 letters, digits or ._~+/=-" in out, out[-3000:]
    assert "not a token" not in out, "the refusal must not print the key"
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    ("fault", "refusal"),
    [
        ("missing key file", "front_door_api_key_file={key}: no such file on the controller (rule: the key is read"),
        ("node without address", "node-1: roce_network_address is not set (rule: every node of a multi-node"),
    ],
)
def test_an_inventory_gap_is_refused_by_name_before_any_rank_is_rendered(tmp_path, fault, refusal):
    """The two gaps that used to surface as Ansible's own words ('... is undefined', a failed file lookup) before
    the refusal: the refusal is now the first and only error."""
    inventory = local_inventory(tmp_path, "pair")
    key = tmp_path / "api-key"
    if fault == "missing key file":
        key.unlink()
    else:
        hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
        del hosts["all"]["children"]["spark_nodes"]["hosts"]["node-1"]["roce_network_address"]
        (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    rc, out = run(validate_argv(inventory, tmp_path / "state"))
    assert rc != 0
    assert refusal.format(key=key) in out, out[-3000:]
    assert out.count("[ERROR]") == 1, out[-3000:]
    assert "is undefined" not in out and "lookup plugin" not in out, out[-3000:]


def test_the_twins_addresses_are_refused_at_validation_every_node_at_once(tmp_path):
    """Dual rail (roles/roce_network, module_utils/roce_rails.py): the twin needs an address of its own per host, on a
    subnet of its own; every node's problems in one refusal, each naming the host, the variable, its value and the
    rule, before any node is reached."""
    inventory = local_inventory(tmp_path, "pair")
    group = inventory / "group_vars" / "all.yml"
    group.write_text(
        yaml.safe_dump(dict(yaml.safe_load(group.read_text()), roce_network_nccl_ib_hca_twins=["roceP2p1s0f1:1"]))
    )
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    hosts["all"]["children"]["spark_nodes"]["hosts"]["node-1"]["roce_network_twin_addresses"] = {
        "roceP2p1s0f1": "127.0.0.20"
    }
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    rc, out = run(validate_argv(inventory, tmp_path / "state"))
    assert rc != 0
    assert "2 problem(s) with the rails; nothing was changed" in out, out[-3000:]
    assert "- node-0: roce_network_twin_addresses has no address for roceP2p1s0f1 (rule: every twin of" in out
    assert (
        "- node-1: roce_network_twin_addresses.roceP2p1s0f1=127.0.0.20 is on 127.0.0.0/24, the subnet of "
        "roce_network_address 127.0.0.11 (rule: each rail of a node on a subnet of its own"
    ) in out, out[-3000:]
    assert out.count("[ERROR]") == 1 and not (tmp_path / "state").exists(), out[-3000:]


def test_bad_profile_stops_at_validation_with_every_violation(tmp_path):
    overrides = {
        "engine": {
            "mamba_ssm_cache_dtype": "float32",
            "prefix_cache_retention_interval": 1600,
            "speculative_config": {"num_speculative_tokens": 4},
            "max_num_seq": 2,
        }
    }
    rc, out, state = site_check(tmp_path, "pair", overrides)
    assert rc != 0
    assert "engine.prefix_cache_retention_interval=1600" in out
    assert "1616" in out
    assert "engine.max_num_seq=2" in out
    assert "nothing was written or changed" in out
    assert not state.exists()


def test_schema_error_names_the_path(tmp_path):
    rc, out, _ = site_check(tmp_path, "single", {"model": {"revision": "main"}, "nodes": 65})
    assert rc != 0
    # Each problem on its own line, starting with the field's path and its value.
    assert re.search(r"^- model\.revision: 'main' .*pattern", out, re.M), out
    assert re.search(r"^- nodes: 65 .*maximum of 64", out, re.M), out


def test_default_inventory_is_the_pair_and_single_swaps_to_tp1(tmp_path):
    write_api_key(tmp_path)
    rc, out = run(validate_argv(None, tmp_path))
    assert rc == 0, out
    assert "profile pair, rank 1 on spark-b" in out
    assert "--tensor-parallel-size 2" in out and "--headless" in out
    rc, out = run(validate_argv("inventories/spark-single", tmp_path))
    assert rc == 0, out
    assert "profile single, rank 0 on spark-a" in out
    assert "--tensor-parallel-size 1" in out and "--nnodes" not in out


def adhoc(args, *extra):
    return run(
        [
            str(BIN / "ansible"),
            "localhost",
            "-c",
            "local",
            "-i",
            "localhost,",
            "-M",
            "library",
            "-m",
            "vllm_args",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            "-a",
            json.dumps(args),
            *extra,
        ]
    )


TINY = {
    "model": "tiny",
    "engine_version": "0.32.0",
    "platform": "cpu",
    "model_config": "tests/engine/models/tiny-llama/config.json",
    "engine": {"max_num_seqs": 4, "enable_prefix_caching": True},
}


def test_module_runs_ad_hoc_and_fails_with_violations():
    rc, out = adhoc(TINY)
    assert rc == 0, out
    assert '"--max-num-seqs"' in out and '"effective_block": 128' in out
    rc, out = adhoc(dict(TINY, engine={"max_num_seqs": "x", "no_such_flag": 1}))
    assert rc != 0
    assert "engine.max_num_seqs='x'" in out and "engine.no_such_flag=1" in out


def test_module_check_mode_and_diff_then_idempotent(tmp_path):
    dest = tmp_path / "args.json"
    args = dict(TINY, dest=str(dest))
    rc, out = adhoc(args, "--check", "--diff")
    assert rc == 0 and "CHANGED" in out, out
    assert '+    "--max-num-seqs",' in out
    assert not dest.exists()
    rc, out = adhoc(args)
    assert rc == 0 and "CHANGED" in out and dest.exists()
    assert json.loads(dest.read_text())["argv"][:3] == ["vllm", "serve", "tiny"]
    rc, out = adhoc(args)
    assert rc == 0 and "SUCCESS" in out, out
    rc, out = adhoc(dict(args, engine=dict(TINY["engine"], max_num_seqs=8)), "--check", "--diff")
    assert rc == 0 and '     "--max-num-seqs",\n-    "4"\n+    "8"\n' in out, out  # flags in sorted order
    assert json.loads(dest.read_text())["argv"].count("4") == 1


def test_ansible_doc_renders_the_module_documentation():
    # ansible-doc exits 0 with only a warning for a module it cannot find: the rendered header is the proof.
    rc, out = run([str(BIN / "ansible-doc"), "-M", "library", "vllm_args"])
    assert rc == 0, out
    assert f"> MODULE vllm_args ({ROOT / 'library' / 'vllm_args.py'})" in out, out
    assert re.search(r"^= model_config  ", out, re.M), "model_config is rendered as a required option"
    assert re.search(r"^- effective_block  ", out, re.M), "effective_block is rendered as a return value"
    rc, out = run([str(BIN / "ansible-doc"), "-M", "library", "vllm_no_such_module"])
    assert "> MODULE" not in out and "vllm_no_such_module was not found" in out


def test_the_gb10_image_built_on_the_head_renders_and_an_unpinned_base_is_refused(tmp_path):
    inventory = local_inventory(tmp_path, "pair")
    args = ansible_playbook_argv("site.yml", "--tags", "validate", "-i", str(inventory))
    state = tmp_path / "state"
    pinned = "nvcr.example/nvidia/vllm@sha256:" + "ab" * 32
    rc, out = run([*args, "-e", f"spark_serve_controller_dir={state}", "-e", f"spark_serve_image_base={pinned}"])
    assert rc == 0, out[-3000:]
    specs = [json.loads((state / "pair" / f"rank{rank}.spec.json").read_text()) for rank in (0, 1)]
    assert {spec["image"] for spec in specs} == {specs[0]["image"]}
    assert re.fullmatch(r"spark-serve/gb10:[0-9a-f]{16}", specs[0]["image"]), specs[0]["image"]
    for base in ("nvcr.example/nvidia/vllm:25.11", ""):
        rc, out = run(
            [*args, "-e", f"spark_serve_controller_dir={tmp_path / 'refused'}", "-e", f"spark_serve_image_base={base}"]
        )
        assert rc != 0
        assert f"image.base={base!r}: " in out and "pin the base of image.build 'gb10'" in out, out[-3000:]
        assert "[rule: image-base-pinned]" in out and "Traceback" not in out
        assert not (tmp_path / "refused").exists()
