"""action_plugins/vllm_staged_start.py run in-process against simulated nodes (Rank.run patched: each node
answers docker, compose and ss commands from a script of snapshots), and library/vllm_staged_start.py, its
documentation stub."""

import runpy
import shlex
import subprocess
from pathlib import Path
from unittest import mock

import pytest
import yaml
from ansible.errors import AnsibleActionFail
from ansible.modules import vllm_staged_start as staged_start_doc
from ansible.plugins.action import vllm_staged_start

from tests.module_harness import check_returns, run_module

RETURNS = yaml.safe_load(staged_start_doc.RETURN)
READY = ["Loading weights took 3.1 s", "Starting vLLM API server 0 on http://0.0.0.0:8000"]
LOADING = ["world_size=2 rank=1", "Loading weights took 3.1 s"]
DEAD = ["world_size=2 rank=1", "Traceback (most recent call last):", "RuntimeError: gloo lost rank 0"]


STACKS = """=== pid 1: /sbin/docker-init -- vllm serve m --headless
Error: Failed to find python version from target process
=== pid 57: /opt/vllm/bin/python /opt/vllm/bin/vllm serve m --headless
Process 57: /opt/vllm/bin/python /opt/vllm/bin/vllm serve m --headless
Python v3.11.2 (/opt/vllm/bin/python3.11)

Thread 57 (idle): "MainThread"
    recv_into (gloo/pair.py:88)
    init_process_group (torch/distributed/distributed_c10d.py:1690)"""


class Node:
    """One simulated node: every look at its rank returns the next snapshot (state, exit code, health, log lines)
    of its script and then keeps the last one."""

    def __init__(
        self,
        script,
        listeners="",
        up=(0, "", ""),
        links=("up 9000",),
        unreachable="",
        port=(0, "", ""),
        evidence=("3 SSS 100 4096",),
        stacks="",
    ):
        self.script, self.listeners, self.up_answer = list(script), listeners, up
        self.evidence = list(evidence)  # processes, states, CPU ticks, I/O bytes: sleeping and still by default
        self.stacks = stacks  # what py-spy dumps of its processes
        self.links, self.unreachable, self.port = list(links), unreachable, port  # sysfs looks, ping, master port
        self.seen = 0
        self.probes = []
        self.meminfo = "MemTotal:       124000000 kB\nMemAvailable:   120000000 kB\n"
        self.wipe_answer = (0, "", "")


@pytest.fixture()
def nodes(monkeypatch):
    """{host: Node}; `events` lists (host, what) in the order the plugin acted."""
    cluster, events = {}, []

    def run(rank, command, timeout=60):
        node = cluster[rank.host]
        if " down --timeout " in command:
            events.append((rank.host, "down" if " --timeout 10 " in command else "down after a failure"))
            return 0, "", ""
        if " up -d --no-recreate" in command:
            events.append((rank.host, "up"))
            return node.up_answer
        if command == "cat /proc/meminfo":
            return 0, node.meminfo, ""
        if command.startswith("ss -ltnpH"):
            return 0, node.listeners, ""
        if command.startswith("for c in $(docker ps -q)"):
            return 0, "/other-engine 4242\n", ""
        if command.startswith("[ ! -d /var/lib/spark-serve/vllm-cache/"):
            events.append((rank.host, "wipe"))
            return node.wipe_answer
        if command.startswith("docker rm -f"):
            events.append((rank.host, command.split()[3]))
            return 0, "", ""
        if command.startswith("docker inspect"):
            state, code, health, lines = node.script[min(node.seen, len(node.script) - 1)]
            link = node.links[min(node.seen, len(node.links) - 1)]
            evidence = node.evidence[min(node.seen, len(node.evidence) - 1)]
            node.seen += 1
            return 0, f"{state} {code}\n{health}\n{link}\n{evidence}\n" + "\n".join(lines) + "\n", ""
        if command.startswith("for a in"):
            node.probes.append("ping")
            assert "ping -M do -s 8972 " in command, command  # DF at the fabric's MTU
            return 0, node.unreachable, ""
        if command.startswith("timeout 3 bash -c 'exec 3<>/dev/tcp/10.0.0.1/29501'"):
            node.probes.append("port")
            return node.port
        if command.startswith("d=$(mktemp -d)") and "dump --nonblocking" in command:
            events.append((rank.host, "evidence"))
            log = "\n".join(node.script[-1][3])
            return 0, f"{node.stacks}\n{vllm_staged_start.Rank.LOG_MARK}\n{log}\n", ""
        raise AssertionError(f"unexpected command on {rank.host}: {command}")

    monkeypatch.setattr(vllm_staged_start.Rank, "run", run)
    monkeypatch.setattr(vllm_staged_start.Rank, "close", lambda rank: events.append((rank.host, "close")))
    monkeypatch.setattr(vllm_staged_start.Rank, "open", lambda rank: events.append((rank.host, "open")))
    return cluster, events


