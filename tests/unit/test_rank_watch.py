"""Reading rank state from container state and real vLLM log lines."""

import pytest
from ansible.module_utils.rank_watch import (
    STAGES,
    Freeze,
    Progress,
    describe_states,
    failure_reason,
    link_problem,
    parse_evidence,
    rank_verdict,
    stage_budgets,
    stage_of,
    stall_sign,
    stuck,
    timeouts,
    waits_at_rendezvous,
)

HEAD_WAITING = [
    "(Worker pid=36) INFO 11-29 11:51:58 [parallel_state.py:1906] world_size=2 rank=0 local_rank=0 "
    "distributed_init_method=tcp://10.253.1.10:29501 backend=gloo",
]
FAILED = HEAD_WAITING + [
    "(Worker_TP0 pid=38) ERROR 11-29 11:57:49 [multiproc_executor.py:1063] WorkerProc failed to start.",
    "(Worker_TP0 pid=38) ERROR 11-29 11:57:49 [multiproc_executor.py:1063] Traceback (most recent call last):",
    "(Worker_TP0 pid=38) ERROR 11-29 11:57:49 [multiproc_executor.py:1063]     raise RuntimeError(",
    "(Worker_TP0 pid=38) ERROR 11-29 11:57:49 [multiproc_executor.py:1063] RuntimeError: aot_compile is not "
    "supported by the current configuration.",
]


def test_stage_follows_the_log():
    assert STAGES[stage_of([])][0] == "container started"
    assert STAGES[stage_of(HEAD_WAITING)][0] == "waiting for ranks"
    assert STAGES[stage_of(HEAD_WAITING + ["INFO Starting vLLM API server 0 on http://0.0.0.0:8000"])][0] == "serving"


def test_failure_names_the_line_and_the_exception():
    reason = failure_reason(FAILED)
    assert reason.startswith("(Worker_TP0 pid=38) ERROR") and "WorkerProc failed to start" in reason
    assert reason.endswith("RuntimeError: aot_compile is not supported by the current configuration.")
    assert failure_reason(HEAD_WAITING) is None


def test_verdicts():
    assert rank_verdict("running", 0, HEAD_WAITING) == (True, "waiting for ranks", None)
    ok, _, reason = rank_verdict("exited", 0, HEAD_WAITING)
    assert not ok and reason == "container exited (exit code 0)"  # a worker that exits 0 is still dead
    ok, _, reason = rank_verdict(None, None, [])
    assert not ok and "missing" in reason
    assert not rank_verdict("running", 0, FAILED)[0]


def test_outer_timeout_always_exceeds_the_engines_own():
    assert timeouts(900) == (600, 1020)
    assert timeouts(60, backend="gloo") == (1800, 1920)
    inner, outer = timeouts(300, distributed_timeout_s=300)
    assert outer > inner


def test_a_stall_line_counts_until_the_rank_logs_progress():
    retry = (
        "[W1202 10:00:03.123 socket.cpp:769] [c10d] TCP client failed to connect/validate to host "
        "10.0.0.1:29501 - retrying (try=1, timeout=300000ms, delay=1000ms): Network is unreachable"
    )
    assert stall_sign(HEAD_WAITING + [retry, ""]) == retry
    assert stall_sign(HEAD_WAITING + [retry, "INFO rank 1 in world size 2 is assigned as DP rank 0"]) is None
    assert stall_sign(HEAD_WAITING + [retry, "INFO any later line: the rank moved on"]) is None
    assert stall_sign(HEAD_WAITING) is None
    for line in (
        "NCCL WARN NET/IB : Got completion from peer 10.0.0.2<49152> with error 12",
        "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144]",
        "[c10d] The client socket has timed out after 60s while trying to connect to (10.0.0.1, 29501).",
        "Timed out waiting 30000ms for send operation to complete",
    ):
        assert stall_sign([line]) == line


