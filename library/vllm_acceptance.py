#!/usr/bin/python
"""Ansible module: hold a running vLLM server to the fixed acceptance request set and its thresholds."""

DOCUMENTATION = r"""
---
module: vllm_acceptance
short_description: Run the acceptance requests against a vLLM server and decide pass or fail
description:
  - Reads C(/metrics), sends a fixed request set one at a time as streaming chat completions (a short answer;
    one long prompt cold then twice hot; two long sessions alternated A, B, A, B; one forced tool call), reads
    C(/metrics) again, and checks the thresholds of the profile's C(acceptance) mapping.
  - Measures per request the time to the first token, decode tokens/s, prompt, completion and cached tokens
    (C(usage.prompt_tokens_details.cached_tokens); the server needs C(--enable-prompt-tokens-details)), and
    the prefix cache and speculative decoding counter deltas of C(/metrics).
  - Every long prompt starts with a new nonce, so no earlier gate run's cache makes the cold request hot.
  - A rejection does not fail the task (the playbook records it and may roll back); the task fails only when
    the server does not answer at all. A server that stops answering during the run is a rejection.
  - Runs on the controller (delegate_to localhost). In check mode nothing is sent.
options:
  acceptance:
    description:
      - Thresholds C(hot_ttft_max_s), C(hit_ratio_min), C(decode_tps_min_ratio) (of O(previous)'s decode
        tokens/s), C(spec_acceptance_min); sizes C(long_prompt_words) (default 1200), C(max_tokens) (default 16),
        C(tool_max_tokens) (default 128). Other keys are ignored. The tool call is always checked.
    type: dict
    default: {}
  previous:
    description: Summary of the last deployment that passed, for C(decode_tps_min_ratio).
    type: dict
  timeout_s:
    description: Timeout of one request (and of each C(/metrics) read), in seconds.
    type: float
    default: 600
extends_documentation_fragment:
  - vllm_api
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Hold the started service to the acceptance gate
  vllm_acceptance:
    url: http://10.0.0.1:8000
    model: tiny-llama
    api_key_file: /etc/spark-serve/api-key
    acceptance: {hot_ttft_max_s: 1.0, hit_ratio_min: 0.9, decode_tps_min_ratio: 0.95}
    previous: "{{ last_passed.acceptance.summary }}"
  delegate_to: localhost
  run_once: true
  register: gate
"""

RETURN = r"""
passed:
  description: Whether every threshold and the tool call passed (not returned in check mode).
  returned: success
  type: bool
  sample: false
failures:
  description: Every failure at once, each naming the request(s), the value, the threshold and the miss.
  returned: always
  type: list
  elements: str
  sample:
    - "hot-1, hot-2: hot TTFT 1.84 s > hot_ttft_max_s 1.0 (missed by 0.84 s)"
summary:
  description: Aggregates (cold_ttft_s, hot_ttft_s, hot_hit_ratio, decode_tps, counter deltas, metrics_hit_ratio,
    spec_decode_acceptance, tool_call_ok) and the per-request figures under C(requests).
  returned: always
  type: dict
  sample:
    cold_ttft_s: 2.41
    hot_ttft_s: 0.31
    hot_hit_ratio: 0.97
    decode_tps: 61.2
    metrics_hit_ratio: 0.58
    spec_decode_acceptance: 0.74
    tool_call_ok: true
    requests: []
requests:
  description: Raw per-request measurements (times in seconds from sending, usage, tool calls, errors).
  returned: always
  type: list
  elements: dict
  sample:
    - {name: cold, kind: cold, ttft_s: 2.41, last_token_s: 2.66, prompt_tokens: 1570, completion_tokens: 16,
       cached_tokens: 0, finish_reason: length, tool_calls: []}
nonce:
  description: The nonce at the start of this run's long prompts.
  returned: success
  type: str
  sample: 3f9c2a7b1d0e
skipped:
  description: True in check mode (nothing was sent).
  returned: check mode
  type: bool
  sample: true
"""

import uuid

from ansible.module_utils.acceptance import counter_deltas, evaluate, request_plan, summarize
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.openai_client import (
    ServerUnreachable,
    api_argument_spec,
    module_api_key,
    module_tls_context,
    read_metrics,
    stream_chat,
)

ARGUMENT_SPEC = api_argument_spec(
    acceptance=dict(type="dict", default={}),
    previous=dict(type="dict"),
    timeout_s=dict(type="float", default=600),
)


def run_gate(url, model, acceptance, api_key=None, previous=None, timeout_s=600.0, nonce=None, context=None):
    """Read /metrics, send the plan one request at a time, read /metrics, summarize and evaluate.

    Raises ServerUnreachable only when the first /metrics read fails (the server is not up). A server that stops
    answering later is evidence against the deployment: that request fails and the rest are not sent.
    """
    url = url.rstrip("/")
    nonce = nonce or uuid.uuid4().hex[:12]
    before = read_metrics(url, api_key, timeout_s, context)
    measurements = []
    lost_during = None
    for planned in request_plan(acceptance, nonce):
        if lost_during:
            measurements.append(
                {
                    "name": planned["name"],
                    "kind": planned["kind"],
                    "error": f"not sent: the server stopped answering during {lost_during}",
                }
            )
            continue
        try:
            measurements.append(stream_chat(url, model, planned, api_key, timeout_s, context))
        except ServerUnreachable as err:
            measurements.append({"name": planned["name"], "kind": planned["kind"], "error": str(err)})
            lost_during = planned["name"]
    try:
        after = read_metrics(url, api_key, timeout_s, context)
    except ServerUnreachable:
        after = {}  # the counters' deltas are then unknown; the failed requests already reject the run
    summary = summarize(measurements, counter_deltas(before, after))
    passed, failures = evaluate(summary, acceptance, previous)
    return {"passed": passed, "failures": failures, "summary": summary, "requests": measurements, "nonce": nonce}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    if module.check_mode:
        module.exit_json(
            changed=False,
            skipped=True,
            msg="check mode: no acceptance request was sent",
            failures=[],
            summary={},
            requests=[],
        )
    api_key = module_api_key(module)
    try:
        result = run_gate(
            params["url"],
            params["model"],
            params["acceptance"],
            api_key=api_key,
            previous=params["previous"],
            timeout_s=params["timeout_s"],
            context=module_tls_context(module),
        )
    except ServerUnreachable as err:
        module.fail_json(msg=f"the acceptance gate cannot reach the server: {err}")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
