"""action_plugins/spark_transfer.py run in-process, its node commands run by the local shell (Node patched: a node is
this machine): the detached start, the looks at the bytes, the stall that stops the whole process group."""

import datetime
import os
import re
import shlex
import subprocess
import uuid
from unittest import mock

import pytest
from ansible.plugins.action import spark_transfer

LAUNCHED = []  # the transfer folders the plugin created


class LocalNode:
    """A node that is this machine: what the plugin runs on a node runs here, bounded like on a node."""

    def __init__(self, action, host, task_vars):
        self.host, self.connection = host, mock.MagicMock()

    def run(self, command, timeout=60):
        proc = subprocess.run(
            ["sh", "-c", f"timeout {int(timeout)} sh -c {shlex.quote(command)}"], capture_output=True, text=True
        )
        if "mktemp -d /tmp/spark-transfer." in command:
            LAUNCHED.append(proc.stdout.strip())
        return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture()
def lines(monkeypatch):
    """The lines the plugin printed."""
    printed = []
    monkeypatch.setattr(spark_transfer, "Node", LocalNode)
    monkeypatch.setattr(spark_transfer.display, "display", printed.append)
    LAUNCHED.clear()
    return printed


def transfer(**args):
    task = mock.MagicMock(args=args, async_val=0, check_mode=False, action="spark_transfer")
    connection = mock.MagicMock()
    connection._shell.tmpdir = None
    play_context = mock.MagicMock(check_mode=False)
    action = spark_transfer.ActionModule(task, connection, play_context, loader=None, templar=None)
    return action.run(task_vars={"inventory_hostname": "spark-b"})


def alive(token):
    """Whether a process whose command line holds `token` (unique to one test) still runs."""
    return subprocess.run(["pgrep", "-f", token], capture_output=True).returncode == 0


def test_progress_lines_count_the_named_files_until_the_command_ends(lines, tmp_path):
    write = "; ".join(f"head -c 100000 /dev/zero > {tmp_path}/blob{i}; sleep 0.3" for i in range(3))
    result = transfer(
        step="model copy from spark-a",
        shell=f"head -c 7 /dev/zero > {tmp_path}/other; {write}",
        total=300000,
        paths=[str(tmp_path)],
        names=["blob"],
        interval_s=0.2,
        stall_s=5,
    )
    assert not result.get("failed"), result
    assert (result["rc"], result["bytes"]) == (0, 300000)
    # when the command ran, on the node's clock to the microsecond (a fan-out's copies compare on the head's)
    stamps = [datetime.datetime.strptime(result[key], "%Y-%m-%d %H:%M:%S.%f") for key in ("start", "end")]
    assert 0.9 < (stamps[1] - stamps[0]).total_seconds() < 30, result
    done = [float(line.split(" of ")[0].rsplit(" ", 1)[1]) for line in lines if " of 300.0 kB (" in line]
    assert len(done) >= 3 and done == sorted(done) and done[-1] > done[0], lines
    assert lines[-1].startswith("[spark-serve] spark-b: model copy from spark-a done: 300.0 kB in "), lines
    assert not any(map(os.path.exists, filter(None, LAUNCHED))), "the transfer folder outlived the transfer"


def test_a_stalled_transfer_is_stopped_whole_and_fails_naming_node_step_and_resume(lines, tmp_path):
    token = f"{uuid.uuid4().int % 10**6}.5"  # a sleep no other process runs
    result = transfer(
        step="model copy from spark-a",
        shell=f"head -c 5000 /dev/zero > {tmp_path}/blob; sleep {token} | sleep {token}",
        total=10000,
        paths=[str(tmp_path)],
        interval_s=0.2,
        stall_s=1,
        stop_argv=["touch", str(tmp_path / "stopped")],
        resume="A rerun resumes the copy.",
    )
    assert result["failed"] is True
    assert result["msg"].startswith("spark-b: model copy from spark-a stalled: no byte moved for "), result["msg"]
    assert result["msg"].endswith("at 5.0 kB of 10.0 kB; the transfer was stopped. A rerun resumes the copy.")
    assert not alive(f"sleep {token}"), "a process of the stalled transfer still runs"
    assert (tmp_path / "stopped").exists(), "stop_argv did not run"
    assert not any(map(os.path.exists, filter(None, LAUNCHED))), "the transfer folder outlived the transfer"


def test_a_failed_command_fails_with_its_exit_code_and_error(lines, tmp_path):
    result = transfer(
        step="image load from spark-a", argv=["sh", "-c", "echo no space left >&2; exit 3"], total=1, paths=["/none"]
    )
    assert result["failed"] is True and result["rc"] == 3
    assert result["msg"].startswith("spark-b: image load from spark-a failed (exit 3) after "), result["msg"]
    assert "no space left" in result["msg"] and result["msg"].endswith("A rerun resumes the transfer.")


def test_bytes_read_by_a_process_of_the_stream_count(lines):
    result = transfer(
        step="image load from spark-a",
        shell="for i in 1 2 3; do head -c 1000000 /dev/zero; sleep 0.4; done | cat > /dev/null",
        total=3000000,
        read_by="cat",
        interval_s=0.2,
        stall_s=5,
    )
    assert not result.get("failed"), result
    # cat's own few startup reads may carry it just past the estimate ("3.0 of about 3.0 MB")
    done = [
        float(found.group(1)) for found in map(re.compile(r" ([\d.]+) of (?:about )?3\.0 MB").search, lines) if found
    ]
    assert done[-1] == 3.0 and done == sorted(done) and len(set(done)) >= 3, lines  # cat's reads, while it ran
    assert lines[-1].startswith("[spark-serve] spark-b: image load from spark-a done in "), lines


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (dict(step="s", total=1, paths=["/x"]), "one of the following is required: argv, shell"),
        (dict(step="s", total=1, argv=["true"], shell="true", paths=["/x"]), "mutually exclusive: argv|shell"),
        (dict(step="s", total=1, argv=["true"]), "one of the following is required: paths, read_by"),
    ],
)
def test_bad_arguments_are_refused_naming_them(lines, args, message):
    with pytest.raises(Exception, match=message.replace("|", r"\|")):
        transfer(**args)