def test_link_problems_name_the_netdev_and_the_state_or_mtu():
    assert link_problem("enp1s0f1np1", 9000, "up 9000") is None
    assert link_problem("enp1s0f1np1", 9000, "unknown 9000") is None
    assert link_problem("enp1s0f1np1", 9000, "down 9000") == "fast link enp1s0f1np1 is down (operstate)"
    assert link_problem("enp1s0f1np1", 9000, "up 1500") == "fast link enp1s0f1np1 has MTU 1500, the fabric runs 9000"
    assert link_problem("enp1s0f1np1", 9000, "") == "fast link enp1s0f1np1 is missing (/sys/class/net/enp1s0f1np1)"
    assert link_problem("enp1s0f1np1", None, "up 1500") is None


def test_eager_mode_is_no_compile_stage_and_the_rendezvous_is_read_from_its_own_line():
    eager = (
        "(MainProcess pid=1) WARNING 12-02 04:36:07 [vllm.py:1703] Enforce eager set, disabling torch.compile, "
        "CUDAGraphs, and JIT kernel warmup."
    )
    assert STAGES[stage_of([eager])][0] == "container started"
    assert not waits_at_rendezvous([eager]) and waits_at_rendezvous(HEAD_WAITING)


def test_evidence_lines_are_read_or_refused():
    line = "3 SRT 1234 56789 7:S:400:50000:vllm 9:R:800:6000:VLLM::EngineCor 12:T:34:789:VLLM::Worker_TP"
    assert parse_evidence(line) == (
        3,
        "SRT",
        1234,
        56789,
        ((7, "vllm", "S", 400, 50000), (9, "VLLM::EngineCor", "R", 800, 6000), (12, "VLLM::Worker_TP", "T", 34, 789)),
    ), "a process title holding colons keeps them"
    assert parse_evidence("3 SRT 1234 56789") == (3, "SRT", 1234, 56789, ())
    assert parse_evidence("0 - 0 0") is None, "no process seen: nothing to judge"
    assert parse_evidence("") is None and parse_evidence("3 SRT x 1") is None


def look(*processes):
    """Evidence of one look from (pid, name, state, cpu ticks, io bytes) per process."""
    return (len(processes), "".join(p[2] for p in processes), 0, 0, tuple(processes))


# A rank's processes from look to look (one second apart): (seconds, evidence, its log or stage moved) -> the time
# of its last progress after that look.
PROGRESS = [
    ("a new process is news", [(0, look((1, "vllm", "S", 100, 10)), False)], 0),
    (
        "a waiting rank's polling (under 5 % of a core, 5 KiB/s) is no progress",
        [(0, look((1, "vllm", "S", 100, 10)), False), (1, look((1, "vllm", "S", 104, 5000)), False)],
        0,
    ),
    (
        "a loading process's CPU is progress",
        [(0, look((1, "vllm", "S", 100, 10)), False), (1, look((1, "vllm", "R", 160, 10)), False)],
        1,
    ),
    (
        "a memory-mapped load's page-ins (read_bytes) are progress",
        [(0, look((1, "vllm", "D", 100, 0)), False), (2, look((1, "vllm", "D", 101, 50 << 20)), False)],
        2,
    ),
    (
        "a log line is progress though every process sleeps",
        [(0, look((1, "vllm", "S", 100, 10)), False), (3, look((1, "vllm", "S", 100, 10)), True)],
        3,
    ),
    (
        "a worker stuck in a blocking call sleeps like a waiting one: only its missing progress tells",
        [
            (0, look((1, "vllm", "S", 100, 10), (2, "VLLM::Worker_TP", "R", 50, 10)), False),
            (1, look((1, "vllm", "S", 100, 10), (2, "VLLM::Worker_TP", "S", 90, 10)), False),
            (30, look((1, "vllm", "S", 100, 10), (2, "VLLM::Worker_TP", "S", 90, 10)), False),
        ],
        1,
    ),
    (
        "unreadable evidence teaches nothing",
        [(0, look((1, "vllm", "S", 100, 10)), False), (5, None, False)],
        0,
    ),
]


@pytest.mark.parametrize("looks, last_progress", [case[1:] for case in PROGRESS], ids=[case[0] for case in PROGRESS])
def test_progress_is_cpu_io_a_new_process_a_log_line_or_a_stage(looks, last_progress):
    progress = Progress()
    for now, evidence, moved in looks:
        progress.observe(evidence, moved, now)
    assert progress.active_at == last_progress