def spec(host, rank):
    return {"host": host, "rank": rank, "container": f"spark-serve-rank{rank}"}


def action(args, check_mode=False):
    task = mock.MagicMock(args=args, async_val=0, check_mode=check_mode, action="vllm_staged_start")
    connection = mock.MagicMock()
    connection._shell.tmpdir = None
    play_context = mock.MagicMock(check_mode=check_mode)
    return vllm_staged_start.ActionModule(task, connection, play_context, loader=None, templar=None)


def pair_args(tmp_path, **extra):
    return dict(
        ranks=[spec("spark-a", 0), spec("spark-b", 1)], compose_dir="/etc/spark-serve", **{"poll_s": 0, **extra}
    )


def test_workers_start_before_the_head_and_ready_needs_health_200(nodes, tmp_path):
    cluster, events = nodes
    cluster["spark-a"] = Node([("running", 0, "000", LOADING), ("running", 0, "200", READY)])
    cluster["spark-b"] = Node([("running", 0, "-", LOADING)])
    result = action(pair_args(tmp_path)).run(task_vars={})
    assert result["ready"] is True and result["changed"] is True and "failed" not in result
    assert [e for e in events if e[1] == "up"] == [("spark-b", "up"), ("spark-a", "up")]
    assert events.index(("spark-a", "down")) < events.index(("spark-b", "up")), "stale containers go first"
    assert events[:2] == [("spark-a", "open"), ("spark-b", "open")], "connections are made before any thread runs"
    assert result["timeline"][-1]["event"] == "head /health 200, every rank running"
    assert cluster["spark-a"].seen == 2, "the first look (health 000) is not ready"
    assert {host for host, what in events if what == "close"} == {"spark-a", "spark-b"}
    assert check_returns("vllm_staged_start", RETURNS, result) == []


def test_a_dead_worker_stops_every_rank_saves_logs_and_names_host_and_reason(nodes, tmp_path):
    cluster, events = nodes
    cluster["spark-a"] = Node([("running", 0, "000", LOADING)])
    cluster["spark-b"] = Node([("running", 0, "-", LOADING), ("exited", 1, "-", DEAD)])
    result = action(pair_args(tmp_path, log_dir=str(tmp_path / "logs"))).run(task_vars={})
    assert result["failed"] is True and result["ready"] is False
    assert (result["failed_rank"], result["failed_host"]) == (1, "spark-b")
    assert result["reason"] == "Traceback (most recent call last): -- RuntimeError: gloo lost rank 0"
    assert result["msg"].startswith("rank 1 (spark-b) failed first after ")
    downs = [host for host, what in events if what == "down"]
    assert downs[-2:] == ["spark-a", "spark-b"], "every rank is stopped after the failure, the head first"
    saved = sorted(path.rsplit("/", 1)[-1] for path in result["logs"])
    assert saved == ["rank0-spark-a.log", "rank1-spark-b.log"]
    assert "RuntimeError: gloo lost rank 0" in Path(result["logs"][1]).read_text()
    assert check_returns("vllm_staged_start", RETURNS, result) == []


