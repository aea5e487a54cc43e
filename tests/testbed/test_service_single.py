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


def test_what_validate_shows_is_what_runs_and_hashes_the_same(single):
    """Nothing on one node is marked (no fabric), so validate's configuration hash is the running container's."""
    ranks = sf.validated_vs_running(SINGLE, "testbed-single", 1)
    print(f"\n[validate spec vs docker inspect, single] {ranks}")
    assert ranks == [{"rank": 0, "differences": [], "marked": [], "argv": ranks[0]["argv"]}], ranks


def test_single_node_serves_again_after_a_docker_restart(single):
    """Seed 004's `unless-stopped` (the default on one node): the node's Docker daemon restarts, the engine
    container comes back by itself (same container, new start) and serves again, and status.yml judges only the
    current run."""
    rc, out = node_exec(
        0, "docker inspect -f '{{.Id}} {{.State.StartedAt}} {{.HostConfig.RestartPolicy.Name}}' spark-serve-rank0"
    )
    assert rc == 0, out
    container, started_at, policy = out.split()
    assert policy == "unless-stopped", out
    stop_watchdog = sf.fresh_watchdog()  # its looks must leave the reloading engine alone
    rc, out = node_exec(0, "service docker restart", timeout=180)
    restarted = time.monotonic()
    assert rc == 0, out
    deadline, answered, polls = restarted + 300, None, 0
    while answered is None and time.monotonic() < deadline and polls < 600:
        polls += 1
        if sf.health() == 200:
            try:
                with sf.post("/v1/chat/completions", sf.chat("back after a Docker restart?"), timeout=30) as response:
                    answered = json.load(response)
            except OSError:
                answered = None
        if answered is None:
            time.sleep(1)
    seconds = time.monotonic() - restarted
    assert sf.watchdog_looks(2), "the watchdog stopped looking"  # its looks at the service once it serves again
    node_exec(0, stop_watchdog)
    events = sf.watchdog_events()
    print(
        f"\n[Docker restart, single node] served again {seconds:.0f} s after `service docker restart` returned; "
        f"watchdog events meanwhile: {[e['event'] for e in events]}"
    )
    assert answered and answered["usage"]["completion_tokens"] > 0, f"not serving {seconds:.0f} s after the restart"
    assert not [e for e in events if e["event"] == "service unhealthy"], events
    assert sf.health() == 200, "the watchdog stopped the service it should have left alone"
    rc, out = node_exec(0, "docker inspect -f '{{.Id}} {{.State.StartedAt}}' spark-serve-rank0")
    now_container, now_started_at = out.split()
    assert now_container == container and now_started_at != started_at, "Docker's policy, not a redeploy, restarted it"
    # status.yml right after: the previous run's shutdown error in the same container's log must not make it call
    # the serving rank dead (it did in 1 of 2 runs before vllm_ranks read the log since .State.StartedAt).
    rc, out = node_exec(0, "docker logs spark-serve-rank0 2>&1 | grep -c 'version 0.32.0'")
    assert rc == 0 and int(out.strip()) >= 2, "the log holds one run only: nothing to judge apart"
    rc, out = playbook("playbooks/status.yml", SINGLE)
    assert rc == 0 and "all 1 rank(s) alive" in out, out[-3000:]
