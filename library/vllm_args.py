#!/usr/bin/python
"""Ansible module: render `vllm serve` argv from a declarative profile and refuse bad ones before the load."""

DOCUMENTATION = r"""
---
module: vllm_args
short_description: Render and validate vllm serve arguments before the model load
description:
  - Renders the C(vllm serve) command line (argv) and environment for one rank from a mapping of vLLM
    engine arguments, checked against the flag catalog generated from that engine version's own parser.
  - Predicts the hybrid (Mamba/GDN + attention) block size exactly as the engine computes it after the
    weights load, and checks everything that depends on it (prefix cache retention interval) up front.
  - Lists every violation at once, each naming the field, the value and the rule, and changes nothing
    when there is one.
  - With O(dest), writes the rendered argument file; supports check mode and diff.
options:
  engine:
    description: vLLM engine arguments by their vLLM names (C(tensor_parallel_size), C(speculative_config), ...).
    type: dict
    default: {}
  env:
    description: Environment for the engine. Secrets are refused here; use O(api_key_file).
    type: dict
    default: {}
  fabric_env:
    description:
      - The fabric's environment for this node as roce_network publishes it (C(roce_network_engine_env)), merged over
        O(env). It is the only source of C(NCCL_IB_HCA), C(NCCL_IB_GID_INDEX), the socket interface variables and
        C(VLLM_HOST_IP); O(env) setting any of them is refused.
    type: dict
    default: {}
  engine_version:
    description: vLLM version of the engine image; selects the flag catalog and the block rules.
    type: str
    default: 0.33.0
  platform:
    description: Accelerator platform (C(gb10) = DGX Spark, one GPU per node).
    type: str
    choices: [gb10, sm90, cpu]
    default: gb10
  cuda_version:
    description: CUDA version of the engine image (FlashInfer GDN needs 13 or newer on GB10).
    type: str
  cpu_avx512_bf16:
    description:
      - C(cpu) platform only. Whether the CPU that runs the engine has AVX512-BF16, which decides the CPU build's
        SSM-state dtype and so the block size.
      - Unset, it is read from C(/proc/cpuinfo) of the host that runs this module (the test bed's nodes share
        the controller's CPU).
    type: bool
  model:
    description: Model id or path passed to C(vllm serve).
    type: str
    required: true
  revision:
    description: Weights revision, rendered as C(--revision).
    type: str
  trust_remote_code:
    description:
      - The profile's C(model.trust_remote_code), the model id whose repository code the engine may run.
        C(trust_remote_code) (engine or extra_args) is refused unless this names I(model).
    type: str
  allow_unsafe_env:
    description:
      - The profile's C(allow_unsafe_env), the vLLM switches it may turn on that open the engine to whoever reaches
        it (C(VLLM_SERVER_DEV_MODE), C(VLLM_ALLOW_RUNTIME_LORA_UPDATING), C(VLLM_ALLOW_INSECURE_SERIALIZATION)). Each
        is refused in I(env) while on (rule C(unsafe-env)) unless named here.
    type: list
    elements: str
    default: []
  model_config:
    description: The model's config.json, as a path on the controller or a mapping (C(dtype) or C(torch_dtype)).
    type: raw
    required: true
  nodes:
    description: Number of nodes the engine spans.
    type: int
    default: 1
  node_rank:
    description: Rank of the node this argv is for (0 = head, others run C(--headless)).
    type: int
    default: 0
  master_addr:
    description: Head node address on the fast link; required when O(nodes) > 1.
    type: str
  master_port:
    description: Port of the distributed store on the head (1-65535).
    type: int
  fast_link_addresses:
    description:
      - Every node's fast-link address in rank order; O(master_addr) must be on the same subnet.
    type: list
    elements: str
    default: []
  fast_link_prefix_length:
    description: Prefix length of the fast-link subnet.
    type: int
    default: 24
  gpus_per_node:
    description: GPUs (ranks) per node; defaults by platform (gb10 1, cpu 1, sm90 8).
    type: int
  extra_args:
    description: Raw extra flags; checked like O(engine), duplicates of it are errors.
    type: list
    elements: str
    default: []
  moe_table:
    description: Use a tuned fused-MoE table; its expected file name is computed and must exist in O(tuned_config_dir).
    type: dict
    suboptions:
      dtype:
        description: dtype selector of the table name, if any.
        type: str
      block_shape:
        description: block_shape selector of the table name, if any.
        type: list
        elements: int
  tuned_config_dir:
    description: Folder on the controller that holds the tuned MoE tables.
    type: path
  device_name:
    description: Device name as vLLM writes it into table file names.
    type: str
    default: NVIDIA_GB10
  api_key_file:
    description: Path of the API key file on the node; only this reference is rendered, never the key.
    type: path
  dest:
    description: Where to write the rendered argument file (JSON). Omit to only validate.
    type: path
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Validate the pair profile and render rank 1's arguments
  vllm_args:
    engine: "{{ profile.engine }}"
    env: "{{ profile.env }}"
    engine_version: "{{ profile.engine_version }}"
    platform: gb10
    model: nvidia/Qwen3.8-Flash-Next-NVFP4
    revision: fc694b54
    model_config: model_configs/qwen3.8-flash-next-nvfp4.json
    nodes: 2
    node_rank: 1
    master_addr: 192.0.2.10
    dest: /etc/spark-serve/vllm-args.json

# Ad hoc:
# ansible localhost -c local -i localhost, -M library -m vllm_args \
#   -a '{"model": "m", "model_config": {"model_type": "llama"}, "engine": {"max_num_seqs": 4}}'
"""