def test_a_frozen_worker_is_blamed_with_its_evidence_not_the_head_that_waits_for_it(nodes, tmp_path):
    cluster, _ = nodes
    waiting = ["world_size=2 rank=0 distributed_init_method=tcp://10.0.0.1:29501 backend=gloo"]
    cluster["spark-a"] = Node([("running", 0, "000", waiting)], evidence=("4 SSSS 900 70000",))
    cluster["spark-b"] = Node(
        [("running", 0, "-", LOADING)], evidence=("3 SRS 400 5000", "3 TTT 450 6000", "3 TTT 450 6000")
    )
    cluster["spark-b"].stacks = STACKS
    result = action(pair_args(tmp_path, freeze_s=0, log_dir=str(tmp_path / "logs"))).run(task_vars={})
    assert (result["failed_rank"], result["failed_host"]) == (1, "spark-b")
    assert result["reason"].startswith("every process stopped (state T), 0.0 CPU s and 0 bytes of I/O in 0 s")
    assert result["reason"].endswith("no new log line; last line: Loading weights took 3.1 s")
    (stacks,) = result["stacks"]
    assert stacks.endswith("rank1-spark-b.stacks.txt") and Path(stacks).read_text().strip() == STACKS
    assert (
        "rank 1 (spark-b) pid 57 (/opt/vllm/bin/python /opt/vllm/bin/vllm serve m --headless) MainThread: "
        in (result["msg"])
    )
    assert "recv_into (gloo/pair.py:88)" in result["msg"] and "pid 1 (" not in result["msg"], "tini is no Python"
    assert check_returns("vllm_staged_start", RETURNS, result) == []


def test_ranks_that_sleep_while_they_wait_are_never_frozen(nodes, tmp_path):
    cluster, _ = nodes
    quiet = [("running", 0, "000", LOADING)] * 5
    cluster["spark-a"] = Node(quiet + [("running", 0, "200", READY)], evidence=("4 SSSS 900 70000",))
    cluster["spark-b"] = Node([("running", 0, "-", LOADING)], evidence=("3 SSD 450 6000",))
    assert action(pair_args(tmp_path, freeze_s=0)).run(task_vars={})["ready"] is True


HEAD_WAITING = ["world_size=2 rank=0 distributed_init_method=tcp://10.0.0.1:29501 backend=gloo"]
HEAD_SLEEPS = (
    "4 SSSS 900 70000 1:S:400:50000:vllm 2:S:1:9:python3 3:S:200:900:VLLM::EngineCor 4:S:299:19091:VLLM::Worker"
)


def worker_evidence(cpu):
    """The worker rank's launcher asleep beside its worker (state S, stuck in a blocking call) at `cpu` ticks."""
    return f"2 SS {100 + cpu} 7000 5:S:100:5000:vllm 6:S:{cpu}:2000:VLLM::Worker_TP"


def test_a_worker_stuck_alone_while_every_process_sleeps_is_found_by_its_lack_of_progress(nodes, tmp_path):
    cluster, events = nodes
    cluster["spark-a"] = Node([("running", 0, "000", HEAD_WAITING)], evidence=(HEAD_SLEEPS,))
    cluster["spark-b"] = Node([("running", 0, "-", [])], evidence=(worker_evidence(50),))
    result = action(pair_args(tmp_path, idle_s=0.2, freeze_s=3600, log_dir=str(tmp_path / "logs"))).run(task_vars={})
    assert (result["failed_rank"], result["failed_host"]) == (1, "spark-b"), "furthest behind: the head waits for it"
    reason = result["reason"]
    assert reason.startswith("no rank has made progress for 0 s (no process above 5 % of a core or 64 KiB/s of I/O")
    assert "rank 1 (spark-b) is furthest behind ('container started', quiet for 0 s): vllm (pid 5, state S)" in reason
    assert "VLLM::Worker_TP (pid 6, state S)" in reason and "rank 0 (spark-a): vllm (pid 1, state S)" in reason
    after = events[events.index(("spark-a", "up")) + 1 :]
    assert sorted(after[:4]) == sorted(
        [("spark-a", "evidence"), ("spark-b", "evidence"), ("spark-a", "down after a failure")]
        + [("spark-b", "down after a failure")]
    ), "each rank's evidence is read, then it is stopped with the short grace"
    assert sorted(Path(path).name for path in result["logs"]) == ["rank0-spark-a.log", "rank1-spark-b.log"]


