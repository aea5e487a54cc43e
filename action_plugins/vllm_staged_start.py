"""Action plugin: staged start of a multi-node vLLM service, watching every rank.

Runs on the controller and reaches each node through Ansible's own connection plugin for that host, with the host's
inventory settings (ansible_host, user, port, key, ssh args) and the task's become, as a task on the node would;
the ssh plugin's ControlPersist keeps each look at a rank to one multiplexed round trip. Order: clean stale
containers on every node at once, start the workers together, then the head; then at every look read each rank's
container state and log lines (and the head's /health) in turn, printing progress, and fail within seconds of any
rank dying instead of waiting out the engine's own collective timeout. On failure every rank is stopped (SIGTERM
first, then the container), the last log lines of each rank are saved on the controller, and the model cache and
images stay untouched.
Documentation: library/vllm_staged_start.py.
"""

import concurrent.futures
import os
import re
import shlex
import time

import ansible.module_utils
from ansible import constants as C
from ansible.errors import AnsibleActionFail, AnsibleConnectionFailure
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

# ansible-core resolves a project's module_utils (ansible.cfg `module_utils`, ANSIBLE_MODULE_UTILS) only for the
# modules it ships to a node; an action plugin runs in the controller's Python, so the configured folders join
# the ansible.module_utils package here and the import below is the one every module uses.
ansible.module_utils.__path__.extend(p for p in C.DEFAULT_MODULE_UTILS_PATH if p not in ansible.module_utils.__path__)
from ansible.module_utils import rank_commands as commands
from ansible.module_utils.memory_guard import memory_plan, memory_verdict
from ansible.module_utils.rank_watch import (
    STAGES,
    STALLED,
    Freeze,
    Progress,
    link_problem,
    parse_evidence,
    rank_verdict,
    stage_budgets,
    stage_of,
    stall_sign,
    stuck,
    timeouts,
    top_frames,
    waits_at_rendezvous,
)

display = Display()

# Documented in library/vllm_staged_start.py (tests/unit/test_module_docs.py holds the two together).
ARGUMENT_SPEC = dict(
    ranks=dict(
        type="list",
        elements="dict",
        required=True,
        options=dict(
            host=dict(type="str", required=True),
            rank=dict(type="int", required=True),
            container=dict(type="str", required=True),
            address=dict(type="str"),
            netdev=dict(type="str"),
        ),
    ),
    project=dict(type="str", default="spark-serve"),
    compose_dir=dict(type="str", required=True),
    port=dict(type="int", default=8000),
    master_port=dict(type="int", default=29501),
    expected_load_s=dict(type="int", default=900),
    distributed_timeout_s=dict(type="int"),
    backend=dict(type="str", default="nccl", choices=["nccl", "gloo"]),
    poll_s=dict(type="float", default=1),
    log_dir=dict(type="path"),
    mtu=dict(type="int"),
    stall_grace_s=dict(type="float", default=20),
    quiet_s=dict(type="float", default=15),
    rendezvous_probe_s=dict(type="float", default=5),
    freeze_s=dict(type="float", default=10),
    idle_s=dict(type="float", default=15),
    py_spy=dict(type="str", default="/usr/local/bin/py-spy"),
    history=dict(
        type="dict",
        options=dict(record=dict(type="str", required=True), timings=dict(type="list", elements="dict", default=[])),
    ),
    memory_profile=dict(type="dict"),
    memory_wait_s=dict(type="float", default=20),
    wipe_cache_dir=dict(type="str", default=""),
)