def test_the_stuck_rank_is_the_one_furthest_behind_then_the_one_quiet_first_and_says_each_process():
    head, worker = Progress(), Progress()
    head.observe(look((1, "vllm", "S", 100, 10), (3, "VLLM::Worker_TP", "R", 10, 10)), False, 0)
    worker.observe(look((5, "vllm", "S", 100, 10), (6, "python3", "T", 1, 10)), False, 0)
    head.observe(look((1, "vllm", "S", 100, 10), (3, "VLLM::Worker_TP", "S", 900, 10)), False, 9)  # reached the wait
    worker.observe(look((5, "vllm", "S", 100, 10), (6, "python3", "T", 1, 10)), False, 9)
    assert stuck([("head", 2, head), ("worker", 0, worker)], 20, 15) is None, "the head moved 11 s ago"
    assert stuck([("head", 2, head), ("worker", 0, worker)], 24, 15) == ("worker", 15), "furthest behind"
    assert stuck([("head", 0, head), ("worker", 0, worker)], 24, 15) == ("worker", 15), "the same stage: quiet first"
    assert (
        worker.describe(24)
        == "vllm (pid 5, state S) 24 s without progress, python3 (pid 6, state T) 24 s without progress"
    )
    assert head.describe(24).startswith(
        "vllm (pid 1, state S) 24 s without progress, VLLM::Worker_TP (pid 3, state S) 15"
    )


def test_a_freeze_needs_no_progress_of_any_kind_and_no_process_that_can_run():
    freeze = Freeze()
    assert freeze.observe((2, "TT", 10, 99, ()), (5, "last"), 0.0) is None
    assert freeze.observe((2, "TT", 10, 99, ()), (5, "last"), 1.0) == 0.0, "the frozen run starts here"
    assert freeze.observe((2, "TT", 10, 99, ()), (5, "last"), 12.0) == 11.0
    assert freeze.observe((2, "TT", 11, 99, ()), (5, "last"), 13.0) is None, "one CPU tick is progress"
    assert freeze.observe((2, "TT", 11, 99, ()), (6, "new"), 14.0) is None, "a log line is progress"
    assert freeze.observe((2, "TT", 11, 100, ()), (6, "new"), 15.0) is None, "a byte of I/O is progress"
    assert freeze.observe((2, "TS", 11, 100, ()), (6, "new"), 16.0) is None, "a sleeping process may be waiting"
    assert freeze.observe(None, (6, "new"), 17.0) is None, "unreadable evidence is no freeze"


def test_frozen_states_are_named():
    assert describe_states("TTT") == "stopped (state T)"
    assert describe_states("DD") == "uninterruptible (state D)"
    assert describe_states("TDT") == "stopped, uninterruptible or zombie (states D x1, T x2)"


PASSING_START = [
    {"seconds": 0.5, "event": "rank 1 (b) started"},
    {"seconds": 1.0, "event": "rank 0 (a) started"},
    {"seconds": 6.0, "event": "rank 0 (a): waiting for ranks"},
    {"seconds": 9.0, "event": "rank 1 (b): loading weights"},
    {"seconds": 10.0, "event": "rank 0 (a): loading weights"},
    {"seconds": 70.0, "event": "rank 1 (b): weights loaded"},
    {"seconds": 80.0, "event": "rank 0 (a): serving"},
    {"seconds": 84.0, "event": "head /health 200, every rank running"},
]


def test_stage_budgets_come_from_the_longest_stay_of_any_rank_in_a_passing_start():
    budgets = stage_budgets(PASSING_START)
    assert budgets["container started"] == (8.5, 128.5), "rank 1: started 0.5 s, loading at 9 s"
    assert budgets["loading weights"] == (70.0, 210.0), "rank 0 loaded 10-80 s: 3x beats +120 s"
    assert budgets["weights loaded"] == (14.0, 134.0) and budgets["serving"] == (4.0, 124.0)
    assert stage_budgets(PASSING_START[:-1]) == {}, "a start that never reached ready gives no budget"