def test_a_rank_that_works_silently_is_never_idle(nodes, tmp_path):
    cluster, _ = nodes
    silent = [("running", 0, "000", HEAD_WAITING)] * 30
    cluster["spark-a"] = Node(silent + [("running", 0, "200", READY)], evidence=(HEAD_SLEEPS,))
    loading = [worker_evidence(50 + 100 * look) for look in range(40)]  # a full core, no log line
    cluster["spark-b"] = Node([("running", 0, "-", [])], evidence=loading)
    assert action(pair_args(tmp_path, idle_s=0.05, poll_s=0.01, freeze_s=3600)).run(task_vars={})["ready"] is True


HISTORY = {
    "record": "20261203T100000Z-spark-pair-deploy",
    "timings": [
        {"seconds": 0.5, "event": "rank 1 (spark-b) started"},
        {"seconds": 1.0, "event": "rank 0 (spark-a) started"},
        {"seconds": 2.0, "event": "rank 0 (spark-a): waiting for ranks"},
        {"seconds": 2.0, "event": "rank 1 (spark-b): waiting for ranks"},
        {"seconds": 3.0, "event": "head /health 200, every rank running"},
    ],
}


def test_a_start_silent_past_its_stage_budget_is_stuck_blaming_the_rank_furthest_behind(nodes, tmp_path):
    cluster, _ = nodes
    waiting = ["world_size=2 rank=0 distributed_init_method=tcp://10.0.0.1:29501 backend=gloo"]
    cluster["spark-a"] = Node([("running", 0, "000", waiting)])
    cluster["spark-b"] = Node([("running", 0, "-", [])])
    args = pair_args(tmp_path, history=HISTORY, quiet_s=0, rendezvous_probe_s=3600)
    with mock.patch.object(vllm_staged_start, "stage_budgets", return_value={"waiting for ranks": (1.0, 0.0)}):
        result = action(args).run(task_vars={})
    assert (result["failed_rank"], result["failed_host"]) == (1, "spark-b"), "the head waits for the worker"
    assert "rank 0 (spark-a) has been in stage 'waiting for ranks' for " in result["reason"]
    assert "the last passing start (20261203T100000Z-spark-pair-deploy) spent 1 s there" in result["reason"]
    assert result["reason"].endswith("rank 1 (spark-b) is furthest behind ('container started')")


def test_without_history_or_while_a_rank_logs_no_stage_budget_applies(nodes, tmp_path):
    cluster, _ = nodes
    logging = [[f"Loading safetensors checkpoint shards: {p}% Completed"] for p in range(0, 100, 20)]
    cluster["spark-a"] = Node([("running", 0, "000", lines) for lines in logging] + [("running", 0, "200", READY)])
    cluster["spark-b"] = Node([("running", 0, "-", LOADING)])
    args = pair_args(tmp_path, history=HISTORY, quiet_s=0.5, rendezvous_probe_s=3600)
    with mock.patch.object(vllm_staged_start, "stage_budgets", return_value={"container started": (0.0, 0.0)}):
        assert action(args).run(task_vars={})["ready"] is True, "a rank that logs is never stuck"


def test_a_failed_compose_up_fails_at_once(nodes, tmp_path):
    cluster, events = nodes
    cluster["spark-a"] = Node([("running", 0, "000", [])])
    cluster["spark-b"] = Node([("created", 0, "-", [])], up=(1, "", "no such image"))
    result = action(pair_args(tmp_path)).run(task_vars={})
    assert result["failed"] and result["failed_host"] == "spark-b"
    assert result["reason"] == "docker compose up failed: no such image"
    assert ("spark-a", "up") not in events, "the head is not started after a worker could not be"


def test_a_port_held_outside_any_container_is_refused_before_anything_starts(nodes, tmp_path):
    cluster, events = nodes
    held = 'LISTEN 0 128 0.0.0.0:8000 0.0.0.0:* users:(("python3",pid=999,fd=3))'
    cluster["spark-a"] = Node([("running", 0, "200", READY)], listeners=held)
    cluster["spark-b"] = Node([("running", 0, "-", READY)])
    result = action(pair_args(tmp_path)).run(task_vars={})
    assert result["failed"] and result["changed"] and not result["ready"]  # the old ranks were removed
    assert "port(s) 8000, 29501 still held" in result["msg"] and "no rank was started" in result["msg"]
    assert not [e for e in events if e[1] == "up"]


