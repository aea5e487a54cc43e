"""Action plugin: run a long transfer on a node in the background and print its progress until it ends.

The command runs detached (its own session, so its process group can be stopped whole) on `run_on`; until it ends,
the bytes present at the destination (files under `paths` on the task's host), read by one of its processes
(`read_by`) or reported by the command itself (`progress_file`: an image pull's layers, a build's step) are sampled
every `interval_s` and printed with the total, the rate and the time left. No progress for `stall_s` stops the
whole process group (and runs `stop_argv`), fails naming the node and the step, and leaves nothing running.
Connections are made as vllm_staged_start makes them (its ActionModule.node).
Documentation: library/spark_transfer.py.
"""

import base64
import shlex
import time

import ansible.module_utils
from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

# As in vllm_staged_start: the project's module_utils join the package an action plugin imports from.
ansible.module_utils.__path__.extend(p for p in C.DEFAULT_MODULE_UTILS_PATH if p not in ansible.module_utils.__path__)
from ansible.module_utils.transfer_progress import (
    Transfer,
    bytes_of,
    human_bytes,
    human_duration,
    own_failure,
    reported,
)

display = Display()

# Documented in library/spark_transfer.py (tests/unit/test_module_docs.py holds the two together).
ARGUMENT_SPEC = dict(
    step=dict(type="str", required=True),
    argv=dict(type="list", elements="str"),
    shell=dict(type="str"),
    stdin=dict(type="str", default=""),
    run_on=dict(type="str"),
    total=dict(type="int", default=0),
    paths=dict(type="list", elements="str"),
    names=dict(type="list", elements="str"),
    read_by=dict(type="str"),
    progress_file=dict(type="str"),
    interval_s=dict(type="float", default=30),
    stall_s=dict(type="float", default=600),
    timeout_s=dict(type="float", default=43200),
    stop_argv=dict(type="list", elements="str", default=[]),
    resume=dict(type="str", default="A rerun resumes the transfer."),
)
MUTUALLY_EXCLUSIVE = [("argv", "shell"), ("paths", "read_by", "progress_file")]
REQUIRED_ONE_OF = [("argv", "shell"), ("paths", "read_by", "progress_file")]
TAIL = 2000  # characters of the command's stdout and stderr kept in the result
# When the command started and ended, on the sending node's clock (the copies of one fan-out compare on the head's).
STAMP = "date +%Y-%m-%d\\ %H:%M:%S.%6N"


