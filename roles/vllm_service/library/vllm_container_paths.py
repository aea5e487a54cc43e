#!/usr/bin/python
"""Ansible module: every path the engine is told about exists inside the pinned image with the service's mounts."""

DOCUMENTATION = r"""
---
module: vllm_container_paths
short_description: Check, in the pinned image with the service's mounts, every container path the engine is told about
description:
  - Collects the container paths a rank's C(vllm serve) argv and environment name, each with what the engine does
    when it is missing, and tests them all in one throw-away container of the pinned image (C(docker run --rm
    --network none --pull never), entrypoint C(/bin/sh)) with exactly the bind mounts the service gets.
  - "Checked: C(VLLM_TUNED_CONFIG_FOLDER) and each tuned MoE table in it (or, when none is named, at least one
    C(E=*.json) there), every overlay target, C(--chat-template) and C(--tokenizer) when they are absolute paths,
    C(--download-dir), and the model: an absolute model directory's C(config.json), or for a hub id the cached
    snapshot of the pinned revision (C(refs/<revision>) or C(snapshots/<revision>)) under C(--download-dir) or
    C(HF_HUB_CACHE) or C(HF_HOME)/hub."
  - In the same container it reads the image's NCCL version (the nvidia-nccl wheel's metadata, else the versioned
    C(libnccl.so.2.x), else C(NCCL_VERSION)) and refuses a cross-node start with CUDA graphs on an NCCL older than
    2.30.4, which deadlocks on GB10 (vLLM issue #52504). A CPU image has no NCCL: the result says so.
  - Fails naming every missing path, what names it and the consequence, and the NCCL fault; nothing is started or
    changed. A bind
    mount whose source is missing on the node fails the same way (C(--mount) never creates it).
  - Read-only; supports check mode.
options:
  image:
    description: Image reference, pinned by digest.
    type: str
    required: true
  argv:
    description: The rank's full command (C(vllm serve <model> ...)).
    type: list
    elements: str
    required: true
  env:
    description: The rank's environment.
    type: dict
    default: {}
  mounts:
    description: The service's bind mounts, as compose renders them.
    type: list
    elements: dict
    default: []
    suboptions:
      src:
        description: Path on the node.
        type: str
        required: true
      dest:
        description: Path in the container.
        type: str
        required: true
      ro:
        description: Read-only.
        type: bool
        default: false
  overlays:
    description: Overlay targets (C(dest)) that must exist in the container.
    type: list
    elements: str
    default: []
  tuned_tables:
    description: Tuned MoE table file names the engine must find in C(VLLM_TUNED_CONFIG_FOLDER).
    type: list
    elements: str
    default: []
  revision:
    description: Pinned model revision, when the argv has no C(--revision).
    type: str
    default: ""
  label:
    description: Who is checked, for messages (e.g. C(rank 1 (node-1))).
    type: str
    default: ""
  cross_node:
    description: Whether the ranks span several nodes (the NCCL check applies to cross-node tensor parallel).
    type: bool
    default: false
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Check every path the engine is told about
  vllm_container_paths:
    image: registry.local:5000/spark-serve/vllm-gb10@sha256:0123...
    argv: [vllm, serve, nvidia/Qwen3.8-Flash-Next-NVFP4, --revision, fc694b54]
    env: {HF_HOME: /var/lib/spark-serve/huggingface, VLLM_TUNED_CONFIG_FOLDER: /opt/spark-serve/tuned_configs}
    mounts:
      - {src: /var/lib/spark-serve/huggingface, dest: /var/lib/spark-serve/huggingface}
      - {src: /etc/spark-serve/tuned_configs, dest: /opt/spark-serve/tuned_configs, ro: true}
    tuned_tables: ["E=512,N=320,device_name=NVIDIA_GB10.json"]
"""

RETURN = r"""
checked:
  description: Every path checked, with what names it and the consequence when it is missing.
  returned: always
  type: list
  elements: dict
missing:
  description: The checked entries that do not exist in the container.
  returned: always
  type: list
  elements: dict
nccl:
  description: The image's NCCL version (C(none) without NCCL) and what the check concluded.
  returned: when the container ran
  type: dict
  sample: {version: 2.30.4, checked: "NCCL 2.30.4 (cross-node, CUDA graphs on): no known deadlock"}
"""

import os
import shlex

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.nccl_check import cuda_graph_deadlock, uses_cuda_graphs, version_script, what_was_checked

MOE_FALLBACK = "the engine would silently fall back to its default MoE kernels"
# Flags whose value is a path inside the container when it is absolute.
PATH_FLAGS = {
    "--chat-template": "the engine would not find its chat template (it fails at start, or takes the path for a "
    "literal template)",
    "--tokenizer": "the engine could not load its tokenizer",
}


