"""What the engine is told about exists inside its container (issue 9, items 2 and 5, on the served pair).

The pair's tuned MoE table is copied to every node and mounted read-only at the folder VLLM_TUNED_CONFIG_FOLDER
names; a profile whose table is expected on the node but is not there is refused before the start, with the path
and the consequence, and nothing is restarted. The pair's ranks run with restart policy `no`.
"""

import hashlib
import json
import time

import pytest

from tests.profiles import ROOT, profiles
from tests.testbed import service_faults as sf
from tests.testbed.helpers import node_exec, playbook

pytestmark = pytest.mark.testbed
FOLDER = profiles()["testbed"]["env"]["VLLM_TUNED_CONFIG_FOLDER"]
TABLES = sorted((ROOT / profiles()["testbed"]["tuned_config_dir"]).glob("E=*.json"))


def test_pair_table_is_mounted_read_only_at_the_env_folder_on_every_rank(served_pair):
    assert TABLES, "the testbed profile names no tuned table"
    for index in range(2):
        container = f"spark-serve-rank{index}"
        rc, out = node_exec(
            index, f"docker inspect -f '{{{{json .Mounts}}}} {{{{json .HostConfig.RestartPolicy}}}}' {container}"
        )
        assert rc == 0, out
        mounts_json, policy_json = out.rsplit(" ", 1)
        mounts = {m["Destination"]: m for m in json.loads(mounts_json)}
        assert FOLDER in mounts and mounts[FOLDER]["RW"] is False, mounts
        assert json.loads(policy_json)["Name"] == "no", policy_json  # a pair is restarted as a whole, in order
        for table in TABLES:
            rc, inside = node_exec(index, f"docker exec {container} sha256sum '{FOLDER}/{table.name}'")
            assert rc == 0, inside
            assert inside.split()[0] == hashlib.sha256(table.read_bytes()).hexdigest(), (index, table.name)
            rc, out = node_exec(index, f"docker exec {container} sh -c 'echo x >> \"{FOLDER}/{table.name}\"'")
            assert rc != 0, "the table must be mounted read-only"
    print(f"\n[tuned tables] {[t.name for t in TABLES]} at {FOLDER} on both ranks, read-only, sha256 equal")


def test_table_missing_on_the_node_is_refused_before_the_start(served_pair):
    """The profile tells the engine to read tuned tables from a folder but ships none (no tuned_config_dir), so the
    table would have to be on the node or in the image: it is not, the start is refused and nothing restarts."""
    sf.ensure_serving()
    shipped = profiles()
    shipped["testbed"] = {key: value for key, value in shipped["testbed"].items() if key != "tuned_config_dir"}
    shipped["testbed"]["engine"] = dict(shipped["testbed"]["engine"], max_num_seqs=3)  # a change: a start is due
    # tests/profiles.py renders the image with its defaults; the test bed's inventory chooses its own image.
    shipped["testbed"]["image"] = "{{ spark_serve_image }}"
    before = [sf.container_identity(i) for i in range(2)]
    started = time.monotonic()
    rc, out = sf.deploy("-e", json.dumps({"spark_serve_profiles": shipped}))
    seconds = time.monotonic() - started
    print(f"\n[missing tuned table] refused in {seconds:.1f} s (whole run), rc={rc}")
    assert rc != 0, out[-4000:]
    reason = f"{FOLDER} (env VLLM_TUNED_CONFIG_FOLDER): the engine would silently fall back to its default MoE kernels"
    assert reason in out, out[-4000:]
    assert "Nothing was started" in out, out[-3000:]
    assert [sf.container_identity(i) for i in range(2)] == before, "a refused start restarted a rank"
    assert sf.health() == 200


def test_a_version_without_a_catalog_is_checked_by_the_images_own_parser_before_the_start(served_pair):
    """A nightly's profile (engine_version with no flag catalog) validates, saying its flags are the image's to judge;
    the deploy then asks the served image's own vLLM, which refuses a flag no catalog knows, naming every rank and
    its version, before any rank stops. No engine starts: the refusal comes first."""
    sf.ensure_serving()
    before = [sf.container_identity(i) for i in range(2)]
    override = {"engine_version": "0.34.0.dev1", "extra_args": ["--spark-serve-no-such-flag", "1"]}
    rc, out = sf.deploy("-e", json.dumps({"spark_serve_profile_overrides": override}))
    assert rc != 0, out[-4000:]
    assert "no flag catalog for vLLM 0.34.0.dev1" in out and "the image's own vLLM parses" in out, out[-4000:]
    for rank in (0, 1):
        assert (
            f"rank {rank} (node-{rank}): vLLM 0.32.0+cpu in the image refuses its argv: vllm: error: "
            "unrecognized arguments: --spark-serve-no-such-flag 1"
        ) in out, out[-4000:]
    assert "nothing was started" in out
    assert [sf.container_identity(i) for i in range(2)] == before, "a refused start restarted a rank"
    assert sf.health() == 200


@pytest.mark.extended
def test_status_reports_a_container_edited_by_hand_and_deploy_restores_its_policy(served_pair):
    """playbooks/status.yml compares every running rank with its rendered compose spec: a restart policy changed by
    hand on one rank is reported as drift, field by field; the deploy stage re-applies the spec's policy in place."""
    sf.ensure_serving()
    # The shipped profile first: an earlier test (a rollback) may have left another configuration serving.
    rc, out = sf.deploy()
    assert rc == 0, out[-6000:]
    rc, out = playbook("playbooks/status.yml")
    assert rc == 0 and "every rank runs the spec the deploy rendered" in out, out[-3000:]
    before = [sf.container_identity(i) for i in range(2)]
    rc, out = node_exec(1, "docker update --restart always spark-serve-rank1")
    assert rc == 0, out
    try:
        rc, out = playbook("playbooks/status.yml")
        assert rc != 0, out[-3000:]
        drift = out[out.index("drift: ") :][:1500]
        assert "node-1 (rank 1)" in drift and "restart spec" in drift and "always" in drift, drift
        assert "node-0 (rank 0)" not in drift, drift
        started = time.monotonic()
        rc, out = sf.deploy()
        seconds = time.monotonic() - started
        assert rc == 0, out[-6000:]
        assert sf.recap(out)["node-1"]["changed"] >= 1, sf.recap(out)
    finally:
        node_exec(1, "docker update --restart no spark-serve-rank1")
    rc, policy = node_exec(1, "docker inspect -f '{{.HostConfig.RestartPolicy.Name}}' spark-serve-rank1")
    assert policy.strip() == "no"
    assert [sf.container_identity(i) for i in range(2)] == before, "re-applying the policy restarted a rank"
    print(f"\n[drift] status.yml named rank 1's restart policy; deploy re-applied it in place in {seconds:.0f} s")
    rc, out = playbook("playbooks/status.yml")
    assert rc == 0, out[-3000:]
