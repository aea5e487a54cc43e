"""The single-node variant: the same site.yml with inventories/testbed-single (one Spark, TP1) on test node 0."""

import json
import sys
import time

import pytest

from tests.testbed import service_faults as sf
from tests.testbed.helpers import ROOT, node_exec, playbook, run

pytestmark = pytest.mark.testbed
SINGLE = "inventories/testbed-single"


@pytest.fixture(scope="module")
def single(testbed):
    rc, out = run([sys.executable, str(ROOT / "tests/testbed/engine_image.py"), "push"], timeout=3600)
    assert rc == 0, out[-3000:]
    rc, out = playbook("molecule/shared/dgx_os.yml", SINGLE)
    assert rc == 0, out[-3000:]
    # A pair deployed earlier on these nodes leaves its worker on node 1, outside this inventory: a user moving
    # from the pair to one Spark stops it too. Node 0's own containers are the staged start's job.
    node_exec(1, "docker rm -f spark-serve-rank1 >/dev/null 2>&1; true")
    started = time.monotonic()
    rc, out = playbook("site.yml", SINGLE, timeout=3600)
    print(f"\n[site.yml single] {time.monotonic() - started:.0f} s")
    assert rc == 0, out[-6000:]
    return out


def test_single_node_serves_with_tp1_and_no_rendezvous(single):
    assert "ready: /health 200 and all 1 rank(s) running" in single
    rc, cmd = node_exec(0, "docker inspect -f '{{json .Config.Cmd}}' spark-serve-rank0")
    argv = json.loads(cmd)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "1", argv
    assert not {"--nnodes", "--headless", "--master-addr"} & set(argv), argv
    with sf.post("/v1/chat/completions", sf.chat("hello single Spark")) as response:
        answer = json.load(response)
    assert answer["usage"]["completion_tokens"] > 0
    rc, out = playbook("playbooks/status.yml", SINGLE)
    assert rc == 0 and "all 1 rank(s) alive" in out, out[-3000:]


def test_single_node_rerun_changes_nothing(single):
    before = sf.container_identity(0)
    rc, out = sf.deploy(inventory=SINGLE)
    assert rc == 0, out[-6000:]
    assert sf.recap(out)["node-0"]["changed"] == 0, sf.recap(out)
    assert sf.container_identity(0) == before