def test_a_node_short_of_memory_is_refused_naming_both_numbers_before_any_rank_starts(nodes, tmp_path):
    cluster, events = nodes
    cluster["spark-a"] = Node([("running", 0, "200", READY)])
    cluster["spark-b"] = Node([("running", 0, "-", READY)])
    cluster["spark-b"].meminfo = "MemTotal:       124000000 kB\nMemAvailable:    60000000 kB\n"
    profile = {"platform": "gb10", "engine": {"gpu_memory_utilization": 0.7}}
    result = action(pair_args(tmp_path, memory_profile=profile, memory_wait_s=0)).run(task_vars={})
    assert result["failed"] and result["changed"] and not result["ready"]  # the old ranks were removed
    message = result["msg"]
    assert "rank 1 (spark-b): 57.2 GiB of memory available (MemAvailable), the profile takes 90.8 GiB" in message
    assert "gpu_memory_utilization 0.7 x 118.3 GiB + 8 GiB margin" in message and "spark-a" not in message
    assert not [e for e in events if e[1] == "up"]


CACHE = "/var/lib/spark-serve/vllm-cache/0123456789abcdef"


def test_after_a_watchdog_trip_every_ranks_compile_cache_is_emptied_once_all_are_down(nodes, tmp_path):
    cluster, events = nodes
    cluster["spark-a"] = Node([("running", 0, "200", READY)])
    cluster["spark-b"] = Node([("running", 0, "-", READY)])
    result = action(pair_args(tmp_path, wipe_cache_dir=CACHE)).run(task_vars={})
    assert result["ready"] is True, result
    wiped = [events.index((host, "wipe")) for host in ("spark-a", "spark-b")]
    assert max(events.index((host, "down")) for host in ("spark-a", "spark-b")) < min(wiped), "every rank down first"
    assert max(wiped) < min(i for i, e in enumerate(events) if e[1] == "up"), "before any rank starts"


def test_a_cache_that_cannot_be_emptied_starts_no_rank_and_names_the_node(nodes, tmp_path):
    cluster, events = nodes
    cluster["spark-a"] = Node([("running", 0, "200", READY)])
    cluster["spark-b"] = Node([("running", 0, "-", READY)])
    cluster["spark-b"].wipe_answer = (1, "", "find: cannot delete: Read-only file system")
    result = action(pair_args(tmp_path, wipe_cache_dir=CACHE)).run(task_vars={})
    assert result["failed"] and not result["ready"]
    assert result["msg"] == (
        "vLLM's compile cache could not be emptied -- rank 1 (spark-b): find: cannot delete: Read-only file system; "
        "no rank was started"
    )
    assert not [e for e in events if e[1] == "up"]


def test_without_a_trip_the_cache_is_kept(nodes, tmp_path):
    cluster, events = nodes
    cluster["spark-a"] = Node([("running", 0, "200", READY)])
    cluster["spark-b"] = Node([("running", 0, "-", READY)])
    assert action(pair_args(tmp_path)).run(task_vars={})["ready"] is True
    assert not [e for e in events if e[1] == "wipe"]


def test_check_mode_runs_nothing_but_still_validates_the_arguments(nodes, tmp_path):
    _, events = nodes
    result = action(pair_args(tmp_path), check_mode=True).run(task_vars={})
    assert result["changed"] is True and result["msg"].startswith("check mode") and events == []
    with pytest.raises(AnsibleActionFail, match="backend"):
        action(pair_args(tmp_path, backend="mpi"), check_mode=True).run(task_vars={})
    with pytest.raises(AnsibleActionFail, match="container"):
        action(dict(pair_args(tmp_path), ranks=[{"host": "a", "rank": 0}])).run(task_vars={})


