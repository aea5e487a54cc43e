#!/usr/bin/python
"""Documentation for the spark_transfer action plugin (action_plugins/spark_transfer.py does the work)."""

DOCUMENTATION = r"""
---
module: spark_transfer
short_description: Run a long transfer (model download, copy; image pull, load, build) with progress and stall limit
description:
  - "Starts a command on O(run_on) (default the task's host) detached in its own session, and until it ends prints a
    line every O(interval_s) such as C([spark-serve] spark-b: model copy from spark-a 12.4 of 107.0 GB (11.6%) at
    410 MB/s, 4 min left): the bytes done, the total, the rate over the last minute and the time left."
  - The bytes done are those present at the destination (the files under O(paths) on the task's host, partial files
    included), or those one of the command's processes has read (O(read_by), a stream such as C(docker save | ssh)),
    or those the command reports itself in O(progress_file) (an image pull through the Engine API, whose layers
    tell their sizes as they start, so the total reads C(at least) until every layer has told it).
  - "A command that moves no bytes (an image build) reports its step in O(progress_file) instead; its line says
    where it is and for how long it has run, such as C([spark-serve] spark-a: image build at Step 3/9 : RUN
    python3 apply_series.py, 2 min in), and its stall is no output for O(stall_s)."
  - When nothing moves for O(stall_s) the command's whole process group is stopped (SIGTERM, then SIGKILL after
    5 s), O(stop_argv) runs, and the task fails naming the node, the step and O(resume). The same happens after
    O(timeout_s) and after a failed command; nothing of the transfer stays running.
  - "A failed command whose last line on standard error starts with C(spark-transfer-failed: ) has said what
    happened and what to do; the task fails with those words alone, after the node and the step, such as an image
    build whose patch series does not apply (module_utils/docker_progress.py)."
  - Runs on the controller through Ansible's connection plugin for each host and the task's become, as
    vllm_staged_start does. In check mode nothing runs.
options:
  step:
    description: What is transferred, in the lines and messages (C(model copy from spark-a)).
    type: str
    required: true
  argv:
    description: The command, one argument per item. One of O(argv) and O(shell).
    type: list
    elements: str
  shell:
    description: The command as a bash script, run with C(pipefail). One of O(argv) and O(shell).
    type: str
  stdin:
    description: Text fed to the command's standard input (kept in a 0600 file on O(run_on) while it runs; no secrets).
    type: str
    default: ""
  run_on:
    description: Inventory name of the node the command runs on (the sender of a copy); default the task's host.
    type: str
  total:
    description:
      - Bytes the transfer ends with (the Hub's file sizes, the head's snapshot sizes, the image size).
      - 0 when unknown; the total a O(progress_file) reports replaces it.
    type: int
    default: 0
  paths:
    description:
      - Folders or files on the task's host whose files count as done.
      - One of O(paths), O(read_by) and O(progress_file).
    type: list
    elements: str
  names:
    description:
      - Only files under O(paths) named after one of these count (a blob C(<name>), rsync's C(.<name>.XXXXXX), the
        hf client's C(<name>.<id>.incomplete)); without it every file counts.
    type: list
    elements: str
  read_by:
    description:
      - Name of a process of the command whose bytes read count as done (on O(run_on)).
      - One of O(paths), O(read_by) and O(progress_file).
    type: str
  progress_file:
    description:
      - Name of a file the command writes its own progress to, in the transfer's folder on O(run_on) (0700), which
        the command finds in E(SPARK_TRANSFER_DIR). One of O(paths), O(read_by) and O(progress_file).
      - "It holds one JSON object, replaced whole: C(done) bytes, C(total) bytes and C(exact) (false: the total is
        a floor), C(moved) (a counter whose every change is progress, bytes or not) and C(note) (shown after the
        bytes, such as C(5 of 9 layers)). Without C(done) the command is a build: C(note) is its step and only
        C(moved) is progress. module_utils/docker_progress.py writes it for an image pull or build."
    type: str
  interval_s:
    description: Seconds between two progress lines.
    type: float
    default: 30
  stall_s:
    description:
      - Seconds without progress (a byte, or a build's output) after which the transfer is stopped and the task
        fails (0 never).
    type: float
    default: 600
  timeout_s:
    description: Seconds after which the transfer is stopped and the task fails.
    type: float
    default: 43200
  stop_argv:
    description: Run on O(run_on) after the command's processes are stopped (a container the command started).
    type: list
    elements: str
    default: []
  resume:
    description: The sentence a failure ends with (what a rerun does).
    type: str
    default: A rerun resumes the transfer.
attributes:
  check_mode:
    support: full
    description: In check mode nothing runs; the task reports a change.
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Copy the snapshot from the head over the fast link
  spark_transfer:
    step: model copy from spark-a
    run_on: spark-a
    argv: [rsync, --archive, --partial-dir=.rsync-partial, --files-from=-, /cache/repo/, "spark-b:/cache/repo/"]
    stdin: "{{ files | join('\n') }}"
    total: 107000000000
    paths: [/cache/repo/blobs]
    names: "{{ blobs }}"
    interval_s: 30
    stall_s: 600
    resume: A rerun resumes it (rsync keeps --partial-dir).

- name: Pull an image through the Engine API, its layers' bytes in the lines
  spark_transfer:
    step: image pull
    shell: /usr/bin/python3 - pull registry.example/vllm@sha256:... "$SPARK_TRANSFER_DIR/progress.json" 660
    stdin: "{{ lookup('ansible.builtin.file', 'module_utils/docker_progress.py') }}"
    progress_file: progress.json
    interval_s: 30
    stall_s: 600
    resume: A rerun resumes the pull (Docker keeps the layers it finished).
"""

RETURN = r"""
rc:
  description: The command's exit code.
  returned: when the command ended by itself
  type: int
  sample: 0
stdout:
  description: The last 2000 characters of the command's standard output.
  returned: when the command ended by itself
  type: str
  sample: ""
stderr:
  description: The last 2000 characters of the command's standard error.
  returned: when the command ended by itself
  type: str
  sample: ""
start:
  description: When the command started, on the clock of the node it ran on (O(run_on)), to the microsecond.
  returned: when the command ended by itself
  type: str
  sample: "2026-12-06 11:02:03.512094"
end:
  description: When the command ended, on the same clock.
  returned: when the command ended by itself
  type: str
  sample: "2026-12-06 11:06:40.104418"
seconds:
  description: Seconds the transfer took.
  returned: when the command ended by itself
  type: float
  sample: 277.1
bytes:
  description: Bytes done at the end.
  returned: when the command ended by itself
  type: int
  sample: 107000000000
"""

from ansible.module_utils.basic import AnsibleModule

# Reached only when the action plugin is not found (action_plugins missing from the configuration). No main():
# ansible-lint's args rule then leaves the task's arguments to the action plugin, which validates them itself.
if __name__ == "__main__":
    AnsibleModule(argument_spec={}).fail_json(msg="spark_transfer runs as an action plugin on the controller")
