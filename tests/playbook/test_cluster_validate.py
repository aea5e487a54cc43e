"""Four Sparks behind a switch: the shipped spark-quad inventory validates, one rank flag set per node."""

import json
import re

import pytest

from tests.runner import PINNED_IMAGE_ARGS, ansible_playbook_argv, run, write_api_key

pytestmark = pytest.mark.playbook


def test_spark_quad_validates_with_rank_flags_for_four_nodes(tmp_path):
    write_api_key(tmp_path)
    rc, out = run(
        ansible_playbook_argv(
            "site.yml",
            "-i",
            "inventories/spark-quad",
            "--tags",
            "validate",
            *PINNED_IMAGE_ARGS,
            "-e",
            f"spark_serve_controller_dir={tmp_path}",
        )
    )
    assert rc == 0, out
    flags = r"--nnodes 4 --node-rank (\d) --master-addr 192\.168\.100\.10 --master-port 29501( --headless)?"
    # The ranks render in parallel, so their lines come in the order the hosts finish.
    ranks = sorted(re.findall(flags, out))
    assert ranks == [("0", ""), ("1", " --headless"), ("2", " --headless"), ("3", " --headless")], out
    assert out.count("--tensor-parallel-size 4") == 4 and "--pipeline-parallel-size" not in out
    assert sorted(p.name for p in (tmp_path / "quad").iterdir()) == [f"rank{r}.spec.json" for r in range(4)]
    spec = json.loads((tmp_path / "quad" / "rank2.spec.json").read_text())
    assert (spec["host"], spec["rank"], spec["container"]["restart"]) == ("spark-c", 2, "no"), spec
    assert spec["env"]["NCCL_IB_GID_INDEX"] == "<from spark-c: RoCE v2 GID index of enp1s0f1np1>", spec["env"]
    assert spec["env"]["VLLM_HOST_IP"] == "192.168.100.12" and spec["env"]["HF_HUB_OFFLINE"] == "1", spec["env"]
    assert {"src": "/var/lib/spark-serve/huggingface", "dest": "/var/lib/spark-serve/huggingface", "ro": True} in (
        spec["mounts"]
    ), spec["mounts"]
    assert spec["env_file"] == [] and spec["argv"][-2:] == ["29501", "--headless"], spec