def test_the_module_stub_says_it_runs_as_an_action_plugin():
    # Run as Ansible would run the file if the action plugin were missing.
    result = run_module(
        staged_start_doc, {}, main=lambda: runpy.run_path(staged_start_doc.__file__, run_name="__main__")
    )
    assert result["failed"] and result["msg"] == "vllm_staged_start runs as an action plugin on the controller"


# Real lines: torch c10d's TCPStore client and gloo, as a worker logs them while it cannot reach the head.
RETRY = (
    "[W1202 10:00:03.123 socket.cpp:769] [c10d] TCP client failed to connect/validate to host 10.0.0.1:29501 - "
    "retrying (try=1, timeout=300000ms, delay=1000ms): Network is unreachable"
)
HEAD_WAITS = ["world_size=2 rank=0 local_rank=0 distributed_init_method=tcp://10.0.0.1:29501 backend=gloo"]
WORKER_WAITS = ["world_size=2 rank=1 local_rank=0 distributed_init_method=tcp://10.0.0.1:29501 backend=gloo"]


def fabric_spec(host, rank):
    return dict(spec(host, rank), address=f"10.0.0.{rank + 1}", netdev="enp1s0f1np1")


def fabric_args(**extra):
    args = dict(ranks=[fabric_spec("spark-a", 0), fabric_spec("spark-b", 1)], compose_dir="/etc/spark-serve")
    return dict(args, poll_s=0, mtu=9000, **extra)


def test_a_link_set_down_mid_start_is_blamed_on_its_node_at_the_next_look(nodes, tmp_path):
    cluster, events = nodes
    cluster["spark-a"] = Node([("running", 0, "000", HEAD_WAITS)])
    cluster["spark-b"] = Node(
        [("running", 0, "-", WORKER_WAITS)] * 2 + [("running", 0, "-", WORKER_WAITS + [RETRY])],
        links=["up 9000", "up 9000", "down 9000"],
    )
    result = action(fabric_args()).run(task_vars={})
    assert result["failed"] and (result["failed_rank"], result["failed_host"]) == (1, "spark-b")
    assert result["reason"].startswith("fast link enp1s0f1np1 is down (operstate); rank 1 (spark-b) logs: [W1202")
    assert [host for host, what in events if what == "down"][-2:] == ["spark-a", "spark-b"], "every rank stopped"


def test_an_mtu_lowered_on_one_end_is_blamed_on_that_node(nodes, tmp_path):
    cluster, _ = nodes
    cluster["spark-a"] = Node([("running", 0, "000", HEAD_WAITS)], links=["up 9000", "up 1500"])
    cluster["spark-b"] = Node([("running", 0, "-", WORKER_WAITS)])
    result = action(fabric_args()).run(task_vars={})
    assert result["failed_host"] == "spark-a"
    assert result["reason"] == "fast link enp1s0f1np1 has MTU 1500, the fabric runs 9000"


def test_a_stall_line_re_probes_and_a_dropped_master_port_is_blamed_on_the_head(nodes, tmp_path):
    cluster, _ = nodes
    cluster["spark-a"] = Node([("running", 0, "000", HEAD_WAITS)])
    cluster["spark-b"] = Node([("running", 0, "-", WORKER_WAITS + [RETRY])], port=(124, "", ""))
    result = action(fabric_args()).run(task_vars={})
    assert (result["failed_rank"], result["failed_host"]) == (0, "spark-a")
    assert result["reason"].startswith(
        "master port 10.0.0.1:29501 does not accept connections from spark-b (timed out after 3 s; a firewall rule?)"
    )
    assert result["reason"].endswith("Network is unreachable")
    assert cluster["spark-b"].probes == ["ping", "port"], "the worker pinged, then tried the master port"


def test_dropped_df_pings_blame_the_node_every_failing_pair_shares(nodes, tmp_path):
    cluster, _ = nodes
    cluster["spark-a"] = Node([("running", 0, "000", HEAD_WAITS)], unreachable="10.0.0.2\n")
    cluster["spark-b"] = Node([("running", 0, "-", WORKER_WAITS + [RETRY])], unreachable="10.0.0.1\n")
    result = action(fabric_args()).run(task_vars={})
    assert result["failed_host"] == "spark-b"
    assert result["reason"].startswith(
        "fast link drops DF pings of 8972 bytes (MTU 9000): spark-a -> spark-b, spark-b -> spark-a"
    )


