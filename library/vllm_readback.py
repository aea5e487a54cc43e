#!/usr/bin/python
"""Ansible module: read the engine's own figures back from its rank logs and hold them to the prediction."""

DOCUMENTATION = r"""
---
module: vllm_readback
short_description: Read the engine's logged figures after a start and compare them with the prediction
description:
  - Parses every rank's log of the current run for the figures the engine itself logs at a start, the attention
    block it set (C(Setting attention block size to N tokens)), the KV cache capacity in tokens and the maximum
    concurrency, the tuned MoE table it loaded or its default-MoE-config warning, and the attention backend.
  - Fails nothing itself; RV(failures) lists where the engine contradicts the prediction (a logged block other
    than O(predicted_block)) or the profile (a default-MoE warning while O(tuned_table) is set). The release
    role's acceptance gate fails on them and the deployment record keeps the figures beside the prediction.
  - Runs on the controller; reads only what it is given.
options:
  logs:
    description: Each rank's log text of the current run, rank 0 (the head) first.
    type: list
    elements: str
    required: true
  predicted_block:
    description: The attention block vllm_args predicted for this profile (tokens).
    type: int
  tuned_table:
    description: File name of the tuned MoE table the profile names, when it names one.
    type: str
  platform:
    description: The profile's platform; with O(nodes) and O(env) it decides whether NCCL must report IB.
    type: str
    default: cpu
  nodes:
    description: The profile's node count.
    type: int
    default: 1
  env:
    description: The ranks' rendered environment. With NCCL_DEBUG at INFO or TRACE on a multi-node GPU profile,
      every rank's NCCL must report C(Using network IB); Socket or no such line is a failure.
    type: dict
    default: {}
extends_documentation_fragment:
  - read_only
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Read back what the engine logged
  vllm_readback:
    logs: "{{ rank_logs }}"
    predicted_block: 832
    tuned_table: E=512,N=320,device_name=NVIDIA_GB10.json
  register: readback
"""

RETURN = r"""
figures:
  description: The service's figures (the head's, else any rank's); a figure no rank logged is null.
  returned: always
  type: dict
  sample:
    attention_block: 832
    kv_cache_tokens: 1048576
    max_concurrency: 4.0
    concurrency_at_tokens: 262144
    moe_config: /opt/spark-serve/tuned_configs/E=512,N=320,device_name=NVIDIA_GB10.json
    moe_default_warning: null
    attention_backend: FLASHINFER
    nccl_network: IB
ranks:
  description: The same figures per rank, in rank order.
  returned: always
  type: list
  elements: dict
predicted_block:
  description: The prediction the figures were compared with.
  returned: always
  type: int
  sample: 832
failures:
  description: Where the engine contradicts the prediction or the profile, one line each with both values.
  returned: always
  type: list
  elements: str
  sample: ["the engine set the attention block to 2960 tokens where 1600 was predicted: ..."]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_readback import combine, expected_nccl_network, judge, read_figures


def main():
    module = AnsibleModule(
        argument_spec=dict(
            logs=dict(type="list", elements="str", required=True),
            predicted_block=dict(type="int"),
            tuned_table=dict(type="str"),
            platform=dict(type="str", default="cpu"),
            nodes=dict(type="int", default=1),
            env=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    ranks = [read_figures(text.splitlines()) for text in module.params["logs"]]
    figures = combine(ranks)
    p = module.params
    expected = expected_nccl_network(p["platform"], p["nodes"], p["env"])
    failures = judge(figures, p["predicted_block"], p["tuned_table"], ranks, expected)
    module.exit_json(
        changed=False, figures=figures, ranks=ranks, predicted_block=module.params["predicted_block"], failures=failures
    )


if __name__ == "__main__":
    main()
