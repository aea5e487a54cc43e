#!/usr/bin/python
"""Ansible module: probe a running vLLM service and classify why it is slow (seed 000's diagnosis table)."""

DOCUMENTATION = r"""
---
module: vllm_diagnose
short_description: Probe a running vLLM service and say why it is slow, with the evidence
description:
  - Reads /metrics, sends one probe prompt of I(probe_words) words twice (a new prompt each run, so the first is
    cold and the repeat shows what the prefix cache does at that length), reads /metrics again, and classifies
    the evidence with module_utils/diagnosis.py (no warm-up since the start, prefix caching off, cache block
    larger than the whole request, changed prefix or eviction, queueing, low MTP acceptance).
  - Hit evidence comes from the probe's own cached_tokens and counter deltas, never from the log's cumulative
    "Prefix cache hit rate".
  - Runs on the controller (delegate_to localhost). Check mode sends nothing.
options:
  argv:
    description: The head container's engine argv (for the prefix-caching setting).
    type: list
    elements: str
    default: []
  effective_block:
    description:
      - The running deployment's predicted cache block in tokens (from its record).
      - Used only when the engine's /metrics does not report its own block (vllm:cache_config_info block_size).
    type: int
  warmup_requests:
    description: How many warm-up requests the running profile lists.
    type: int
    default: 0
  uptime_s:
    description: Seconds since the head's engine container started.
    type: float
  probe_words:
    description: Length of the probe prompt in words; use the length of the requests that are slow.
    type: int
    default: 400
  max_tokens:
    description: Output tokens per probe request.
    type: int
    default: 8
  timeout_s:
    description: Timeout of one request.
    type: float
    default: 300
extends_documentation_fragment:
  - vllm_api
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Diagnose the service
  vllm_diagnose:
    url: http://10.0.0.1:8000
    model: qwen3.8-flash-next
    argv: "{{ head_argv }}"
    effective_block: 832
    probe_words: 600
  delegate_to: localhost
"""

RETURN = r"""
verdicts:
  description: Findings, most likely cause first, each with verdict, symptom, evidence (list) and next.
  returned: success
  type: list
  elements: dict
  sample:
    - verdict: prefix-caching-off
      symptom: identical prompts are never faster
      evidence: ["--no-enable-prefix-caching is in the head's argv"]
      next: enable prefix caching in the profile's engine mapping
primary:
  description: The first verdict's name (no-problem-found when nothing was found).
  returned: success
  type: str
  sample: prefix-caching-off
evidence:
  description: The numbers the verdicts rest on (probe measurements, counter deltas, requests served).
  returned: success
  type: dict
  sample:
    served_before: 12
    warmup_requests: 3
    uptime_s: 840.0
    prefix_caching: false
    effective_block: 832
    block_source: engine /metrics cache_config_info
    waiting: 0
    probes: []
    deltas: {}
"""

import uuid

from ansible.module_utils.acceptance import counter_deltas, parse_metrics
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.diagnosis import classify, engine_cache_block, probe_prompt
from ansible.module_utils.openai_client import (
    ServerUnreachable,
    api_argument_spec,
    module_api_key,
    module_tls_context,
    read_metrics,
    read_metrics_text,
    stream_chat,
)

ARGUMENT_SPEC = api_argument_spec(
    argv=dict(type="list", elements="str", default=[]),
    effective_block=dict(type="int"),
    warmup_requests=dict(type="int", default=0),
    uptime_s=dict(type="float"),
    probe_words=dict(type="int", default=400),
    max_tokens=dict(type="int", default=8),
    timeout_s=dict(type="float", default=300),
)


def gather(url, model, api_key, params, context=None):
    """Evidence for classify(): counters around a cold + repeated probe of the requested length, and the cache
    block the engine itself reports (the recorded prediction only when /metrics does not say)."""
    metrics_text = read_metrics_text(url, api_key, params["timeout_s"], context)
    before = parse_metrics(metrics_text)
    logged_block = engine_cache_block(metrics_text)
    planned = {
        "kind": "probe",
        "max_tokens": params["max_tokens"],
        "messages": [{"role": "user", "content": probe_prompt(uuid.uuid4().hex[:12], params["probe_words"])}],
    }
    probes = [
        stream_chat(url, model, dict(planned, name=name), api_key, params["timeout_s"], context)
        for name in ("probe-first", "probe-repeat")
    ]
    after = read_metrics(url, api_key, params["timeout_s"], context)
    return {
        "served_before": before.get("vllm:request_success_total"),
        "warmup_requests": params["warmup_requests"],
        "uptime_s": params["uptime_s"],
        "prefix_caching": "--no-enable-prefix-caching" not in params["argv"],
        "effective_block": logged_block or params["effective_block"],
        "block_source": "engine /metrics cache_config_info" if logged_block else "predicted, from the record",
        "probes": probes,
        "deltas": counter_deltas(before, after),
        "waiting": max(before.get("vllm:num_requests_waiting", 0), after.get("vllm:num_requests_waiting", 0)),
    }


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: no probe was sent")
    params = module.params
    api_key = module_api_key(module)
    try:
        evidence = gather(params["url"].rstrip("/"), params["model"], api_key, params, module_tls_context(module))
    except ServerUnreachable as err:
        module.fail_json(
            msg=f"cannot diagnose: the service does not answer ({err}); "
            "run playbooks/status.yml to see which rank is down"
        )
    failed = [p for p in evidence["probes"] if p.get("error")]
    if failed:
        module.fail_json(msg=f"the probe request failed: {failed[0]['error']}", evidence=evidence)
    verdicts = classify(evidence)
    module.exit_json(changed=False, verdicts=verdicts, primary=verdicts[0]["verdict"], evidence=evidence)


if __name__ == "__main__":
    main()
