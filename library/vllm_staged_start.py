#!/usr/bin/python
"""Documentation for the vllm_staged_start action plugin (action_plugins/vllm_staged_start.py does the work)."""

DOCUMENTATION = r"""
---
module: vllm_staged_start
short_description: Start a multi-node vLLM service in stages and fail fast on a dead rank
description:
  - Runs on the controller and reaches every node through Ansible's own connection plugin for that host, with the
    host's inventory settings and the task's C(become), as a task on the node would.
  - Removes this service's stale containers on every node and any other container that
    holds the head's API or rendezvous port (named in the output); refuses a port a process outside any container
    holds. Then starts the headless workers together, then the head, and at every look reads every rank, one after
    another (container state, failure lines in the log such as C(WorkerProc failed to start), C(DistStoreError),
    tracebacks, and the head's /health), printing elapsed time and stage reached.
  - On the first dead rank it prints the verdict at once (a C(DETECTED) line naming the rank and why), then on every
    rank at the same time saves its stacks and last log lines on the controller and stops it (SIGTERM, 5 s, then
    the container), and fails naming the rank and the reason; model cache and images are untouched.
  - A rank that is frozen (every process stopped, uninterruptible or a zombie, with no CPU time, I/O or log line
    from look to look) fails the start after O(freeze_s), naming that rank and the evidence, not the rank that
    waits for it.
  - Idle means stuck, whatever state the processes are in. When for O(idle_s) no process of any rank uses more
    than 5 % of a core or 64 KiB/s of I/O, no rank logs a line and none reaches a new stage, the start fails
    blaming the rank furthest behind (among equals the one quiet first), with every process's name, state and
    seconds without progress (a worker frozen or stuck in a blocking call while the others wait for it).
  - A rank that is alive but cannot talk is found too. The fast link's state and MTU (sysfs) are read at every
    look and a link that is down or has another MTU fails the start naming its node. A rank whose latest log line
    is a stall line, or whose log stops moving, re-probes the fabric (DF pings between every pair of ranks at the
    MTU; from every worker not yet joined, a TCP connect to the head's master port, where a refusal is normal
    before the head's store is up and a drop is not) and fails naming the node, the link or port and the log
    line; a stall that outlasts O(stall_grace_s) while everything answers fails naming the rank and its line.
    While a rank retries, its stage reads C(retrying a peer).
  - The outer timeout is derived from the expected load time and the engine's distributed timeout, printed at
    start, and always longer than the engine's own.
options:
  ranks:
    description: One entry per node.
    type: list
    elements: dict
    required: true
    suboptions:
      host:
        description: Inventory name of the node (in messages and log file names).
        type: str
        required: true
      rank:
        description: The node's rank; 0 is the head.
        type: int
        required: true
      container:
        description: Name of the rank's container.
        type: str
        required: true
      address:
        description: The node's fast-link address (DF pings between the ranks, the head's master port).
        type: str
      netdev:
        description: The node's fast-link netdev; its state and MTU are read from sysfs at every look.
        type: str
  project:
    description: Compose project name.
    type: str
    default: spark-serve
  compose_dir:
    description: Directory of the compose project on every node.
    type: str
    required: true
  port:
    description: API port of the head.
    type: int
    default: 8000
  master_port:
    description: Rendezvous port on the head (multi-node only).
    type: int
    default: 29501
  expected_load_s:
    description: Expected seconds from start to ready.
    type: int
    default: 900
  distributed_timeout_s:
    description: The engine's collective timeout (C(--distributed-timeout-seconds)); default by backend.
    type: int
  backend:
    description: Collective backend, for the engine's default timeout (nccl 600 s, gloo 1800 s).
    type: str
    default: nccl
    choices: [nccl, gloo]
  poll_s:
    description: Seconds between two looks at every rank.
    type: float
    default: 1
  log_dir:
    description: Controller directory for the failed start's log lines.
    type: path
  mtu:
    description: The fabric's MTU; a fast link with another MTU fails the start, DF pings use it.
    type: int
  stall_grace_s:
    description:
      - Seconds a rank may keep logging stall lines (TCPStore connect retries, unreachable networks, refused
        connections, NCCL C(WARN), gloo connect failures, time-outs) after the head began to wait for the ranks,
        while every re-probe answers, before the start fails naming the rank and the line.
    type: float
    default: 20
  quiet_s:
    description: Seconds without a new log line from a rank (not serving yet) before the fast link is re-probed.
    type: float
    default: 15
  rendezvous_probe_s:
    description:
      - Seconds between two probes of the fabric while a worker has not joined the head yet (DF pings, a TCP
        connect to the master port). Only a probe shows a dropped master port within seconds, since a worker
        stuck in connect() logs nothing.
    type: float
    default: 5
  freeze_s:
    description:
      - Seconds a rank may go without any progress (not a CPU tick, not a byte of I/O, no new log line) while every
        process of its container is stopped, uninterruptible or a zombie, before the start fails naming that rank
        and the evidence. A rank whose processes sleep (waiting for another rank) is never blamed for a freeze.
    type: float
    default: 10
  idle_s:
    description:
      - Seconds with no progress on any rank (no process above 5 % of a core or 64 KiB/s of I/O, no log line, no
        new stage) before the start fails as stuck. A rank that imports, loads or compiles is never idle.
    type: float
    default: 15
  py_spy:
    description:
      - The node's py-spy (roles/py_spy). On a failed start, before any rank is stopped, every process of every
        rank that still runs is dumped with C(py-spy dump --nonblocking) (a stopped process too; all at once, each
        within 5 s); the dumps are
        saved beside the collected logs, listed in the failure with the top frames quoted, and returned.
    type: str
    default: /usr/local/bin/py-spy
  history:
    description:
      - The last passing start of this inventory (its record id and timeline). Each stage gets the budget
        max(3x, +120 s) of the longest stay of any rank in that stage then; a rank past its stage's budget while no
        rank has logged a line for O(quiet_s) fails the start naming the stage, the record and the rank furthest
        behind. Without it the engine's own collective timeout stays the bound.
    type: dict
    suboptions:
      record:
        description: The record's id.
        type: str
        required: true
      timings:
        description: The record's timeline (C(seconds), C(event)), as this module returned it.
        type: list
        elements: dict
        default: []
  memory_profile:
    description:
      - The resolved profile whose memory need every node must have available (MemAvailable) once this service's
        old containers are removed, before any rank starts (module_utils/memory_guard.py, gpu_memory_utilization x
        the node's memory, or the CPU build's KV cache space, plus the profile's memory_margin_gib).
      - A shortfall fails the start naming each node, its available GiB and the GiB the profile takes; no rank is
        started. Without it memory is not checked.
    type: dict
  memory_wait_s:
    description: Seconds a shortfall is looked at again (memory an exited engine held may take a moment to return).
    type: float
    default: 20
  wipe_cache_dir:
    description:
      - vLLM's compile cache folder on every node, emptied once every rank is stopped and before any starts (the
        watchdog tripped since, so what that engine wrote there is never loaded again). Empty to keep the cache.
    type: str
    default: ""
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Start every rank in stages
  vllm_staged_start:
    ranks:
      - {host: spark-a, rank: 0, container: spark-serve-rank0,
         address: 192.168.100.10, netdev: enp1s0f1np1}
      - {host: spark-b, rank: 1, container: spark-serve-rank1,
         address: 192.168.100.11, netdev: enp1s0f1np1}
    compose_dir: /etc/spark-serve
    mtu: 9000
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
ready:
  description: Whether /health answered 200 with every rank running.
  returned: when a start was attempted (not in check mode)
  type: bool
  sample: true
seconds:
  description: Seconds from the start to ready or to the failure.
  returned: when a start was attempted (not in check mode)
  type: float
  sample: 312.4
timeline:
  description: Stages reached per rank with their times.
  returned: when a start was attempted (not in check mode)
  type: list
  elements: dict
  sample:
    - {seconds: 0.8, event: "rank 1 (spark-b) started"}
    - {seconds: 41.0, event: "rank 1 (spark-b): loading weights"}
failed_rank:
  description: Rank that failed first.
  returned: failed
  type: int
  sample: 1
failed_host:
  description: Inventory name of the node whose rank failed first.
  returned: failed
  type: str
  sample: spark-b
reason:
  description: Why it failed.
  returned: failed
  type: str
  sample: "WorkerProc failed to start -- RuntimeError: gloo lost rank 0"
stacks:
  description: Controller paths of the py-spy stacks of every rank that still ran when the start failed.
  returned: failed
  type: list
  elements: str
  sample: [.spark-serve/logs/20261201T071500/rank1-spark-b.stacks.txt]
logs:
  description: Controller paths of the saved log lines.
  returned: failed
  type: list
  elements: str
  sample: [.spark-serve/logs/20261201T071500/rank1-spark-b.log]
"""

from ansible.module_utils.basic import AnsibleModule

# Reached only when the action plugin is not found (action_plugins missing from the configuration). No main():
# ansible-lint's args rule then leaves the task's arguments to the action plugin, which validates them itself.
if __name__ == "__main__":
    AnsibleModule(argument_spec={}).fail_json(msg="vllm_staged_start runs as an action plugin on the controller")