class Node:
    """A command runner on one inventory host (the connection a task on it would get)."""

    def __init__(self, action, host, task_vars):
        self.host = host
        self.action = action
        self.connection = action.node(host, task_vars)

    def run(self, command, timeout=60):
        """(rc, stdout, stderr) of `command` on the node, bounded by `timeout` (coreutils, on the node)."""
        return self.action.exec_on(self.connection, command, timeout)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(
            ARGUMENT_SPEC, mutually_exclusive=MUTUALLY_EXCLUSIVE, required_one_of=REQUIRED_ONE_OF
        )
        if self._play_context.check_mode:
            result.update(changed=True, msg=f"check mode: {args['step']} would run")
            return result
        here = task_vars["inventory_hostname"]
        target = Node(self, here, task_vars)
        runner = Node(self, args["run_on"], task_vars) if args["run_on"] and args["run_on"] != here else target
        folder = self.launch(runner, args)
        try:
            return self.watch(result, here, runner, target, folder, args)
        finally:
            self.stop(runner, folder, args["stop_argv"])
            for node in {id(n): n for n in (runner, target)}.values():
                node.connection.close()

    def staged_start(self):
        return self._shared_loader_obj.action_loader.get("vllm_staged_start", class_only=True)

    def node(self, host, task_vars):
        """The connection a task on `host` would get, made where vllm_staged_start makes its ranks' (one place)."""
        return self.staged_start().node(self, host, task_vars)

    def exec_on(self, connection, command, timeout=60):
        """A command over that connection, run as vllm_staged_start runs its ranks' (one place)."""
        return self.staged_start().exec_on(self, connection, command, timeout)

    def launch(self, runner, args):
        """Start the command in its own session on `runner`; the folder (mode 0700) that holds its pid, stdin,
        output and exit code."""
        command = shlex.join(args["argv"]) if args["argv"] else args["shell"]
        script = (
            "umask 077; d=$(mktemp -d /tmp/spark-transfer.XXXXXX) || exit 1; "
            f"echo {self.b64(command)} | base64 -d > $d/cmd; echo {self.b64(args['stdin'])} | base64 -d > $d/stdin; "
            # The command finds its own folder (its progress_file) in SPARK_TRANSFER_DIR.
            f'setsid bash -c \'echo $$ > "$0/pid"; {STAMP} > "$0/started"; '
            f'SPARK_TRANSFER_DIR="$0" bash -o pipefail "$0/cmd" '
            f'< "$0/stdin" > "$0/out" 2> "$0/err"; echo $? > "$0/rc.tmp"; {STAMP} > "$0/ended"; '
            'mv "$0/rc.tmp" "$0/rc"\' $d < /dev/null > /dev/null 2>&1 & echo $d'
        )
        rc, out, err = runner.run(script, timeout=60)
        folder = out.strip().splitlines()[-1] if rc == 0 and out.strip() else ""
        if not folder.startswith("/tmp/spark-transfer."):
            raise AnsibleActionFail(f"{runner.host}: {args['step']} did not start: {(err or out).strip()[-500:]}")
        return folder

    @staticmethod
    def b64(text):
        return base64.b64encode(text.encode()).decode() or "''"

    def watch(self, result, here, runner, target, folder, args):
        transfer = Transfer(args["total"], 0.0)
        started = time.monotonic()
        size = f"{human_bytes(args['total'])}, " if args["total"] or not args["progress_file"] else ""
        display.display(
            f"[spark-serve] {here}: {args['step']}: {size}a line every {args['interval_s']:g} s, stopped after "
            f"{human_duration(args['stall_s'])} without {'progress' if args['progress_file'] else 'a byte'}"
        )
        wait_s = 0.0  # the first look at once, then one every interval_s
        for _ in range(int(args["timeout_s"] / max(args["interval_s"], 0.5)) + 2):
            code, done = self.sample(runner, target, folder, args, wait_s)
            elapsed, wait_s = time.monotonic() - started, args["interval_s"]
            if isinstance(done, dict):  # the command's own report (progress_file)
                transfer.take(elapsed, done)
            elif done is not None:
                transfer.observe(elapsed, done)
            if code is not None:
                return self.ended(result, here, runner, folder, args, code, transfer, elapsed)
            # Two looks without progress: the line says for how long.
            quiet_s = 2 * args["interval_s"]
            line = transfer.line if transfer.counts_bytes else transfer.step_line
            display.display(f"[spark-serve] {line(here, args['step'], elapsed, quiet_s)}")
            if transfer.stalled(elapsed, args["stall_s"]):
                message = transfer.stall_message(here, args["step"], elapsed, args["resume"], transfer.counts_bytes)
                return self.failed(result, message)
            if elapsed > args["timeout_s"]:
                break
        return self.failed(
            result,
            f"{here}: {args['step']} did not end within {human_duration(args['timeout_s'])} "
            f"{self.where(transfer)}; it was stopped. {args['resume']}",
        )

    @staticmethod
    def where(transfer):
        """'at 1.2 GB of 2.6 GB', or a build's 'at Step 3/9 : RUN ...'."""
        if not transfer.counts_bytes:
            return f"at {transfer.note or 'its start'}"
        return f"at {human_bytes(transfer.last or 0)} of {human_bytes(transfer.total)}"

    def sample(self, runner, target, folder, args, wait_s):
        """(exit code or None while it runs, bytes done) after up to wait_s on the node for the command to end (so
        its end is seen within half a second, not at the next look), in one round trip per node; bytes None when
        no process counts them (read_by: the reader has not started yet or has ended; progress_file: the command
        has not written it yet), and with progress_file the command's whole report (a dict) instead of bytes."""
        tick = min(0.5, max(wait_s, 0.05))
        status = (
            f"n=0; while [ ! -f {folder}/rc ] && [ $n -lt {round(wait_s / tick)} ]; do sleep {tick}; n=$((n+1)); done; "
            f"cat {folder}/rc 2>/dev/null || echo running"
        )
        if args["read_by"]:
            status += (
                f"; for p in $(pgrep -g $(cat {folder}/pid) -x {shlex.quote(args['read_by'])}); "
                "do sed -n 's/^rchar: //p' /proc/$p/io; done 2>/dev/null"
            )
        if args["progress_file"]:
            status += f"; cat {folder}/{shlex.quote(args['progress_file'])} 2>/dev/null"
        _, out, _ = runner.run(status, timeout=wait_s + 60)
        lines = out.split("\n")
        code = int(lines[0]) if lines[0].strip().lstrip("-").isdigit() else None
        if args["read_by"]:
            counts = [int(line) for line in lines[1:] if line.strip().isdigit()]
            return code, sum(counts) if counts else None
        if args["progress_file"]:
            return code, reported("\n".join(lines[1:]))
        roots = " ".join(shlex.quote(path) for path in args["paths"])
        _, listing, _ = target.run(f"find {roots} -type f -printf '%f %s\\n' 2>/dev/null; true", timeout=120)
        return code, bytes_of(listing, args["names"])

    def ended(self, result, here, runner, folder, args, code, transfer, elapsed):
        _, out, _ = runner.run(
            f"cat {folder}/started {folder}/ended; tail -c {TAIL} {folder}/out; echo; echo ---; "
            f"tail -c {TAIL} {folder}/err",
            60,
        )
        start, end, rest = (out.split("\n", 2) + ["", ""])[:3]
        stdout, _, stderr = rest.rpartition("\n---\n")
        result.update(
            changed=True,
            rc=code,
            stdout=stdout.strip("\n"),
            stderr=stderr.strip("\n"),
            start=start,
            end=end,
            seconds=round(elapsed, 1),
            bytes=transfer.last or 0,
        )
        said = own_failure(stderr)  # what happened and what to do, in the command's words: no resume to add
        if code != 0 and said:
            return self.failed(result, f"{here}: {args['step']} failed: {said}")
        if code != 0:
            return self.failed(
                result,
                f"{here}: {args['step']} failed (exit {code}) after {human_duration(elapsed)} "
                f"{self.where(transfer)}: {(stderr or stdout).strip()[-500:]}. {args['resume']}",
            )
        # A stream's reader is gone at the end (read_by): its last look is all there is to count.
        counted = "" if args["read_by"] or not transfer.counts_bytes else f": {human_bytes(transfer.last or 0)}"
        note = f" ({transfer.note})" if transfer.note else ""
        display.display(f"[spark-serve] {here}: {args['step']} done{counted} in {human_duration(elapsed)}{note}")
        result["msg"] = f"{args['step']} done in {elapsed:.0f} s"
        return result

    @staticmethod
    def failed(result, message):
        display.display(f"[spark-serve] FAILED: {message}")
        result.update(failed=True, changed=True, msg=message)
        return result

    @staticmethod
    def stop(runner, folder, stop_argv):
        """Nothing of the transfer outlives the task: its process group gets SIGTERM, then SIGKILL after 5 s, then
        `stop_argv` runs (a container the command started); the folder goes."""
        stop = shlex.join(stop_argv) + " >/dev/null 2>&1; " if stop_argv else ""
        runner.run(
            # A command stopped at once may not have written its pid yet.
            f"for i in 1 2 3 4 5 6 7 8 9 10; do [ -s {folder}/pid ] && break; sleep 0.1; done; "
            f'g=$(cat {folder}/pid 2>/dev/null); if [ -n "$g" ] && [ ! -f {folder}/rc ]; then '
            f"kill -TERM -$g 2>/dev/null; kill -CONT -$g 2>/dev/null; "
            f"for i in 1 2 3 4 5 6 7 8 9 10; do pgrep -g $g >/dev/null || break; sleep 0.5; done; "
            f"kill -KILL -$g 2>/dev/null; fi; {stop}rm -rf {folder}",
            timeout=60,
        )