def test_a_stall_with_every_probe_answering_fails_after_the_grace_naming_the_line(nodes, tmp_path):
    cluster, _ = nodes
    cluster["spark-a"] = Node([("running", 0, "000", HEAD_WAITS)])
    cluster["spark-b"] = Node([("running", 0, "-", WORKER_WAITS + [RETRY])])
    result = action(fabric_args(stall_grace_s=0)).run(task_vars={})
    assert result["failed_host"] == "spark-b"
    assert result["reason"].startswith("retried a peer for 0 s while the fast link and the head's master port answered")
    assert result["reason"].endswith("logs: " + RETRY)


def test_refused_connections_before_the_head_listens_are_no_stall(nodes, tmp_path):
    cluster, _ = nodes
    refused = RETRY.replace("Network is unreachable", "Connection refused")
    cluster["spark-a"] = Node(
        [("running", 0, "000", []), ("running", 0, "000", HEAD_WAITS), ("running", 0, "200", READY)]
    )
    cluster["spark-b"] = Node([("running", 0, "-", WORKER_WAITS + [refused])] * 2 + [("running", 0, "-", LOADING)])
    result = action(fabric_args()).run(task_vars={})
    assert result["ready"] is True and "failed" not in result
    assert cluster["spark-b"].probes == ["ping", "port"], "the refusal was re-probed once; the port answered"


def test_a_refused_master_port_is_no_fault_by_itself(nodes, tmp_path):
    # Nothing listens on the master port before the head's store is up or after the rendezvous closed it.
    cluster, _ = nodes
    refused = RETRY.replace("Network is unreachable", "Connection refused")
    cluster["spark-a"] = Node([("running", 0, "000", HEAD_WAITS)] * 2 + [("running", 0, "200", READY)])
    cluster["spark-b"] = Node(
        [("running", 0, "-", WORKER_WAITS + [refused])] * 2 + [("running", 0, "-", LOADING)],
        port=(1, "bash: connect: Connection refused\nbash: line 1: /dev/tcp/10.0.0.1/29501: Connection refused", ""),
    )
    result = action(fabric_args()).run(task_vars={})
    assert result["ready"] is True and "failed" not in result, result.get("msg")
    assert cluster["spark-b"].probes == ["ping", "port"]


