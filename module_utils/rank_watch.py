"""Reading a vLLM rank's state from its container and log lines: stage reached, failure, and the timeouts.

Pure Python (no Ansible) so plain pytest can test it; the staged start (action_plugins/vllm_staged_start.py)
and the liveness probe (library/vllm_ranks.py) use it.
"""

import itertools
import re

# Stages in the order a rank passes them; each is recognised by the first log line that proves it.
STAGES = [
    ("container started", None),
    ("waiting for ranks", re.compile(r"world_size=\d+ rank=\d+|distributed_init_method=|Waiting for .*clients")),
    (
        "ranks joined",
        re.compile(
            r"rank \d+ in world size \d+|Initializing a V1 LLM engine|init engine|"
            r"Starting to load model|ranks? joined"
        ),
    ),
    ("loading weights", re.compile(r"Starting to load model|Loading weights|Loading model")),
    ("weights loaded", re.compile(r"Loading weights took|Model loading took|Loading model weights took")),
    (
        "compiling/capturing",
        re.compile(
            r"Capturing CUDA graph|torch\.compile takes|Compiling a graph|Dynamo bytecode transform|"
            r"GPU KV cache size|CPU KV cache size|num_gpu_blocks"
        ),
    ),
    ("serving", re.compile(r"Starting vLLM API server|Application startup complete|Uvicorn running")),
]

# Lines that mean the rank is failing now: seen on the CPU build, and the engine's own failure messages.
FAILURES = [
    re.compile(r"WorkerProc failed to start"),
    re.compile(r"DistStoreError"),
    re.compile(r"Engine core initialization failed"),
    re.compile(r"EngineCore failed to start"),
    re.compile(r"Traceback \(most recent call last\)"),
    re.compile(r"Timed out after \d+ seconds waiting for clients"),
    re.compile(r"Connection closed by peer|Connection reset by peer"),
]

# Lines of a rank that is alive but cannot reach a peer: it retries (or waits) instead of dying, until the engine's
# own collective timeout (601 s NCCL, 1801 s gloo). Spellings from torch c10d, gloo and NCCL.
STALLS = [
    re.compile(r"TCP client failed to connect/validate to host \S+"),
    re.compile(r"client socket has (failed|timed out)"),
    re.compile(r"Network is unreachable|No route to host"),
    re.compile(r"[Cc]onnection refused"),
    re.compile(r"NCCL WARN|NET/IB ?:.*([Ee]rror|[Ff]ail)"),
    re.compile(r"Gloo connectFullMesh failed|gloo/transport/tcp/pair\.cc"),
    re.compile(r"Timed out waiting|timed out after \d+ ?ms"),
]
STALLED = "retrying a peer"  # the stage label while a stall sign is the rank's latest news

ENGINE_DEFAULT_TIMEOUT_S = {"gloo": 1800, "nccl": 600}


def stage_of(lines):
    """Index into STAGES of the furthest stage the log proves (0 = container started)."""
    reached = 0
    for index, (_, pattern) in enumerate(STAGES):
        if pattern is not None and any(pattern.search(line) for line in lines):
            reached = max(reached, index)
    return reached


def stall_sign(lines):
    """The rank's last log line, stripped, when it is a stall line (the rank still retries), else None: any line
    after a retry means the rank moved on."""
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    return last if any(pattern.search(last) for pattern in STALLS) else None


def waits_at_rendezvous(lines):
    """Whether the log shows the rank at the rendezvous (its TCPStore up, on the head)."""
    return any(STAGES[1][1].search(line) for line in lines)


def link_problem(netdev, expected_mtu, sysfs):
    """Why the fast link cannot carry the collectives, from `operstate mtu` as sysfs reads them, or None."""
    fields = sysfs.split()
    if len(fields) != 2:
        return f"fast link {netdev} is missing (/sys/class/net/{netdev})"
    state, mtu = fields
    if state not in ("up", "unknown"):  # "unknown": drivers that do not report a state
        return f"fast link {netdev} is {state} (operstate)"
    if expected_mtu and mtu != str(expected_mtu):
        return f"fast link {netdev} has MTU {mtu}, the fabric runs {expected_mtu}"
    return None


def first_failure(lines):
    """(line number, line) of the first failure line, or None; the context after it explains why."""
    for number, line in enumerate(lines):
        if any(pattern.search(line) for pattern in FAILURES):
            return number, line.strip()
    return None