RETURN = r"""
argv:
  description: The C(vllm serve) command line, every element a string (compose-safe).
  returned: always
  type: list
  elements: str
env:
  description: Engine environment; secrets are never included, only a reference to the key file.
  returned: always
  type: dict
engine_version:
  description: The engine version of the flag catalog used (the series' release, e.g. C(0.32.0)).
  returned: success
  type: str
effective_block:
  description: Attention block size (tokens) the engine will set for this profile.
  returned: always
  type: int
scheduler_block:
  description: Block the prefix cache retention interval must be a multiple of.
  returned: always
  type: int
block:
  description: The full block prediction with the steps of the computation.
  returned: always
  type: dict
moe_table_file:
  description: File name of the tuned MoE table vLLM will look up, when O(moe_table) is set.
  returned: always
  type: str
warnings:
  description: Things that are allowed but worth a look.
  returned: always
  type: list
  elements: str
violations:
  description: Every problem found, each with field, value (redacted for secrets), rule and message.
  returned: failed
  type: list
  elements: dict
violation_lines:
  description: The violations as one line each (message and rule), as printed in RV(msg).
  returned: failed
  type: list
  elements: str
"""

import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_refusals import violation
from ansible.module_utils.engine_rules import plan
from ansible.module_utils.hybrid_block import PLATFORMS
from ansible.module_utils.vllm_catalogs import DEFAULT_ENGINE_VERSION

ARGUMENT_SPEC = dict(
    engine=dict(type="dict", default={}),
    env=dict(type="dict", default={}),
    fabric_env=dict(type="dict", default={}),
    engine_version=dict(type="str", default=DEFAULT_ENGINE_VERSION),
    platform=dict(type="str", default="gb10", choices=sorted(PLATFORMS)),
    cuda_version=dict(type="str"),
    cpu_avx512_bf16=dict(type="bool"),
    model=dict(type="str", required=True),
    revision=dict(type="str"),
    trust_remote_code=dict(type="str"),
    allow_unsafe_env=dict(type="list", elements="str", default=[]),
    model_config=dict(type="raw", required=True),
    nodes=dict(type="int", default=1),
    node_rank=dict(type="int", default=0),
    master_addr=dict(type="str"),
    master_port=dict(type="int"),
    fast_link_addresses=dict(type="list", elements="str", default=[]),
    fast_link_prefix_length=dict(type="int", default=24),
    gpus_per_node=dict(type="int"),
    extra_args=dict(type="list", elements="str", default=[]),
    moe_table=dict(type="dict", options=dict(dtype=dict(type="str"), block_shape=dict(type="list", elements="int"))),
    tuned_config_dir=dict(type="path"),
    device_name=dict(type="str", default="NVIDIA_GB10"),
    api_key_file=dict(type="path", no_log=False),
    dest=dict(type="path"),
)


def load_model_config(raw):
    """(mapping, problem) from a path to config.json, a JSON string or a mapping."""
    if isinstance(raw, dict):
        return raw, None
    text = str(raw)
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text), None
        except ValueError as err:
            return None, f"is not valid JSON: {err}"
    try:
        with open(text, encoding="utf-8") as handle:
            return json.load(handle), None
    except (OSError, ValueError) as err:
        return None, f"cannot be read as config.json: {err}"


def read_text(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return ""


def rendered_file(result):
    keep = ("argv", "env", "engine_version", "effective_block", "scheduler_block", "moe_table_file")
    return json.dumps({key: result[key] for key in keep}, indent=2, sort_keys=True) + "\n"


def write_atomically(module, dest, content):
    directory = os.path.dirname(dest) or "."
    os.makedirs(directory, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=directory, prefix=".vllm_args.")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(content)
    module.atomic_move(tmp, dest)


def refuse(module, violations):
    """Fail with the violations only (one line each), never the rendered argv or a JSON dump of the input."""
    lines = [f"- {v['message']} [rule: {v['rule']}]" for v in violations]
    module.fail_json(
        msg=f"{len(violations)} violation(s) in the vLLM engine profile; nothing was written:\n" + "\n".join(lines),
        violations=violations,
        violation_lines=lines,
    )


def cpu_has_avx512_bf16():
    """The CPU build resets the SSM state to float32 only with AVX512-BF16 (torch.cpu._is_avx512_bf16_supported)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            return any(line.startswith("flags") and "avx512_bf16" in line.split() for line in cpuinfo)
    except OSError:
        return False


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = dict(module.params)
    model_config, problem = load_model_config(params["model_config"])
    if problem:
        refuse(module, [violation("model_config", params["model_config"], "model-config", problem)])
    if not isinstance(params["model_config"], dict):
        params["model_config_path"] = str(params["model_config"])
    params["model_config"] = model_config
    if params["platform"] == "cpu" and params["cpu_avx512_bf16"] is None:
        params["cpu_avx512_bf16"] = cpu_has_avx512_bf16()
    folder = params.get("tuned_config_dir")
    params["tuned_config_files"] = sorted(os.listdir(folder)) if folder and os.path.isdir(folder) else None

    result = plan(params)
    violations = result.pop("violations")
    for warning in result.pop("warnings"):
        module.warn(warning)  # Ansible returns them as the result's `warnings`
    if violations:
        refuse(module, violations)

    changed, diff = False, None
    dest = params.get("dest")
    if dest:
        after = rendered_file(result)
        before = read_text(dest)
        changed = before != after
        diff = {"before": before, "after": after, "before_header": dest, "after_header": dest}
        if changed and not module.check_mode:
            write_atomically(module, dest, after)
    module.exit_json(changed=changed, diff=diff, **result)


if __name__ == "__main__":
    main()
