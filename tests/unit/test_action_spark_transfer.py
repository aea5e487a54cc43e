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
from ansible.module_utils import docker_progress
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


# A command that reports its own progress (module_utils/docker_progress.py's reports), written whole as it does.
REPORT = (
    'w() { echo "$1" > "$SPARK_TRANSFER_DIR/p.tmp" && mv "$SPARK_TRANSFER_DIR/p.tmp" "$SPARK_TRANSFER_DIR/p.json"; }; '
)


def reports(*lines, pause=0.4):
    return REPORT + "; ".join(f"w {shlex.quote(line)}; sleep {pause}" for line in lines)


def test_a_pull_reports_its_bytes_and_its_total_as_the_layers_tell_it(lines):
    result = transfer(
        step="image pull",
        shell=reports(
            '{"done": 0, "total": 1000, "exact": false, "moved": 0, "note": "0 of 2 layers"}',
            '{"done": 500, "total": 1000, "exact": false, "moved": 500, "note": "0 of 2 layers"}',
            '{"done": 1500, "total": 3000, "exact": true, "moved": 1500, "note": "1 of 2 layers"}',
            '{"done": 3000, "total": 3000, "exact": true, "moved": 6001, "note": "2 of 2 layers"}',
        ),
        progress_file="p.json",
        interval_s=0.2,
        stall_s=5,
    )
    assert not result.get("failed"), result
    assert result["bytes"] == 3000
    assert lines[0].endswith("image pull: a line every 0.2 s, stopped after 5 s without progress"), lines
    # before every layer told its size the total is a floor: no percent, no time left
    assert any(re.search(r"spark-b: image pull 0\.5 of at least 1\.0 kB at [^,]+ \(0 of 2 layers\)$", x) for x in lines)
    assert any(re.search(r"spark-b: image pull 1\.5 of 3\.0 kB \(50\.0%\) at .*\(1 of 2 layers\)$", x) for x in lines)
    assert re.match(r"\[spark-serve\] spark-b: image pull done: 3\.0 kB in \d+ s \(2 of 2 layers\)$", lines[-1]), lines


def test_movement_without_new_bytes_is_no_stall(lines):
    """A layer being extracted adds no downloaded byte; its counter moving keeps the pull alive."""
    moving = [f'{{"done": 100, "total": 100, "moved": {100 + i}, "note": "extracting"}}' for i in range(8)]
    result = transfer(
        step="image pull", shell=reports(*moving, pause=0.3), progress_file="p.json", interval_s=0.2, stall_s=1
    )
    assert not result.get("failed"), result
    assert result["rc"] == 0 and result["bytes"] == 100


def test_a_build_shows_its_step_and_a_silent_build_is_stopped_naming_node_step_and_where(lines):
    token = f"{uuid.uuid4().int % 10**6}.5"  # a sleep no other process runs
    result = transfer(
        step="image build",
        shell=reports('{"moved": 1, "note": "Step 2/3 : RUN python3 apply_series.py"}') + f"; sleep {token}",
        progress_file="p.json",
        interval_s=0.2,
        stall_s=1,
        resume="A rerun builds again (Docker's build cache keeps the steps that finished).",
    )
    assert result["failed"] is True
    assert re.match(
        r"spark-b: image build stalled: no output for \d s at Step 2/3 : RUN python3 apply_series.py; it was "
        r"stopped\. A rerun builds again \(Docker's build cache keeps the steps that finished\)\.$",
        result["msg"],
    ), result["msg"]
    assert any(x.endswith("spark-b: image build at Step 2/3 : RUN python3 apply_series.py, 1 s in") for x in lines)
    assert not any(" of " in x for x in lines[1:]), lines  # no bytes for a build
    assert not alive(f"sleep {token}"), "a process of the stalled build still runs"
    assert not any(map(os.path.exists, filter(None, LAUNCHED))), "the transfer folder outlived the transfer"


def test_a_failed_build_names_its_step_and_the_apis_words(lines):
    result = transfer(
        step="image build",
        shell=reports('{"moved": 1, "note": "Step 3/3 : RUN false"}')
        + "; echo 'APIError: returned a non-zero code: 1' >&2; exit 1",
        progress_file="p.json",
    )
    assert result["failed"] is True and result["rc"] == 1
    assert re.match(
        r"spark-b: image build failed \(exit 1\) after \d s at Step 3/3 : RUN false: APIError: returned", result["msg"]
    )


def test_a_build_that_says_why_it_failed_fails_with_those_words_alone(lines):
    """docker_progress.py's marked line (a series that does not apply) is the whole message: no exit code, no
    stderr tail, no resume sentence (a rerun without a fix fails the same)."""
    said = "patch 0001-x.patch of the series patches.local does not apply to the base's vLLM: vllm/a.py: hunk 1"
    result = transfer(
        step="image build",
        shell=reports('{"moved": 1, "note": "Step 3/3 : RUN python3 apply_series.py"}')
        + f"; echo {shlex.quote(docker_progress.OWN_FAILURE + said)} >&2; exit 1",
        progress_file="p.json",
        resume="A rerun builds again (Docker's build cache keeps the steps that finished).",
    )
    assert (result["failed"], result["rc"], result["msg"]) == (True, 1, f"spark-b: image build failed: {said}")
    assert lines[-1] == f"[spark-serve] FAILED: spark-b: image build failed: {said}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (dict(step="s", total=1, paths=["/x"]), "one of the following is required: argv, shell"),
        (dict(step="s", total=1, argv=["true"], shell="true", paths=["/x"]), "mutually exclusive: argv|shell"),
        (dict(step="s", total=1, argv=["true"]), "one of the following is required: paths, read_by, progress_file"),
        (
            dict(step="s", argv=["true"], paths=["/x"], progress_file="p"),
            "mutually exclusive: paths|read_by|progress_file",
        ),
    ],
)
def test_bad_arguments_are_refused_naming_them(lines, args, message):
    with pytest.raises(Exception, match=message.replace("|", r"\|")):
        transfer(**args)