def failure_reason(lines, context=60):
    """The failure line and the exception that explains it (the last `XxxError: ...` in the lines after it)."""
    found = first_failure(lines)
    if found is None:
        return None
    number, line = found
    causes = [
        match.group(0)
        for entry in lines[number : number + context]
        if (match := re.search(r"\b\w+(Error|Exception): .*", entry))
    ]
    return f"{line}" + (f" -- {causes[-1].strip()}" if causes else "")


def rank_verdict(state, exit_code, lines):
    """(ok, stage name, reason) for one rank from its container state, exit code and log lines."""
    stage = STAGES[stage_of(lines)][0]
    reason = failure_reason(lines)
    if state != "running":
        why = reason or f"container {state or 'missing'} (exit code {exit_code})"
        return False, stage, why
    if reason:
        return False, stage, reason
    return True, stage, None


def timeouts(expected_load_s, distributed_timeout_s=None, backend="nccl", margin_s=120):
    """(inner, outer) seconds: the engine's own collective timeout, and the watch's outer bound, which is always
    longer so the engine's own error is seen rather than cut off."""
    inner = distributed_timeout_s or ENGINE_DEFAULT_TIMEOUT_S[backend]
    outer = max(expected_load_s, inner) + margin_s
    return inner, outer


# Process states (/proc/PID/stat) of a rank that cannot make progress by itself: stopped (SIGSTOP, a debugger),
# traced, uninterruptible (a hung device or file system), zombie, dead. A rank whose processes sleep (S) may be
# waiting for another rank, which is normal during a start: it is never blamed for a freeze.
FROZEN_STATES = {"T": "stopped", "t": "traced", "D": "uninterruptible", "Z": "zombie", "X": "dead"}

# One line from the node: `<processes> <their states> <CPU ticks> <I/O bytes>` for the whole container, then one
# `pid:state:ticks:bytes:name` per process (EVIDENCE_COMMAND's output; the name is /proc/PID/comm, which vLLM sets to
# its process title, e.g. VLLM::Worker_TP, truncated by the kernel to 15 characters).
CLOCK_TICKS = 100  # USER_HZ on Linux


def parse_evidence(line):
    """(processes, states, cpu_ticks, io_bytes, each) from evidence_command's line, `each` a tuple of
    (pid, name, state, cpu_ticks, io_bytes) per process; None when unreadable."""
    fields = line.split()
    if len(fields) < 4 or not all(f.isdigit() for f in (fields[0], fields[2], fields[3])) or fields[0] == "0":
        return None
    each = []
    for entry in fields[4:]:
        pid, state, cpu, io, name = (entry.split(":", 4) + ["", "", "", ""])[:5]
        if pid.isdigit() and cpu.isdigit() and io.isdigit():
            each.append((int(pid), name or "?", state, int(cpu), int(io)))
    return int(fields[0]), fields[1], int(fields[2]), int(fields[3]), tuple(each)


def describe_states(states):
    """'stopped (state T)' when every process shares one state, else each state with its count."""
    if len(set(states)) == 1:
        return f"{FROZEN_STATES.get(states[0], states[0])} (state {states[0]})"
    counts = ", ".join(f"{s} x{states.count(s)}" for s in sorted(set(states)))
    return f"stopped, uninterruptible or zombie (states {counts})"


class Freeze:
    """Whether one rank is frozen: from look to look, not a CPU tick, not a byte of I/O and no new log line, while
    every process of its container is stopped, uninterruptible or a zombie."""

    def __init__(self):
        self.previous = None  # (evidence, log mark) of the last look
        self.since = None  # when the current frozen run began

    def observe(self, evidence, log_mark, now):
        """Seconds the rank has been frozen so far, or None when it moved, sleeps or cannot be read."""
        previous, self.previous = self.previous, (evidence, log_mark)
        if evidence is None or previous is None or previous[0] is None:
            self.since = None
            return None
        (_, states, cpu, io, _), (_, _, cpu_before, io_before, _) = evidence, previous[0]
        still = cpu == cpu_before and io == io_before and log_mark == previous[1]
        if not (still and all(s in FROZEN_STATES for s in states)):
            self.since = None
            return None
        self.since = now if self.since is None else self.since
        return now - self.since

    def reason(self, seconds, last_line):
        """The evidence for the failure message."""
        states = self.previous[0][1]
        line = f"; last line: {last_line}" if last_line else "; no log line"
        return (
            f"every process {describe_states(states)}, 0.0 CPU s and 0 bytes of I/O in {seconds:.0f} s, "
            f"no new log line{line}"
        )


