#!/usr/bin/python
"""Ansible module: one node's part of a diagnostics bundle (playbooks/bundle.yml), secrets hidden on the node."""

DOCUMENTATION = r"""
---
module: vllm_evidence
short_description: Collect one node's evidence for a bug report into a tarball, secrets hidden
description:
  - Writes a gzipped tarball on the node holding, under the node's name, what an upstream vLLM or NCCL report asks
    for - the rank's log (C(docker logs --timestamps)), the py-spy stacks of every process of its container
    while it runs, its C(docker inspect), the kernel's GPU, PCIe, CX-7 and memory fault lines, the fabric's link
    and RDMA port state, C(nvidia-smi -q) where it exists, the engine image's identity, and the files named
    in I(files) (the watchdog's events and state on the head).
  - Every text is scrubbed before it is written - the literal values of I(secret_files) (the rank's env file with
    the API key), every secret-named assignment, bearer token and secret option - and the module fails rather than
    write a member that still holds one of those values.
  - Reads only; what it cannot read is listed in C(missing) with the reason, never a failure.
options:
  container:
    description: Name of this node's rank container.
    type: str
    required: true
  dest:
    description: Path of the tarball to write on the node.
    type: path
    required: true
  label:
    description: Folder name of this node's members inside the tarball (the inventory name).
    type: str
    required: true
  py_spy:
    description: The node's py-spy (roles/py_spy).
    type: path
    default: /usr/local/bin/py-spy
  log_lines:
    description: How many of the rank's last log lines to keep.
    type: int
    default: 5000
  fast_netdev:
    description: The fast link's netdev (the CX-7's), whose link and RDMA port state are kept; empty on one node.
    type: str
    default: ""
  files:
    description:
      - Node files, or folders whose files, to keep as they are (scrubbed), e.g. the node's record folder with the
        watchdog's events and the head logs it kept; a missing one is listed.
    type: list
    elements: path
    default: []
  secret_files:
    description: Node env files whose values must never appear in the bundle (the rank's C(secrets.env)).
    type: list
    elements: path
    default: []
  collect_env:
    description: Also run vLLM's C(collect_env) in the rank's image (a minute on a Spark; the versions of torch, CUDA,
      NCCL and vLLM an upstream report asks for).
    type: bool
    default: false
attributes:
  check_mode:
    support: none
    description: The tarball is its result; nothing on the node changes but that file.
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Collect this node's evidence
  vllm_evidence:
    container: spark-serve-rank0
    dest: /tmp/spark-serve-evidence.tar.gz
    label: spark-a
    fast_netdev: enp1s0f1np1
    files: [/var/lib/spark-serve/records]
    secret_files: [/etc/spark-serve/secrets.env]
"""

RETURN = r"""
tarball:
  description: The tarball written on the node.
  returned: success
  type: str
members:
  description: Member names in the tarball.
  returned: success
  type: list
  elements: str
  sample: [spark-a/rank.log, spark-a/rank.stacks.txt, spark-a/kernel.txt]
missing:
  description: What could not be read, each with the reason.
  returned: success
  type: list
  elements: str
  sample: ["gpu.txt: nvidia-smi not found"]
scrubbed:
  description: Members in which something secret-looking was hidden.
  returned: success
  type: list
  elements: str
"""

import json
import os
import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.evidence import env_file_secrets, kernel_lines, leaks, scrub, write_tarball
from ansible.module_utils.rank_commands import stacks_command


def command_text(module, argv, use_unsafe_shell=False):
    """(stdout and stderr of a command, None or why it failed: its exit code and first error line)."""
    if not use_unsafe_shell and not shutil.which(argv[0]):
        return "", f"{argv[0]} not found"
    rc, out, err = module.run_command(argv, use_unsafe_shell=use_unsafe_shell)
    text = out + (f"\n{err}" if err else "")
    return text, None if rc == 0 else f"exit {rc}: {(err.strip().splitlines() or [''])[0][:200]}"