class Rank:
    def __init__(self, spec, project, compose_dir, action, task_vars):
        self.host = spec["host"]
        self.rank = int(spec["rank"])
        self.action, self.task_vars = action, task_vars  # for open(): the node's connection
        self.connection = None
        self.container = spec["container"]
        self.address, self.netdev = spec.get("address"), spec.get("netdev")
        self.compose = commands.compose(project, compose_dir)
        self.stage, self.stage_at = 0, 0.0  # the furthest stage its log proves, and when it got there
        self.sign = self.sign_since = None  # the latest stall line and when the stall began
        self.log_mark, self.log_changed_at, self.probed_at = None, 0.0, 0.0
        self.waiting_at = None  # when the log first showed the rank at the rendezvous
        self.freeze = Freeze()
        self.progress = Progress()

    @property
    def label(self):
        return f"rank {self.rank} ({self.host})"

    def open(self):
        """Make the node's connection; ActionModule.start opens every rank's before any thread runs, since
        templating the host's variables and loading plugins are not thread-safe."""
        self.connection = self.connection or self.action.node(self.host, self.task_vars)

    def run(self, command, timeout=60):
        """(rc, stdout, stderr) of `command` on the node, with become as the task has it; `timeout` (coreutils, on
        the node) bounds it: rc 124 when it fired."""
        self.open()
        return self.action.exec_on(self.connection, command, timeout)

    def observe(self, health_port=None, tail=400):
        """(state, exit code, health, link, evidence, last log lines) in one round trip: state None when there is no
        container, health the HTTP status of /health on `health_port` (the head) or None, link the fast link's
        `operstate mtu` from sysfs ("-" without a netdev), evidence the container's processes, their states, CPU
        ticks and I/O bytes (rank_watch.parse_evidence; None when unreadable)."""
        rc, out, _ = self.run(commands.observe(self.container, health_port, self.netdev, tail), timeout=30)
        lines = out.splitlines() + ["", "", "", ""]
        status = lines[0].split()
        state = status[0] if rc == 0 and len(status) == 2 and status[0] != "missing" else None
        health = lines[1].strip() if lines[1].strip().isdigit() else None
        evidence = parse_evidence(lines[3])
        return state, (int(status[1]) if state else None), health, lines[2].strip(), evidence, lines[4:-4]

    def track(self, lines, elapsed):
        """Note the latest stall line, whether the log moved and when the rank reached the rendezvous; True when a
        new stall line calls for a re-probe."""
        if self.waiting_at is None and waits_at_rendezvous(lines):
            self.waiting_at = elapsed
        mark = self.log_mark_of(lines)
        if mark != self.log_mark:
            self.log_mark, self.log_changed_at = mark, elapsed
        sign = stall_sign(lines)
        new = sign is not None and sign != self.sign
        if sign is None or self.sign is None:
            self.sign_since = elapsed if sign else None
        self.sign = sign
        return new

    @staticmethod
    def log_mark_of(lines):
        """What changes when the rank logs a new line (the tail's length grows, or its last line changes)."""
        return len(lines), lines[-1] if lines else ""

    def unreachable(self, peers, mtu):
        """Addresses of `peers` this node cannot DF-ping at the fabric's MTU (the largest unfragmented packet)."""
        addresses = [p.address for p in peers if p.address]
        if not self.address or not addresses:
            return []
        _, out, _ = self.run(commands.df_pings(addresses, (mtu or 1500) - 28), timeout=30)  # IPv4 + ICMP headers
        return out.split()

    def connects(self, address, port):
        """(True, '') when address:port answers from this node within 3 s: it accepts the connection, or refuses
        it (nothing listens: the head's store is not up yet, or is closed after the rendezvous, both normal);
        else (False, why): the packets are dropped or the address is unreachable."""
        rc, out, err = self.run(commands.tcp_connect(address, port), timeout=15)
        why = "timed out after 3 s" if rc == 124 else (out + err).strip().rsplit(": ", 1)[-1]
        return rc == 0 or "refused" in why.lower(), why

    LOG_MARK = "=== spark-serve: the log of the container ==="

    def evidence(self, py_spy, tail=200):
        """(py-spy dumps of every process of the rank's container, read at once with a bound; its last log lines) in
        one round trip: empty dumps when it has no process left."""
        _, out, err = self.run(commands.evidence(self.container, py_spy, self.LOG_MARK, tail), timeout=60)
        stacks, _, log = (out + err).partition(self.LOG_MARK)
        return stacks.strip(), log.strip("\n").splitlines()

    def close(self):
        if self.connection:
            self.connection.close()

    def down(self, grace_s=10):
        return self.run(commands.down(self.compose, grace_s), timeout=120)

    def up(self):
        return self.run(commands.up(self.compose), timeout=300)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(ARGUMENT_SPEC)  # fails naming the option, even in check mode
        if self._play_context.check_mode:
            result.update(changed=True, msg="check mode: the service would be (re)started in stages")
            return result
        ranks = sorted(
            (Rank(spec, args["project"], args["compose_dir"], self, task_vars) for spec in args["ranks"]),
            key=lambda r: r.rank,
        )
        try:
            return self.start(result, ranks, args)
        finally:
            for rank in ranks:
                rank.close()

    def exec_on(self, connection, command, timeout=60):
        """(rc, stdout, stderr) of `command` over a node's connection (node()), with its become; `timeout`
        (coreutils, on the node) bounds it: rc 124 when it fired. spark_transfer runs its commands here too."""
        command = f"timeout {int(timeout)} sh -c {shlex.quote(command)}"
        if connection.become:
            command = connection.become.build_become_command(command, connection._shell)
        try:
            rc, out, err = connection.exec_command(command, sudoable=True)
        except AnsibleConnectionFailure as error:
            return 255, "", str(error)
        out = self._strip_success_message(to_text(out, errors="surrogate_or_replace"))
        return rc, out, to_text(err, errors="surrogate_or_replace")

    def node(self, host, task_vars):
        """The connection a task on `host` would get: its connection plugin, set from the host's variables, and the
        task's become (or the host's ansible_become*). No tty: stdout and stderr stay apart (sudo reads a become
        password on stdin)."""
        variables = task_vars["hostvars"][host]
        templar = self._templar.copy_with_new_env(available_variables=variables)
        name = templar.template(variables.get("ansible_connection", C.DEFAULT_TRANSPORT))
        play_context = self._play_context.copy()
        play_context.remote_addr = templar.template(variables.get("ansible_host", host))
        connection = self._shared_loader_obj.connection_loader.get("ssh" if name == "smart" else name, play_context)
        if connection is None:
            raise AnsibleActionFail(f"{host}: the connection plugin {name!r} was not found")
        task_keys = dict(self._task.dump_attrs(), timeout=self._play_context.timeout)
        task_keys.pop("retries", None)
        options = connection._resolve_option_variables(variables, templar)
        connection.set_options(task_keys=task_keys, var_options=options, direct={"use_tty": False})
        if boolean(templar.template(variables.get("ansible_become", self._task.become))):
            method = templar.template(
                variables.get("ansible_become_method", self._task.become_method or C.DEFAULT_BECOME_METHOD)
            )
            become = self._shared_loader_obj.become_loader.get(method)
            names = C.config.get_plugin_vars("become", method)
            become.set_options(
                task_keys=task_keys, var_options={n: templar.template(variables[n]) for n in names if n in variables}
            )
            connection.set_become_plugin(become)
        return connection

    def start(self, result, ranks, args):
        """Look, judge, act until the head serves: the start fails at the first fault a look or the judgement of
        the whole start finds (every rank stopped, the evidence kept), or after the outer timeout."""
        self.py_spy = args["py_spy"]
        outer, budgets = self.announce(ranks, args)
        for rank in ranks:
            rank.open()
        started, timeline = time.monotonic(), []
        refusal = self.prepare(ranks, args)
        if refusal:
            # The old ranks are gone by now: a failed start, not an untouched service (the release says so).
            display.display(f"[vllm] REFUSED: {refusal}")
            result.update(failed=True, ready=False, changed=True, msg=refusal, reason=refusal, timeline=[])
            return result
        fault = self.launch(ranks, started, timeline)
        last_print = 0.0
        for _ in range(0 if fault else int(outer / max(args["poll_s"], 0.2)) + 1):
            elapsed = time.monotonic() - started
            if elapsed > outer:
                break
            health, due, fault = self.look(ranks, args, elapsed, timeline)
            fault = fault or self.judge(ranks, args, budgets, elapsed, due)
            if fault:
                break
            if health == "200":
                return self.ready(result, ranks, elapsed, timeline)
            last_print = self.show_progress(ranks, elapsed, last_print)
            time.sleep(args["poll_s"])
        culprit, problem = fault or (ranks[0], f"not ready after {outer} s (outer timeout)")
        return self.failed(result, ranks, culprit, problem, started, args["log_dir"], timeline)

    def announce(self, ranks, args):
        """(outer timeout, stage budgets from the last passing start), both said before anything starts."""
        inner, outer = timeouts(args["expected_load_s"], args["distributed_timeout_s"], args["backend"])
        display.display(
            f"[vllm] staged start of {len(ranks)} rank(s); engine collective timeout {inner} s, "
            f"this watch gives up after {outer} s (always longer)"
        )
        budgets = stage_budgets(args["history"]["timings"]) if args["history"] else {}
        self.history_record = args["history"]["record"] if budgets else None
        if budgets:
            display.display(
                f"[vllm] stage budgets from the last passing start ({self.history_record}): "
                + ", ".join(f"{stage} {budget:.0f} s" for stage, (_, budget) in budgets.items())
            )
        return outer, budgets

    def prepare(self, ranks, args):
        """Every old rank gone, the compile cache emptied after a trip, the memory there: a refusal, or ''."""
        refusal = self.clean(ranks, [args["port"]] + ([args["master_port"]] if len(ranks) > 1 else []))
        if not refusal and args["wipe_cache_dir"]:
            refusal = self.wipe_cache(ranks, args["wipe_cache_dir"])
        if not refusal and args["memory_profile"]:
            refusal = self.memory_problem(ranks, memory_plan(args["memory_profile"]), args["memory_wait_s"])
        return refusal

    @staticmethod
    def launch(ranks, started, timeline):
        """The workers started together, then the head; (culprit, problem) when one could not be, else None."""
        for group in ([r for r in ranks if r.rank != 0], [ranks[0]]):
            with concurrent.futures.ThreadPoolExecutor(max(len(group), 1)) as pool:
                answers = list(pool.map(lambda rank: rank.up(), group))
            for rank, (rc, out, err) in zip(group, answers, strict=True):
                if rc != 0:
                    return rank, f"docker compose up failed: {(err or out).strip()[-500:]}"
                timeline.append({"seconds": round(time.monotonic() - started, 1), "event": f"{rank.label} started"})
        return None

    def look(self, ranks, args, elapsed, timeline):
        """One look at every rank in turn: (the head's /health, the ranks due a re-probe, the first rank's fault
        as (culprit, problem) or None). A rank's fault is its own: dead, frozen, or its fast link down."""
        health, due = None, []
        for rank in ranks:
            is_head = rank is ranks[0]
            state, code, rank_health, link, evidence, lines = rank.observe(
                health_port=args["port"] if is_head else None
            )
            health = rank_health if is_head else health
            ok, stage, reason = rank_verdict(state, code, lines)
            new_stage = stage_of(lines)
            if new_stage > rank.stage:
                rank.stage, rank.stage_at = new_stage, elapsed
                timeline.append({"seconds": round(elapsed, 1), "event": f"{rank.label}: {stage}"})
            if not ok:
                return health, due, (rank, reason)
            frozen_s = rank.freeze.observe(evidence, rank.log_mark_of(lines), elapsed)
            if frozen_s is not None and frozen_s >= args["freeze_s"]:
                last = next((line.strip() for line in reversed(lines) if line.strip()), "")
                return health, due, (rank, rank.freeze.reason(frozen_s, last))
            new_sign = rank.track(lines, elapsed)
            rank.progress.observe(evidence, rank.log_changed_at == elapsed or rank.stage_at == elapsed, elapsed)
            problem = rank.netdev and link_problem(rank.netdev, args["mtu"], link)
            if problem:
                return health, due, (rank, self.with_line(problem, ranks))
            if new_sign or self.quiet(rank, elapsed, args["quiet_s"]):
                due.append(rank)
        return health, due, None

    def judge(self, ranks, args, budgets, elapsed, due):
        """What the whole start says after a look, in this order: a re-probe's finding (or a stall no probe
        explains), no progress anywhere, a stage past its budget; (culprit, problem) or None."""
        stalled = self.stalled(ranks, elapsed, args["stall_grace_s"])
        if self.rendezvous_due(ranks, elapsed, args["rendezvous_probe_s"]):
            due.append(ranks[0])
        if due or stalled:
            culprit, problem = self.reprobe(ranks, args, elapsed)
            if culprit is None and stalled:
                culprit = stalled
                problem = (
                    f"retried a peer for {elapsed - stalled.sign_since:.0f} s while the fast link and the head's "
                    f"master port answered"
                )
            if culprit is not None:
                return culprit, self.with_line(problem, [culprit] + ranks)
        idle = stuck([(rank, rank.stage, rank.progress) for rank in ranks], elapsed, args["idle_s"])
        if idle:
            culprit, quiet = idle
            return culprit, self.idle_problem(ranks, culprit, quiet, elapsed)
        return self.overstayed(ranks, elapsed, budgets, args["quiet_s"])

    @staticmethod
    def ready(result, ranks, elapsed, timeline):
        timeline.append({"seconds": round(elapsed, 1), "event": "head /health 200, every rank running"})
        display.display(f"[vllm] {elapsed:5.0f} s  ready: /health 200 and all {len(ranks)} rank(s) running")
        result.update(
            changed=True,
            ready=True,
            seconds=round(elapsed, 1),
            timeline=timeline,
            msg=f"{len(ranks)} rank(s) ready in {elapsed:.0f} s",
        )
        return result

    @staticmethod
    def show_progress(ranks, elapsed, last_print):
        """Every rank's stage every 10 s (and at the first look); the time of the last line said."""
        if elapsed - last_print < 10 and last_print:
            return last_print
        stages = " | ".join(f"{r.label}: {STALLED if r.sign else STAGES[r.stage][0]}" for r in ranks)
        display.display(f"[vllm] {elapsed:5.0f} s  {stages}")
        return elapsed or 0.001

    @staticmethod
    def quiet(rank, elapsed, quiet_s):
        """A rank whose log has not moved for quiet_s (at most one re-probe per quiet_s) while not yet serving."""
        if rank.stage == len(STAGES) - 1 or elapsed - max(rank.log_changed_at, rank.probed_at) < quiet_s:
            return False
        display.display(f"[vllm] {elapsed:5.0f} s  {rank.label}: log quiet for {quiet_s:.0f} s, re-probing")
        return True

    @staticmethod
    def rendezvous_due(ranks, elapsed, every_s):
        """Every every_s while a worker has not joined: a dropped master port leaves the worker silent in connect()
        (no retry line for minutes), and only a probe shows it."""
        waiting = [r for r in ranks[1:] if r.stage <= 1]
        return bool(waiting) and elapsed - max(r.probed_at for r in ranks) >= every_s

    @staticmethod
    def stalled(ranks, elapsed, grace_s):
        """The first rank that has logged stall lines for grace_s since the head began to wait for the ranks."""
        head = ranks[0]
        if head.waiting_at is None:  # the head's store is not up yet: a worker's "connection refused" is expected
            return None
        for rank in ranks:
            if rank.sign and elapsed - max(rank.sign_since, head.waiting_at) >= grace_s:
                return rank
        return None

    @staticmethod
    def idle_problem(ranks, culprit, quiet, elapsed):
        """The idle rule's verdict with every rank's per-process evidence, the culprit's first."""
        others = "; ".join(f"{rank.label}: {rank.progress.describe(elapsed)}" for rank in ranks if rank is not culprit)
        return (
            f"no rank has made progress for {quiet:.0f} s (no process above 5 % of a core or 64 KiB/s of I/O, no log "
            f"line, no new stage): the start is stuck; {culprit.label} is furthest behind "
            f"('{STAGES[culprit.stage][0]}', quiet for {elapsed - culprit.progress.active_at:.0f} s): "
            f"{culprit.progress.describe(elapsed)}" + (f"; {others}" if others else "")
        )

    def overstayed(self, ranks, elapsed, budgets, quiet_s):
        """(culprit, problem) when a rank has stayed in its stage past the budget the last passing start gives it
        while no rank has logged a line for quiet_s; the culprit is the rank furthest behind (the others wait for
        it). None without history, or while any rank still logs."""
        if not budgets or any(elapsed - rank.log_changed_at < quiet_s for rank in ranks):
            return None
        over = [
            r for r in ranks if STAGES[r.stage][0] in budgets and elapsed - r.stage_at > budgets[STAGES[r.stage][0]][1]
        ]
        if not over:
            return None
        culprit = min(ranks, key=lambda r: (r.stage, -r.rank))
        stage = STAGES[over[0].stage][0]
        stay, budget = budgets[stage]
        quiet = min(elapsed - rank.log_changed_at for rank in ranks)
        return culprit, (
            f"{over[0].label} has been in stage '{stage}' for {elapsed - over[0].stage_at:.0f} s and no rank has "
            f"logged a line for {quiet:.0f} s; the last passing start ({self.history_record}) spent {stay:.0f} s "
            f"there (budget {budget:.0f} s: the longer of 3x and +120 s); {culprit.label} is furthest behind "
            f"('{STAGES[culprit.stage][0]}')"
        )

    def reprobe(self, ranks, args, elapsed):
        """(culprit rank, problem) from DF pings between every pair of ranks and a TCP connect from every worker
        to the head's master port, or (None, None) when everything answers."""
        for rank in ranks:
            rank.probed_at = elapsed
        failures = [(rank, addr) for rank in ranks for addr in rank.unreachable(ranks, args["mtu"]) if addr]
        failures = [(rank, addr) for rank, addr in failures if addr != rank.address]
        if failures:
            by_address = {r.address: r for r in ranks}
            counts = {}
            for src, addr in failures:
                for node in (src, by_address.get(addr)):
                    if node is not None:
                        counts[node] = counts.get(node, 0) + 1
            culprit = max(counts, key=lambda node: (counts[node], node.rank))
            pairs = ", ".join(f"{src.host} -> {by_address[a].host if a in by_address else a}" for src, a in failures)
            return culprit, (
                f"fast link drops DF pings of {(args['mtu'] or 1500) - 28} bytes (MTU {args['mtu'] or 1500}): {pairs}"
            )
        head = ranks[0]
        if head.address:  # a drop shows even before the head's store is up: nothing answers, not even a refusal
            for rank in [r for r in ranks[1:] if r.stage <= 1]:  # not joined yet: the store still matters
                ok, why = rank.connects(head.address, args["master_port"])
                if not ok:
                    return head, (
                        f"master port {head.address}:{args['master_port']} does not accept connections from "
                        f"{rank.host} ({why}; a firewall rule?)"
                    )
        display.display(f"[vllm] {elapsed:5.0f} s  re-probe: fast link and master port answer")
        return None, None

    @staticmethod
    def with_line(problem, ranks):
        """The problem and the first stall line among `ranks` (the culprit first), which shows what it caused."""
        witness = next((rank for rank in ranks if rank.sign), None)
        return f"{problem}; {witness.label} logs: {witness.sign}" if witness else problem

    def clean(self, ranks, ports):
        """Remove this service's containers on every node, then any other container holding the head's ports
        (an earlier launcher's engine); a port a process outside any container holds is a refusal (returned)."""
        with concurrent.futures.ThreadPoolExecutor(len(ranks)) as pool:  # every node at once
            list(pool.map(lambda rank: (rank.down(), rank.run(commands.remove_container(rank.container))), ranks))
        head = ranks[0]
        holders = self.port_holders(head, ports)
        for container, port in sorted(holders.items()):
            display.display(f"[vllm] {head.label}: removing container {container}, which holds port {port}")
            head.run(commands.remove_container(container), timeout=60)
        _, out, _ = head.run(commands.listeners(ports), timeout=15)
        if out.strip():
            return (
                f"{head.label}: port(s) {', '.join(map(str, ports))} still held after removing "
                f"this service's containers: {out.strip()} -- stop that process first; no rank was started"
            )
        return ""

    @staticmethod
    def wipe_cache(ranks, folder):
        """Every stopped rank's vLLM compile cache emptied (a watchdog trip made it untrusted); a refusal naming the
        nodes where that failed, or ''."""
        display.display(f"[vllm] the watchdog tripped since the last start: emptying {folder} on every rank")
        with concurrent.futures.ThreadPoolExecutor(len(ranks)) as pool:
            answers = list(pool.map(lambda rank: rank.run(commands.wipe_cache(folder)), ranks))
        failed = [
            f"{rank.label}: {(err or out).strip()[-300:]}"
            for rank, (rc, out, err) in zip(ranks, answers, strict=True)
            if rc
        ]
        return (
            f"vLLM's compile cache could not be emptied -- {'; '.join(failed)}; no rank was started" if failed else ""
        )

    @staticmethod
    def memory_problem(ranks, plan, wait_s):
        """Every node must have what the profile takes available once its old rank is gone; memory an exited engine
        held may take a moment to come back, so a shortfall is looked at again until wait_s has passed."""
        deadline = time.monotonic() + wait_s
        for _ in range(int(wait_s) + 1):
            with concurrent.futures.ThreadPoolExecutor(len(ranks)) as pool:
                found = list(pool.map(lambda rank: (rank, rank.run(commands.meminfo(), timeout=15)[1]), ranks))
            verdicts = [(rank, *memory_verdict(rank.label, text, plan)) for rank, text in found]
            problems = [problem for *_, problem in verdicts if problem]
            if not problems or time.monotonic() >= deadline:
                break
            time.sleep(1)
        if problems:
            return (
                "not enough memory to start: " + "; ".join(problems) + f" (looked for {wait_s:.0f} s after this "
                "service's containers were removed) -- no rank was started"
            )
        shown = ", ".join(
            f"{rank.host} {available} GiB (the profile takes {need})" for rank, available, need, _ in verdicts
        )
        display.display(f"[vllm] memory available before the start: {shown}")
        return ""

    @staticmethod
    def port_holders(head, ports):
        """{container name: port} for running containers whose processes listen on one of `ports`."""
        _, listeners, _ = head.run(commands.listeners(ports), timeout=15)
        pids = {}
        for line in listeners.splitlines():
            port = line.split()[3].rsplit(":", 1)[-1] if len(line.split()) > 3 else "?"
            pids.update({pid: port for pid in re.findall(r"pid=(\d+)", line)})
        if not pids:
            return {}
        _, table, _ = head.run(commands.container_pids(), timeout=60)
        holders = {}
        for line in table.splitlines():
            name, *container_pids = line.split()
            for pid in set(container_pids) & pids.keys():
                holders[name.lstrip("/")] = pids[pid]
        return holders

    def failed(self, result, ranks, culprit, reason, started, log_dir, timeline):
        """The verdict first, at once; then every rank at the same time: its stacks and last log lines read (each
        bounded), then stopped (SIGTERM, 5 s, then the container removed)."""
        elapsed = time.monotonic() - started
        display.display(f"[vllm] {elapsed:5.0f} s  DETECTED: {culprit.label} failed: {reason}; stopping every rank")
        folder = self.failure_folder(log_dir)

        def evidence_then_down(rank):
            found = rank.evidence(self.py_spy) if folder else ("", [])
            rank.down(grace_s=5)
            return found

        with concurrent.futures.ThreadPoolExecutor(len(ranks)) as pool:  # every node at once
            found = list(pool.map(evidence_then_down, ranks))
        stacks, frames, saved = self.save_evidence(ranks, found, folder)
        message = (
            f"{culprit.label} failed first after {elapsed:.0f} s: {reason}. Every rank was stopped "
            f"(SIGTERM, then container removal); model cache and images untouched. Last log lines: "
            f"{', '.join(saved) or 'none'}"
        )
        if stacks:
            message += f". Stacks (py-spy): {', '.join(stacks)}" + (
                f"; top frames: {' | '.join(frames)}" if frames else ""
            )
        display.display(f"[vllm] {time.monotonic() - started:5.0f} s  FAILED: {message}")
        result.update(
            failed=True,
            ready=False,
            changed=True,
            msg=message,
            failed_rank=culprit.rank,
            failed_host=culprit.host,
            reason=reason,
            seconds=round(elapsed, 1),
            timeline=timeline,
            logs=saved,
            stacks=stacks,
        )
        return result

    @staticmethod
    def failure_folder(log_dir):
        """The controller folder of this failure's logs and stacks, or None without a log_dir."""
        if not log_dir:
            return None
        folder = os.path.join(log_dir, time.strftime("%Y%m%dT%H%M%S"))
        os.makedirs(folder, exist_ok=True)
        return folder

    @staticmethod
    def save_evidence(ranks, found, folder):
        """(stack paths, top frames, log paths): each rank's py-spy dumps and last log lines saved in `folder`."""
        if not folder:
            return [], [], []
        stacks, frames, saved = [], [], []
        for rank, (dump, lines) in zip(ranks, found, strict=True):
            path = os.path.join(folder, f"rank{rank.rank}-{rank.host}.log")
            with open(path, "w", encoding="utf-8") as out:
                out.write("\n".join(lines) + "\n")
            saved.append(path)
            if not dump:
                continue
            path = os.path.join(folder, f"rank{rank.rank}-{rank.host}.stacks.txt")
            with open(path, "w", encoding="utf-8") as out:
                out.write(dump + "\n")
            stacks.append(path)
            frames += [f"{rank.label} {frame}" for frame in top_frames(dump, limit=2)]
        return stacks, frames, saved