# Below these rates a process makes no progress: a rank waiting at a rendezvous polls its store (measured on the test
# bed: under 1 % of a core and about 5 KiB/s), while one that imports, loads or compiles uses far more of either.
IDLE_CPU_SHARE = 0.05  # of one core
IDLE_IO_RATE = 64 * 1024  # bytes per second


class Progress:
    """When one rank last made progress: a process using more than IDLE_CPU_SHARE of a core or IDLE_IO_RATE of I/O
    between two looks, a process that appeared, a new log line or a new stage. Whatever state its processes are in:
    a worker stuck in a blocking call sleeps (state S) as a waiting one does, and only its lack of progress tells."""

    def __init__(self, now=0.0):
        self.active_at = now  # the rank's last progress of any kind
        self.processes = {}  # pid: (name, state, cpu ticks, io bytes, seen at, last progress at)

    def observe(self, evidence, moved, now):
        """Take one look's evidence (None: unreadable, nothing learnt); `moved`: its log or stage moved."""
        if moved:
            self.active_at = now
        if evidence is None:
            return
        processes = {}
        for pid, name, state, cpu, io in evidence[4]:
            before = self.processes.get(pid)
            progressed = before is None or self.progressed(before, cpu, io, now)
            processes[pid] = (name, state, cpu, io, now, now if progressed else before[5])
            self.active_at = now if progressed else self.active_at
        self.processes = processes

    @staticmethod
    def progressed(before, cpu, io, now):
        seconds = max(now - before[4], 1e-3)
        return cpu - before[2] > IDLE_CPU_SHARE * CLOCK_TICKS * seconds or io - before[3] > IDLE_IO_RATE * seconds

    def describe(self, now):
        """Each process with its state and how long it has made no progress, the longest first."""
        by_idle = sorted(self.processes.items(), key=lambda item: item[1][5])
        return ", ".join(
            f"{name} (pid {pid}, state {state}) {now - progress_at:.0f} s without progress"
            for pid, (name, state, _, _, _, progress_at) in by_idle
        )


def stuck(ranks, now, idle_s):
    """(culprit, quiet seconds) when no rank has made progress for idle_s, else None. `ranks`: (rank, stage index,
    Progress) with the head first; the culprit is the rank furthest behind, among those the one that went quiet
    first (the others wait for it)."""
    quiet = min(now - progress.active_at for _, _, progress in ranks)
    if quiet < idle_s:
        return None
    culprit = min(ranks, key=lambda entry: (entry[1], entry[2].active_at))
    return culprit[0], quiet


def top_frames(dump, limit=3):
    """'pid N (command): thread: top frame' for the first thread of each Python process in a stacks_command dump,
    at most `limit` of them."""
    found, header, thread = [], None, None
    for line in dump.splitlines():
        if line.startswith("=== pid "):
            header, thread = line[len("=== pid ") :].strip(), None
        elif header and line.startswith("Thread "):
            thread = line.split(":", 1)[-1].strip().strip('"') if ":" in line else line.strip()
        elif header and thread and line.startswith("    ") and line.strip():
            pid, _, command = header.partition(": ")
            found.append(f"pid {pid} ({command[:60].strip()}) {thread}: {line.strip()}")
            header = thread = None
    return found[:limit]


READY_EVENT = "head /health 200, every rank running"


def stage_budgets(timings, ratio=3.0, margin_s=120.0):
    """{stage: (seconds a rank spent in it, budget)} from a passing start's timeline (the staged start's `timeline`
    as its record keeps it): per stage the longest stay of any rank, and the budget max(ratio x, + margin_s). Empty
    when the timeline never reached ready (no history to judge by)."""
    ready = next((event["seconds"] for event in timings if event.get("event") == READY_EVENT), None)
    if ready is None:
        return {}
    reached = {}
    for event in timings:
        label, _, what = event.get("event", "").partition(": ")
        if what in dict(STAGES):
            reached.setdefault(label, []).append((what, float(event["seconds"])))
        elif label.endswith(" started") and label.startswith("rank "):
            reached.setdefault(label[: -len(" started")], []).append((STAGES[0][0], float(event["seconds"])))
    stays = {}
    for stages in reached.values():
        stages = sorted(stages, key=lambda stage: stage[1]) + [(None, float(ready))]
        for (stage, began), (_, ended) in itertools.pairwise(stages):
            stays[stage] = max(stays.get(stage, 0.0), ended - began)
    return {stage: (stay, max(ratio * stay, stay + margin_s)) for stage, stay in stays.items()}