def rank_texts(module, params):
    """{member: (text, problem)} of the rank's container: log, stacks while it runs, inspect."""
    container = params["container"]
    log, problem = command_text(
        module, ["docker", "logs", "--timestamps", "--tail", str(params["log_lines"]), container]
    )
    texts = {"rank.log": (log, problem)}
    inspect, problem = command_text(module, ["docker", "inspect", container])
    texts["rank.inspect.json"] = (inspect, problem)
    found = json.loads(inspect)[0] if not problem else {}
    running = found.get("State", {}).get("Running", False)
    if running and os.path.exists(params["py_spy"]):
        texts["rank.stacks.txt"] = command_text(module, stacks_command(container, params["py_spy"]), True)
    else:
        texts["rank.stacks.txt"] = ("", "py-spy not installed" if running else "the container does not run")
    image = found.get("Image")
    if image:
        texts["image.json"] = command_text(module, ["docker", "image", "inspect", image])
        if params["collect_env"]:
            argv = ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3", image, "-m"]
            texts["collect_env.txt"] = command_text(module, [*argv, "vllm.collect_env"])
    return texts


def node_texts(module, params):
    """{member: (text, problem)} of the node: kernel faults, the fabric's state, the GPU."""
    dmesg, problem = command_text(module, ["dmesg", "--ctime"])
    faults = kernel_lines(dmesg)
    heading = f"# {len(faults)} of {len(dmesg.splitlines())} kernel lines: GPU (NVRM, Xid), PCIe, CX-7 (mlx5), OOM"
    texts = {"kernel.txt": ("\n".join([heading, *faults]) + "\n", problem)}
    netdev = params["fast_netdev"]
    if netdev:
        state = f"ip -d -s link show {netdev}; ip -br addr; " + (
            'for p in /sys/class/infiniband/*/ports/*; do echo "$p: $(cat $p/state) $(cat $p/phys_state) '
            '$(cat $p/rate 2>/dev/null)"; done; rdma link show 2>/dev/null; true'
        )
        texts["fabric.txt"] = command_text(module, state, True)
    texts["gpu.txt"] = command_text(module, ["nvidia-smi", "-q"])
    for path in params["files"]:
        folder = os.path.isdir(path)
        names = [n for n in sorted(os.listdir(path)) if os.path.isfile(os.path.join(path, n))] if folder else [path]
        for name in map(os.path.basename, names):
            source = os.path.join(path, name) if folder else path
            texts[f"files/{name}"] = file_text(source)
    return texts


def file_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as source:
            return source.read(), None
    except OSError as error:
        return "", f"{path}: {error.strerror}"


def read_secrets(paths):
    secrets = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as source:
                secrets += env_file_secrets(source.read())
        except OSError:
            continue  # no key configured: nothing to hide but what looks secret
    return secrets


def main():
    module = AnsibleModule(
        argument_spec=dict(
            container=dict(type="str", required=True),
            dest=dict(type="path", required=True),
            label=dict(type="str", required=True),
            py_spy=dict(type="path", default="/usr/local/bin/py-spy"),
            log_lines=dict(type="int", default=5000),
            fast_netdev=dict(type="str", default=""),
            files=dict(type="list", elements="path", default=[]),
            secret_files=dict(type="list", elements="path", default=[]),
            collect_env=dict(type="bool", default=False),
        ),
        supports_check_mode=False,
    )
    params = module.params
    secrets = read_secrets(params["secret_files"])
    members, missing, scrubbed = {}, [], []
    for name, (text, problem) in {**rank_texts(module, params), **node_texts(module, params)}.items():
        member = f"{params['label']}/{name}"
        if problem:
            missing.append(f"{name}: {problem}")
        elif text:
            clean, changed = scrub(text, secrets)
            members[member] = clean.encode()
            if changed:
                scrubbed.append(member)
    left = leaks(members, secrets)
    if left:
        module.fail_json(msg=f"refusing the evidence: {', '.join(left)} still hold a secret after scrubbing")
    write_tarball(params["dest"], members)
    module.exit_json(changed=True, tarball=params["dest"], members=sorted(members), missing=missing, scrubbed=scrubbed)


if __name__ == "__main__":
    main()
