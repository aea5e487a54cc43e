"""Action plugin: take or release the inventory's lock on the head (module_utils/inventory_lock.py decides).

Runs on the controller, reaching the head through the task's own connection and become (the task runs on the
head): the controller knows who it is (its host name and ansible-playbook's pid, which prove a lock of its own stale
after a crash) and the head knows whether its watchdog still runs. Documentation: library/spark_lock.py.
"""

import json
import os
import shlex
import socket
import sys
import time
import uuid

import ansible.module_utils
from ansible import constants as C
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

# The project's module_utils join the package here, as in action_plugins/vllm_staged_start.py.
ansible.module_utils.__path__.extend(p for p in C.DEFAULT_MODULE_UTILS_PATH if p not in ansible.module_utils.__path__)
from ansible.module_utils.inventory_lock import decide, describe, parse, refusal

# Documented in library/spark_lock.py (tests/unit/test_module_docs.py holds the two together).
ARGUMENT_SPEC = dict(
    path=dict(type="str", required=True),
    state=dict(type="str", default="held", choices=["held", "released"]),
    kind=dict(type="str", default="deploy", choices=["deploy", "rollback"]),
    token=dict(type="str", no_log=False),
    break_lock=dict(type="bool", default=False),
    stop_timeout_s=dict(type="int", default=60),
)


def playbook_command(argv):
    """ansible-playbook's command line with every extra-vars value left out (it may carry anything)."""
    shown, hide = [os.path.basename(argv[0])], False
    for arg in argv[1:]:
        shown.append("..." if hide else arg.split("=", 1)[0] + "=..." if arg.startswith("--extra-vars=") else arg)
        hide = arg in ("-e", "--extra-vars")
    return " ".join(shown)


def controller_pid_alive(pid):
    """Whether `pid` still runs ansible-playbook on this controller."""
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as cmdline:
            return b"ansible" in cmdline.read()
    except (OSError, ValueError):
        return False


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(ARGUMENT_SPEC)
        if self._play_context.check_mode:
            result.update(changed=False, msg="check mode: no lock taken", token="")
            return result
        if args["state"] == "released":
            return self.release(result, args)
        return self.take(result, args)

    def shell(self, command):
        """(rc, stdout) of `command` on the head, with the task's become."""
        answer = self._low_level_execute_command(command, sudoable=True)
        return answer["rc"], to_text(answer.get("stdout", ""), errors="surrogate_or_replace")

    def read(self, path):
        _, out = self.shell(f"cat {shlex.quote(path)} 2>/dev/null; true")
        return parse(out)

    def head_pid_alive(self, pid):
        rc, _ = self.shell(f"kill -0 {int(pid)} 2>/dev/null")
        return rc == 0

    def take(self, result, args):
        path = args["path"]
        me = {
            "kind": args["kind"],
            "host": socket.gethostname(),
            "pid": os.getppid(),  # ansible-playbook itself: this worker process is its child
            "command": playbook_command(sys.argv),
            "since": time.time(),
            "token": uuid.uuid4().hex,
        }
        holder = self.read(path)
        alive = None
        if holder and holder.get("kind") == "watchdog":
            alive = self.head_pid_alive(holder.get("pid", 0))
        elif holder and holder.get("host") == me["host"]:
            alive = controller_pid_alive(holder.get("pid", 0))
        verdict, why = decide(holder, me, alive)
        if verdict == "refuse" and not args["break_lock"]:
            result.update(failed=True, msg=refusal(holder, path), holder=holder)
            return result
        if verdict == "stop":
            self.stop_watchdog(holder, args["stop_timeout_s"])
        notes = [] if holder is None else [f"took the lock over from {why}" if verdict != "refuse" else f"broke {why}"]
        rc, out = self.shell(self.write_command(path, me, replace=holder is not None))
        if rc != 0:
            result.update(failed=True, msg=f"could not take the lock {path} on the head: {out.strip()}")
            return result
        result.update(
            changed=holder is not None,  # a lock of our own is transient: only replacing another's changes anything
            token=me["token"],
            holder=me,
            stopped_watchdog=verdict == "stop",
            msg="; ".join(notes) or f"lock {path} taken",
        )
        return result

    def stop_watchdog(self, holder, timeout_s):
        """SIGTERM to the watchdog's look or restart, then wait (bounded) until it is gone: a deploy replaces every
        rank anyway, and the two must never act at once."""
        pid = int(holder.get("pid", 0))
        self.shell(f"kill -TERM {pid} 2>/dev/null; true")
        for _ in range(int(timeout_s * 2)):
            if not self.head_pid_alive(pid):
                return
            time.sleep(0.5)
        self.shell(f"kill -KILL {pid} 2>/dev/null; true")

    @staticmethod
    def write_command(path, holder, replace):
        """Atomic: a new lock is linked into place (fails when one appeared meanwhile); a stale one is renamed over."""
        quoted, temp = shlex.quote(path), shlex.quote(f"{path}.{holder['token']}")
        place = f"mv -f {temp} {quoted}" if replace else f"ln {temp} {quoted} && rm -f {temp}"
        return (
            f"mkdir -p $(dirname {quoted}) && printf '%s\\n' {shlex.quote(json.dumps(holder))} > {temp} && "
            f"({place}) 2>&1 || {{ rm -f {temp}; echo 'another run took the lock first'; exit 1; }}"
        )

    def release(self, result, args):
        """Remove the lock only when it is still ours (the token): never another run's."""
        holder = self.read(args["path"])
        if not holder or holder.get("token") != args["token"]:
            result.update(
                changed=False, released=False, msg=f"not ours to release: {describe(holder) if holder else 'no lock'}"
            )
            return result
        self.shell(f"rm -f {shlex.quote(args['path'])}")
        result.update(changed=False, released=True, msg=f"lock {args['path']} released")
        return result