def real_action(become=False):
    """An action whose connections come from Ansible's own loaders, as ansible-playbook builds them."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.playbook.play_context import PlayContext
    from ansible.playbook.task import Task
    from ansible.plugins import loader as plugin_loader
    from ansible.template import Templar

    task = Task()
    task.become = become
    loaders = mock.MagicMock(
        connection_loader=plugin_loader.connection_loader, become_loader=plugin_loader.become_loader
    )
    loader = DataLoader()
    return vllm_staged_start.ActionModule(
        task, mock.MagicMock(), PlayContext(), loader=loader, templar=Templar(loader), shared_loader_obj=loaders
    )


def test_each_rank_runs_through_ansibles_connection_plugin_with_the_hosts_variables(tmp_path):
    """Rank.run uses the connection a task on that host would get (here ansible_connection=local, templated from
    the host's own variables): stdout and stderr apart, the exit code, and a node-side timeout."""
    from ansible.template import trust_as_template  # inventory values are trusted templates in a real run

    hostvars = {
        "node-x": {"spark_transport": "local", "ansible_connection": trust_as_template("{{ spark_transport }}")}
    }
    rank = vllm_staged_start.Rank(spec("node-x", 1), "p", "/d", real_action(), {"hostvars": hostvars})
    assert rank.run("echo out; echo err >&2; exit 3") == (3, "out\n", "err\n")
    assert rank.run("sleep 5", timeout=1)[0] == 124
    assert type(rank.connection).__name__ == "Connection" and rank.connection._load_name.endswith("local")
    rank.close()


def test_each_rank_runs_with_the_tasks_become_through_the_become_plugin(tmp_path):
    """become: true on the task wraps every command in the become plugin (sudo here, with a stand-in sudo that
    logs its arguments), and Ansible's success marker never reaches the parsed output."""
    log = tmp_path / "sudo.log"
    sudo = tmp_path / "sudo"
    sudo.write_text(
        f'#!/bin/sh\necho "$@" >> {log}\nwhile [ $# -gt 0 ] && [ "$1" != -c ]; do shift; done\nexec sh "$@"\n'
    )
    sudo.chmod(0o755)
    hostvars = {"node-x": {"ansible_connection": "local", "ansible_become_exe": str(sudo)}}
    rank = vllm_staged_start.Rank(spec("node-x", 1), "p", "/d", real_action(become=True), {"hostvars": hostvars})
    assert rank.run("echo inside") == (0, "inside\n", "")
    assert "-u root" in log.read_text() and "echo inside" in log.read_text()


QUAD = ["spark-a", "spark-b", "spark-c", "spark-d"]


def test_a_quad_starts_its_three_workers_together_then_the_head_and_needs_all_four(nodes, tmp_path):
    cluster, events = nodes
    cluster["spark-a"] = Node([("running", 0, "000", LOADING)] * 3 + [("running", 0, "200", READY)])
    for host in QUAD[1:]:
        cluster[host] = Node([("running", 0, "-", LOADING)])
    ranks = [spec(host, rank) for rank, host in enumerate(QUAD)]
    result = action(dict(pair_args(tmp_path), ranks=ranks)).run(task_vars={})
    assert result["ready"] is True and result["msg"].startswith("4 rank(s) ready")
    ups = [host for host, what in events if what == "up"]
    assert sorted(ups[:3]) == QUAD[1:] and ups[3] == "spark-a", ups


def test_in_a_quad_dropped_df_pings_blame_the_one_node_every_failing_pair_shares(nodes, tmp_path):
    cluster, _ = nodes
    address = {host: f"10.0.0.{rank + 1}" for rank, host in enumerate(QUAD)}
    cluster["spark-a"] = Node([("running", 0, "000", HEAD_WAITS)], unreachable=address["spark-c"] + "\n")
    cluster["spark-b"] = Node([("running", 0, "-", WORKER_WAITS)], unreachable=address["spark-c"] + "\n")
    others = "".join(f"{address[h]}\n" for h in QUAD if h != "spark-c")
    cluster["spark-c"] = Node([("running", 0, "-", WORKER_WAITS + [RETRY])], unreachable=others)
    cluster["spark-d"] = Node([("running", 0, "-", WORKER_WAITS)], unreachable=address["spark-c"] + "\n")
    ranks = [fabric_spec(host, rank) for rank, host in enumerate(QUAD)]
    result = action(fabric_args(ranks=ranks)).run(task_vars={})
    assert (result["failed_rank"], result["failed_host"]) == (2, "spark-c"), result["reason"]
    assert result["reason"].startswith("fast link drops DF pings of 8972 bytes (MTU 9000): ")
    assert all(f"spark-{h} -> spark-c" in result["reason"] for h in "abd"), result["reason"]


def test_every_shell_command_a_failure_sends_is_valid_shell_as_the_node_runs_it(monkeypatch):
    """The node runs each command inside `timeout N sh -c '<command>'` (Rank.run): a quote in a marker or a pattern
    would break the whole round trip, so each one must parse (sh -n) in that wrapping."""
    sent = []
    monkeypatch.setattr(
        vllm_staged_start.Rank, "run", lambda rank, command, timeout=60: sent.append(command) or (0, "", "")
    )
    rank = vllm_staged_start.Rank(spec("spark-a", 0), "spark-serve", "/etc/spark-serve", None, {})
    rank.evidence("/usr/local/bin/py-spy")
    rank.observe(health_port=8000)
    rank.down(grace_s=5)
    for command in sent:
        wrapped = f"timeout 60 sh -c {shlex.quote(command)}"
        check = subprocess.run(["sh", "-n", "-c", wrapped], capture_output=True, text=True)
        inner = subprocess.run(["sh", "-n", "-c", command], capture_output=True, text=True)
        assert check.returncode == inner.returncode == 0, (command, check.stderr, inner.stderr)
