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


@pytest.mark.extended
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


def restart_docker_until_served(content, timeout_s=300):
    """`service docker restart` on node 0, then a chat through the front door once /health is 200, until one answers
    (bounded in time and polls): (seconds from the restart's return to that answer, the answer or None)."""
    rc, out = node_exec(0, "service docker restart", timeout=180)
    restarted = time.monotonic()
    assert rc == 0, out
    answered = None
    for _ in range(timeout_s):  # a poll takes 1 s at least: the deadline ends it first
        if time.monotonic() - restarted > timeout_s:
            break
        if sf.health() == 200:
            try:
                with sf.post("/v1/chat/completions", sf.chat(content), timeout=30) as response:
                    answered = json.load(response)
                    break
            except OSError:
                pass  # the engine still loads behind the door
        time.sleep(1)
    return time.monotonic() - restarted, answered


@pytest.mark.extended
def test_single_node_serves_again_after_three_docker_restarts(single):
    """Seed 004's `unless-stopped` (the default on one node): the node's Docker daemon restarts three times in a row
    (as an upgrade of Docker may), each time once the node serves again; the engine container comes back by itself
    each time (same container, new start) and serves, the watchdog that looks every 3 s meanwhile never trips (a look
    against the head before the daemon came back never counts toward acting on the new start), and status.yml
    judges only the current run."""
    rc, out = node_exec(
        0, "docker inspect -f '{{.Id}} {{.State.StartedAt}} {{.HostConfig.RestartPolicy.Name}}' spark-serve-rank0"
    )
    assert rc == 0, out
    container, started_at, policy = out.split()
    assert policy == "unless-stopped", out
    stop_watchdog = sf.fresh_watchdog()
    try:
        for restart in range(1, 4):
            seconds, answered = restart_docker_until_served(f"back after Docker restart {restart}?")
            trips = [e for e in sf.watchdog_events() if e["event"] == "service unhealthy"]
            print(f"\n[Docker restart {restart} of 3, single node] served again {seconds:.0f} s after it returned")
            assert not trips, f"restart {restart}: the watchdog stopped the head Docker brought back: {trips}"
            assert answered and answered["usage"]["completion_tokens"] > 0, f"restart {restart}: not serving"
            rc, out = node_exec(0, "docker inspect -f '{{.Id}} {{.State.StartedAt}}' spark-serve-rank0")
            now_container, now_started_at = out.split()
            assert now_container == container, "Docker's policy, not a redeploy, restarted it"
            assert now_started_at != started_at, f"restart {restart}: the head was not restarted"
            started_at = now_started_at
        assert sf.watchdog_looks(2), "the watchdog stopped looking"  # its looks at the service serving again
    finally:
        node_exec(0, stop_watchdog)
    events = sf.watchdog_events()
    print(f"\n[Docker restarts, single node] watchdog events: {[e['event'] for e in events]}")
    assert not [e for e in events if e["event"] == "service unhealthy"], events
    assert sf.health() == 200, "the watchdog stopped the service it should have left alone"
    # status.yml right after: the previous runs' shutdown errors in the same container's log must not make it call
    # the serving rank dead (it did in 1 of 2 runs before vllm_ranks read the log since .State.StartedAt).
    rc, out = node_exec(0, "docker logs spark-serve-rank0 2>&1 | grep -c 'version 0.32.0'")
    assert rc == 0 and int(out.strip()) >= 4, "the log does not hold the four runs: nothing to judge apart"
    rc, out = playbook("playbooks/status.yml", SINGLE)
    assert rc == 0 and "all 1 rank(s) alive" in out, out[-3000:]
