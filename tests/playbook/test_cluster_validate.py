"""Four Sparks behind a switch: the shipped spark-quad inventory validates, one rank flag set per node."""

import re

import pytest

from tests.runner import BIN, run, write_api_key

pytestmark = pytest.mark.playbook


def test_spark_quad_validates_with_rank_flags_for_four_nodes(tmp_path):
    write_api_key(tmp_path)
    rc, out = run(
        [
            str(BIN / "ansible-playbook"),
            "site.yml",
            "-i",
            "inventories/spark-quad",
            "--tags",
            "validate",
            "-e",
            f"spark_serve_controller_dir={tmp_path}",
        ]
    )
    assert rc == 0, out
    ranks = re.findall(r"--nnodes 4 --node-rank (\d) --master-addr 192\.168\.100\.10( --headless)?", out)
    assert ranks == [("0", ""), ("1", " --headless"), ("2", " --headless"), ("3", " --headless")], out
    assert out.count("--tensor-parallel-size 4") == 4 and "--pipeline-parallel-size" not in out
    assert sorted(p.name for p in (tmp_path / "quad").iterdir()) == [f"rank{r}.args.json" for r in range(4)]