def flag_value(argv, flag):
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def checks(p):
    """[{path, what, consequence, test}] where test is a POSIX shell condition that holds when the path is fine."""
    argv, env = [str(a) for a in p["argv"]], {k: str(v) for k, v in (p["env"] or {}).items()}
    found = []

    def add(path, what, consequence, test=None):
        found.append(
            {"path": path, "what": what, "consequence": consequence, "test": test or f"[ -e {shlex.quote(path)} ]"}
        )

    folder = env.get("VLLM_TUNED_CONFIG_FOLDER")
    if folder:
        add(folder, "env VLLM_TUNED_CONFIG_FOLDER", MOE_FALLBACK, f"[ -d {shlex.quote(folder)} ]")
        for table in p["tuned_tables"]:
            add(os.path.join(folder, table), "tuned MoE table in VLLM_TUNED_CONFIG_FOLDER", MOE_FALLBACK)
        if not p["tuned_tables"]:
            add(
                os.path.join(folder, "E=*.json"),
                "a tuned MoE table in VLLM_TUNED_CONFIG_FOLDER",
                MOE_FALLBACK,
                f"ls {shlex.quote(folder)}/E=*.json >/dev/null 2>&1",
            )
    for dest in p["overlays"]:
        add(dest, "overlay target", "the image's own file would run instead of the patched one")
    for flag, consequence in PATH_FLAGS.items():
        value = flag_value(argv, flag)
        if value and value.startswith("/"):
            add(value, flag, consequence)
    download_dir = flag_value(argv, "--download-dir")
    if download_dir:
        add(
            download_dir,
            "--download-dir",
            "the engine would not find the weights there and, offline, fail after the start",
            f"[ -d {shlex.quote(download_dir)} ]",
        )
    model = flag_value(argv, "--model") or (argv[2] if argv[:2] == ["vllm", "serve"] and len(argv) > 2 else None)
    if model and not model.startswith("-"):
        consequence = "the engine could not load the model offline and would fail after the start"
        if model.startswith("/"):
            add(os.path.join(model, "config.json"), "model directory", consequence)
        else:
            revision = flag_value(argv, "--revision") or p["revision"] or "main"
            hf_home = env.get("HF_HOME", "/root/.cache/huggingface")
            hub = download_dir or env.get("HF_HUB_CACHE") or os.path.join(hf_home, "hub")
            repo = os.path.join(hub, "models--" + model.replace("/", "--"))
            q_repo, q_rev = shlex.quote(repo), shlex.quote(revision)
            add(
                f"{repo}/snapshots/<{revision}>/config.json",
                f"model {model}@{revision}",
                consequence,
                f"c=$(cat {q_repo}/refs/{q_rev} 2>/dev/null || echo {q_rev}); "
                f'[ -e {q_repo}/snapshots/"$c"/config.json ]',
            )
    return found


# What a deploy alone on a node the prepare stage never reached says (playbooks/deploy.yml works alone only there).
PREPARE_FIRST = (
    "the prepare stage puts Docker, the pinned image and the model on every node: run ansible-playbook "
    "playbooks/prepare.yml (or site.yml) on this inventory first"
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", required=True),
            argv=dict(type="list", elements="str", required=True),
            env=dict(type="dict", default={}),
            mounts=dict(
                type="list",
                elements="dict",
                default=[],
                options=dict(
                    src=dict(type="str", required=True),
                    dest=dict(type="str", required=True),
                    ro=dict(type="bool", default=False),
                ),
            ),
            overlays=dict(type="list", elements="str", default=[]),
            tuned_tables=dict(type="list", elements="str", default=[]),
            revision=dict(type="str", default=""),
            label=dict(type="str", default=""),
            cross_node=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    who = f"{p['label']}: " if p["label"] else ""
    if not module.get_bin_path("docker"):
        module.fail_json(
            msg=f"{who}no docker on the node; nothing was started: {PREPARE_FIRST}", checked=[], missing=[]
        )
    found = checks(p)
    described = [{k: v for k, v in c.items() if k != "test"} for c in found]
    script = "".join(f"{c['test']} || echo missing:{index}\n" for index, c in enumerate(found))
    script += version_script() + "\necho checked\n"
    command = ["docker", "run", "--rm", "--network", "none", "--pull", "never", "--entrypoint", "/bin/sh"]
    for mount in p["mounts"]:
        readonly = ",readonly" if mount["ro"] else ""
        command += ["--mount", f"type=bind,src={mount['src']},dst={mount['dest']}{readonly}"]
    command += [p["image"], "-c", script]
    rc, out, err = module.run_command(command)
    if rc != 0 or "checked" not in out.split():
        module.fail_json(
            msg=f"{who}cannot check the engine's paths in {p['image']} with the service's mounts (a mount source "
            f"missing on the node, or the image not pulled); nothing was started: {(err or out).strip()[-600:]}; "
            f"if this node was never prepared: {PREPARE_FIRST}",
            checked=described,
            missing=[],
        )
    missing = [described[int(line.split(":")[1])] for line in out.split() if line.startswith("missing:")]
    version = next((line.split(":", 1)[1] for line in out.split() if line.startswith("nccl:")), "none")
    graphs = uses_cuda_graphs(p["argv"])
    nccl = {"version": version, "checked": what_was_checked(version, p["cross_node"], graphs)}
    problems = [f"{m['path']} ({m['what']}): {m['consequence']}" for m in missing]
    deadlock = cuda_graph_deadlock(version, p["cross_node"], graphs)
    if missing or deadlock:
        paths = (
            f"{len(missing)} path(s) the engine is told about do not exist in {p['image']} with the service's mounts"
            if missing
            else f"the image {p['image']} cannot run this start"
        )
        module.fail_json(
            msg=f"{who}{paths}; nothing was started: " + " | ".join(problems + ([deadlock] if deadlock else [])),
            checked=described,
            missing=missing,
            nccl=nccl,
        )
    module.exit_json(changed=False, checked=described, missing=[], nccl=nccl)


if __name__ == "__main__":
    main()
