"""Why is the service slow? Seed 000's diagnosis table, applied to evidence read from the engine.

Symptom -> evidence -> verdict, in the order the seed checks them:
  first request slow after a restart  -> no request served since the start      -> no-warmup (JIT paid by a user)
  a repeated prompt is still slow     -> prefix caching off in the argv          -> prefix-caching-off
                                      -> the whole request is shorter than one
                                         cache block (seed 001: a 2,960-token
                                         hybrid block, 0 of 11 requests hit)      -> block-larger-than-request
                                      -> prompt spans blocks but nothing hit     -> prefix-changed-or-evicted
  slow only under concurrency         -> requests waiting in the queue           -> queueing
  slow decode                         -> MTP drafts mostly rejected              -> low-mtp-acceptance
Only per-request cached_tokens and counter deltas count as hit evidence: the log's "Prefix cache hit rate" is
cumulative since the start and misleads (seed 001).

Pure Python (no Ansible) so plain pytest can test it; library/vllm_diagnose.py gathers the evidence.
"""

import re

LOW_MTP_ACCEPTANCE = 0.5


# vLLM's info gauge of the resolved cache settings (v1/metrics/loggers.py); its block_size label is the block the
# engine schedules and caches by, after it raised the attention block for a hybrid model.
CACHE_CONFIG_INFO = re.compile(r"^vllm:cache_config_info\{(?P<labels>.*)\}", re.MULTILINE)
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def engine_cache_block(metrics_text):
    """The cache block the running engine reports in /metrics (vllm:cache_config_info block_size), or None."""
    match = CACHE_CONFIG_INFO.search(metrics_text)
    block = dict(LABEL.findall(match.group("labels"))).get("block_size", "") if match else ""
    return int(block) if block.isdigit() else None


def probe_prompt(nonce, words):
    """A prompt of `words` words that no earlier request shares (the nonce comes first, so its first cache block
    is new), sent twice by the probe: the repeat shows what the prefix cache does for this length."""
    body = " ".join(f"item{index % 97}" for index in range(max(words - 1, 1)))
    return f"{nonce} {body}"


def classify(evidence):
    """Verdicts, most likely cause first; each {verdict, symptom, evidence, next}. Never empty: without a
    finding the single verdict is no-problem-found with the measured numbers."""
    first, repeat = evidence["probes"]
    prompt, cached = repeat.get("prompt_tokens") or 0, repeat.get("cached_tokens") or 0
    block = evidence.get("effective_block")
    block_source = f" ({evidence['block_source']})" if evidence.get("block_source") else ""
    deltas = evidence.get("deltas") or {}
    numbers = (
        f"probe of {prompt} prompt tokens: first TTFT {first.get('ttft_s')} s, repeat TTFT "
        f"{repeat.get('ttft_s')} s, repeat cached_tokens {cached}"
    )
    found = []

    if evidence.get("served_before") == 0:
        found.append(
            {
                "verdict": "no-warmup",
                "symptom": "first request after a restart is slow",
                "evidence": [
                    f"vllm:request_success_total was 0 when the diagnosis began: no request (and no warm-up) "
                    f"has run since the engine started {evidence.get('uptime_s')} s ago",
                    f"the profile lists {evidence.get('warmup_requests', 0)} warm-up request(s); the start that "
                    f"sends them (site.yml) did not run this engine",
                    numbers,
                ],
                "next": "restart through `ansible-playbook site.yml --tags deploy` (warm-up and gate), not by hand",
            }
        )

    if not evidence.get("prefix_caching", True):
        found.append(
            {
                "verdict": "prefix-caching-off",
                "symptom": "a repeated prompt is as slow as the first",
                "evidence": [
                    "the head's argv carries --no-enable-prefix-caching",
                    f"prefix-cache queries counted during the probe: {deltas.get('prefix_cache_queries')}",
                    numbers,
                ],
                "next": "set engine.enable_prefix_caching: true in the profile",
            }
        )
    elif cached == 0 and block and prompt and prompt < block:
        found.append(
            {
                "verdict": "block-larger-than-request",
                "symptom": "identical prompts never hit the prefix cache",
                "evidence": [
                    f"effective cache block {block} tokens{block_source} > the whole request ({prompt} tokens): "
                    f"only full blocks are cached, so a request shorter than one block can never hit",
                    f"prefix-cache hits during the probe: {deltas.get('prefix_cache_hits')} tokens",
                    numbers,
                ],
                "next": "expect hits only for requests longer than the block; a smaller block (e.g. FP32 vs BF16 SSM "
                "state, see docs/block-size.md) trades memory for granularity",
            }
        )
    elif cached == 0 and block and prompt >= block:
        found.append(
            {
                "verdict": "prefix-changed-or-evicted",
                "symptom": "a repeated prompt is still slow",
                "evidence": [
                    f"the repeat spans {prompt // block} full block(s) of {block} tokens{block_source} yet hit none",
                    f"prefix-cache hits during the probe: {deltas.get('prefix_cache_hits')} tokens",
                    numbers,
                ],
                "next": "check that requests keep an identical prefix (timestamps, ids at the start) and KV cache "
                "pressure (vllm:kv_cache_usage_perc)",
            }
        )

    if (evidence.get("waiting") or 0) > 0:
        found.append(
            {
                "verdict": "queueing",
                "symptom": "slow only with concurrent requests",
                "evidence": [f"vllm:num_requests_waiting reached {evidence['waiting']} during the probe", numbers],
                "next": "raise max_num_seqs or lower concurrency; look at active sequences per request length",
            }
        )

    drafts, accepted = deltas.get("spec_decode_draft_tokens"), deltas.get("spec_decode_accepted_tokens")
    if drafts and accepted is not None and accepted / drafts < LOW_MTP_ACCEPTANCE:
        found.append(
            {
                "verdict": "low-mtp-acceptance",
                "symptom": "decode is slow",
                "evidence": [f"MTP accepted {accepted:.0f} of {drafts:.0f} draft tokens ({accepted / drafts:.0%})"],
                "next": "try fewer speculative tokens (num_speculative_tokens) and compare decode tok/s",
            }
        )

    return found or [
        {
            "verdict": "no-problem-found",
            "symptom": "none reproduced by the probe",
            "evidence": [numbers],
            "next": "run playbooks/benchmark.yml at the slow input length",
        }
    ]
