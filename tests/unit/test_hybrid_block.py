"""Unit tests for module_utils/hybrid_block.py with hand-computed expectations.

Notation in the comments: bpt = attention bytes per token per layer on one rank
(kv_heads/rank x 2 x head_dim x kv bytes); page = largest Mamba state page in bytes;
K = kernel alignment; block = K * ceil(page / (K * bpt)).
"""

import json
from pathlib import Path

import pytest
from ansible.module_utils.hybrid_block import predict_block, version_key

REPO = Path(__file__).resolve().parents[2]
TARGET = json.loads((REPO / "model_configs" / "qwen3.8-flash-next-nvfp4.json").read_text())

# Qwen3-Next-80B-A3B shaped config (the real HF values for these keys).
QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "torch_dtype": "bfloat16",
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "max_position_embeddings": 262144,
    "num_experts": 512,
    "mtp_num_hidden_layers": 1,
}
# Qwen3-Next @ TP1, bf16 everything, no spec:
#   ssm  = 32 x 128 x 128 x 2            = 1,048,576 B
#   conv = (4-1) x (2*128*16 + 128*32)=8192 x 2 = 49,152 B
#   page = 1,097,728 B; bpt = 2 kv heads x 2 x 256 x 2 = 2048 B


def mtp(n):
    return {"method": "mtp", "num_speculative_tokens": n}


def block(cfg, engine, platform="gb10", version="0.30.1rc1.dev648", **kw):
    return predict_block(cfg, engine, platform=platform, engine_version=version, **kw)


# ----------------------------------------------------------------------------- seed facts (target model)


class TestTargetModelSeedFacts:
    """Seed 000: gb10, vLLM 0.30.1rc1.dev648, TP2, prefix caching on (align)."""

    def test_fp32_ssm_mtp3_block_1600_fits_retention_1600(self):
        # ssm (48/2=24, 128, 128) fp32 = 1,572,864; conv (3+3, 10240/2=5120) bf16 = 61,440
        # page 1,634,304; bpt = 1 x 2 x 256 x 2 = 1024; 16 * ceil(1,634,304 / 16,384 = 99.75) = 1600
        r = block(
            TARGET, {"tensor_parallel_size": 2, "speculative_config": mtp(3), "prefix_cache_retention_interval": 1600}
        )
        assert r["mamba_page_bytes"] == 1_634_304
        assert r["attn_page_bytes_per_token"] == 1024
        assert (r["effective_block"], r["scheduler_block"], r["mamba_block_size"]) == (1600, 1600, 1600)
        assert r["retention"]["ok"] and r["errors"] == []

    def test_fp32_ssm_mtp4_block_1616_rejects_retention_1600(self):
        # one more conv row: +5120 x 2 = 10,240 -> 1,644,544 / 16,384 = 100.375 -> 101 x 16 = 1616
        r = block(
            TARGET, {"tensor_parallel_size": 2, "speculative_config": mtp(4), "prefix_cache_retention_interval": 1600}
        )
        assert r["effective_block"] == 1616 and r["scheduler_block"] == 1616
        assert r["retention"]["ok"] is False
        assert r["retention"]["error"] == (
            "prefix_cache_retention_interval (1600) must be non-negative and a multiple of scheduler_block_size (1616)."
        )
        assert r["retention"]["nearest_valid"] == [1616]
        assert {
            "when": "after_load",
            "field": "engine.prefix_cache_retention_interval",
            "message": r["retention"]["error"],
        } in r["errors"]

    def test_bf16_ssm_mtp3_block_832_fits_retention_832(self):
        # ssm bf16 = 786,432 + conv 61,440 = 847,872 / 16,384 = 51.75 -> 52 x 16 = 832
        r = block(
            TARGET,
            {
                "tensor_parallel_size": 2,
                "speculative_config": mtp(3),
                "mamba_ssm_cache_dtype": "bfloat16",
                "prefix_cache_retention_interval": 832,
            },
        )
        assert r["effective_block"] == 832 and r["retention"]["ok"]

    def test_ple_state_is_computed_but_gdn_wins(self):
        # PLE: rows (4-1)*3 + 3 = 12, width 2560 x 4 = 10240, bf16, TP-replicated -> 245,760 B
        r = block(TARGET, {"tensor_parallel_size": 2, "speculative_config": mtp(3)})
        assert r["mamba_pages"] == {"gdn": 1_634_304, "ple": 245_760}

    def test_ple_state_wins_when_larger(self):
        # shrink GDN until the replicated PLE conv (12 x 10240 x 2 = 245,760 B) is the largest page:
        # GDN @TP2: ssm 1 x 128 x 128 x 4 = 65,536; conv 6 x (256*2+128*2)/2=384 x 2 = 4,608 -> 70,144
        cfg = dict(TARGET, linear_num_key_heads=2, linear_num_value_heads=2)
        r = block(cfg, {"tensor_parallel_size": 2, "speculative_config": mtp(3)})
        assert r["mamba_page_bytes"] == 245_760
        assert r["effective_block"] == 16 * 15  # 245,760 / 16,384 = 15.0 exactly

    def test_033_adds_flashinfer_gdn_64_alignment(self):
        # 0.33: K = lcm(16, 64) = 64 (FlashInfer GDN prefill on sm121, k_dim 128, CUDA 13, align mode)
        v = "0.33.0"
        assert (
            block(TARGET, {"tensor_parallel_size": 2, "speculative_config": mtp(3)}, version=v)["effective_block"]
            == 1600
        )  # 64 x ceil(24.94) = 64 x 25
        assert (
            block(TARGET, {"tensor_parallel_size": 2, "speculative_config": mtp(4)}, version=v)["effective_block"]
            == 1664
        )  # 64 x ceil(25.09) = 64 x 26
        assert (
            block(
                TARGET,
                {"tensor_parallel_size": 2, "speculative_config": mtp(3), "mamba_ssm_cache_dtype": "bfloat16"},
                version=v,
            )["effective_block"]
            == 832
        )
        assert (
            block(
                TARGET,
                {"tensor_parallel_size": 2, "speculative_config": mtp(4), "mamba_ssm_cache_dtype": "bfloat16"},
                version=v,
            )["effective_block"]
            == 896
        )

    def test_032_matches_030_on_gpu(self):
        for n, expected in ((3, 1600), (4, 1616)):
            assert (
                block(TARGET, {"tensor_parallel_size": 2, "speculative_config": mtp(n)}, version="0.32.0")[
                    "effective_block"
                ]
                == expected
            )

    def test_qsa_ring_capacity_must_divide_block(self):
        # compress ratio 16: capacity 16 * ceil((16+3)/16) = 32 divides 1600; with MTP4 32 does not divide 1616
        cfg = dict(TARGET, indexer_compress_ratio=16, indexer_budget=8192)
        ok = block(cfg, {"tensor_parallel_size": 2, "speculative_config": mtp(3)})
        assert ok["errors"] == []
        bad = block(cfg, {"tensor_parallel_size": 2, "speculative_config": mtp(4)})
        assert {
            "when": "after_load",
            "field": "engine.speculative_config.num_speculative_tokens",
            "message": "QSA ring capacity 32 must divide the attention block size 1616",
        } in bad["errors"]

    def test_qsa_requires_bf16_kv_cache(self):
        r = block(TARGET, {"tensor_parallel_size": 2, "kv_cache_dtype": "fp8"})
        assert {
            "when": "load",
            "field": "engine.kv_cache_dtype",
            "message": "Qwen4Exp QSA requires a BF16 main KV cache",
        } in r["errors"]


# ----------------------------------------------------------------------------- single rules


def test_qwen3_next_tp1_baseline():
    r = block(QWEN3_NEXT, {})
    # 16 * ceil(1,097,728 / (16 * 2048) = 33.5) = 544
    assert r["mamba_page_bytes"] == 1_097_728 and r["attn_page_bytes_per_token"] == 2048
    assert r["effective_block"] == 544 and r["logged_block"] == 544
    assert r["kernel_alignment"] == 16 and r["hybrid"] is True
    assert r["mamba_cache_mode"] == "align" and r["mamba_block_size"] == 544 and r["scheduler_block"] == 544


def test_tensor_parallel_divides_state_and_replicates_kv_heads():
    # TP2: everything halves (page 548,864, bpt 1024) -> still 16 * 34 = 544
    assert block(QWEN3_NEXT, {"tensor_parallel_size": 2})["effective_block"] == 544
    # TP4: state quarters (274,432) but 2 kv heads cannot split 4 ways -> bpt stays 1024:
    # 16 * ceil(274,432 / 16,384 = 16.75) = 272
    r = block(QWEN3_NEXT, {"tensor_parallel_size": 4})
    assert r["mamba_page_bytes"] == 274_432 and r["attn_page_bytes_per_token"] == 1024
    assert r["effective_block"] == 272


def test_tp_that_does_not_divide_is_refused():
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        block(QWEN3_NEXT, {"tensor_parallel_size": 3})
    with pytest.raises(ValueError, match="linear_num_value_heads"):
        block(
            dict(QWEN3_NEXT, num_attention_heads=48, linear_num_key_heads=6, linear_num_value_heads=6 * 3 + 3),
            {"tensor_parallel_size": 2},
        )


def test_spec_tokens_add_conv_rows():
    # MTP2: conv (3+2) x 8192 x 2 = 81,920 -> page 1,130,496 / 32,768 = 34.5 -> 35 x 16 = 560
    assert block(QWEN3_NEXT, {"speculative_config": mtp(2)})["effective_block"] == 560
    # given as a JSON string (as on the command line) -> same
    assert block(QWEN3_NEXT, {"speculative_config": json.dumps(mtp(2))})["effective_block"] == 560
    # MTP without a depth takes the model's mtp_num_hidden_layers (1): conv 4 rows = 65,536 ->
    # 1,114,112 / 32,768 = 34.0 -> 544
    r = block(QWEN3_NEXT, {"speculative_config": {"method": "mtp"}})
    assert r["num_speculative_tokens"] == 1 and r["effective_block"] == 544


def test_mamba_ssm_and_kv_dtypes():
    # ssm fp32: 2,097,152 + 49,152 = 2,146,304 / 32,768 = 65.5 -> 66 x 16 = 1056
    assert block(QWEN3_NEXT, {"mamba_ssm_cache_dtype": "float32"})["effective_block"] == 1056
    # conv dtype fp32 and ssm auto (= conv dtype): 2,097,152 + 98,304 = 2,195,456 / 32,768 = 67.0 -> 1072
    r = block(QWEN3_NEXT, {"mamba_cache_dtype": "float32"})
    assert r["mamba_state"]["gdn"]["ssm_dtype"] == "float32" and r["effective_block"] == 1072
    # fp8 KV halves bpt (1024): 1,097,728 / 16,384 = 67.0 -> 1072
    assert block(QWEN3_NEXT, {"kv_cache_dtype": "fp8"})["effective_block"] == 1072
    # unmodelled KV format is refused instead of guessed
    with pytest.raises(ValueError, match="not modelled"):
        block(QWEN3_NEXT, {"kv_cache_dtype": "nvfp4"})


QWEN3_5 = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"],
    "model_type": "qwen3_5_moe",
    "text_config": {
        "model_type": "qwen3_5_moe_text",
        "dtype": "bfloat16",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 64,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "mamba_ssm_dtype": "float32",
        "max_position_embeddings": 262144,
    },
    "vision_config": {"depth": 27},
}


def test_model_ssm_default_from_nested_text_config():
    # qwen3_5: auto SSM dtype takes text_config.mamba_ssm_dtype (float32):
    # ssm 64 x 16384 x 4 = 4,194,304; conv 3 x (4096+8192) x 2 = 73,728; page 4,268,032
    # bpt 2048 -> 16 * ceil(130.25) = 2096
    r = block(QWEN3_5, {})
    assert r["mamba_state"]["gdn"]["ssm_dtype"] == "float32" and r["effective_block"] == 2096
    # the user flag wins: bf16 ssm 2,097,152 + 73,728 = 2,170,880 / 32,768 = 66.25 -> 67 x 16 = 1072
    assert block(QWEN3_5, {"mamba_ssm_cache_dtype": "bfloat16"})["effective_block"] == 1072
    # qwen3_next has no such hook: the same key in a flat qwen3_next config is ignored (auto = bf16)
    flat = dict(QWEN3_5["text_config"], model_type="qwen3_next", architectures=["Qwen3NextForCausalLM"])
    assert block(flat, {})["effective_block"] == 1072


def test_model_dtype_from_config_or_flag():
    # torch_dtype float32 in config.json is downcast to bfloat16 (auto) -> same as bf16
    assert block(dict(QWEN3_NEXT, torch_dtype="float32"), {})["effective_block"] == 544
    # --dtype float32: conv/ssm/kv all fp32 -> page 2,195,456, bpt 4096: 16 * ceil(33.5) = 544,
    # but state and attention bytes double
    r = block(QWEN3_NEXT, {"dtype": "float32"})
    assert r["mamba_page_bytes"] == 2_195_456 and r["attn_page_bytes_per_token"] == 4096


def test_user_block_size_is_raised_never_lowered():
    # --block-size 64: K = 64 -> 64 * ceil(1,097,728 / 131,072 = 8.375) = 576
    r = block(QWEN3_NEXT, {"block_size": 64})
    assert r["kernel_alignment"] == 64 and r["effective_block"] == 576
    # --block-size 2048 already covers the page: kept, and no "Setting attention block size" line
    r = block(QWEN3_NEXT, {"block_size": 2048})
    assert r["effective_block"] == 2048 and r["logged_block"] is None


def test_prefix_caching_off_mode_none_and_scheduler_lcm():
    r = block(QWEN3_NEXT, {"enable_prefix_caching": False})
    assert r["mamba_cache_mode"] == "none"
    assert r["effective_block"] == 544
    # mamba groups keep block max_model_len (262,144 = 2^18); 544 = 2^5 x 17 -> lcm = 262,144 x 17
    assert r["mamba_block_size"] == 262_144 and r["scheduler_block"] == 4_456_448
    r = block(QWEN3_NEXT, {"enable_prefix_caching": False, "max_model_len": 8192})
    assert r["scheduler_block"] == 8192 * 17
    r = block(QWEN3_NEXT, {"enable_prefix_caching": False, "mamba_block_size": 64})
    assert {
        "when": "startup",
        "field": "engine.mamba_block_size",
        "message": "--mamba-block-size can only be set with --enable-prefix-caching",
    } in r["errors"]


def test_mamba_block_size_is_replaced_in_align_mode():
    r = block(QWEN3_NEXT, {"mamba_block_size": 64})
    assert r["mamba_block_size"] == 544 and r["effective_block"] == 544
    assert any("silently replaced" in w for w in r["warnings"])


def test_gdn_prefill_backend_and_platform_alignment_033():
    v = "0.33.0"
    # gb10 (sm121, CUDA 13, k_dim 128) + align -> FlashInfer GDN -> K = 64: 64 * ceil(1,097,728/131,072) = 576
    r = block(QWEN3_NEXT, {}, version=v)
    assert r["gdn_prefill_backend"] == "flashinfer" and r["kernel_alignment"] == 64
    assert r["effective_block"] == 576 and r["prefill_checkpoint_alignment"] == 64
    # Triton requested, CUDA 12 on gb10, k_dim != 128, prefix caching off: no 64 alignment -> 544
    assert block(QWEN3_NEXT, {"gdn_prefill_backend": "triton"}, version=v)["effective_block"] == 544
    assert (
        block(QWEN3_NEXT, {"additional_config": {"gdn_prefill_backend": "triton"}}, version=v)["effective_block"] == 544
    )
    assert block(QWEN3_NEXT, {}, version=v, cuda_version="12.9")["effective_block"] == 544
    # k_dim 64 (conv 3 x (2*64*16+128*32)=6144 x 2 = 36,864; ssm 32x128x64x2 = 524,288 -> 561,152 / 32,768
    # = 17.1 -> 18 x 16 = 288 -- Triton on gb10, no alignment)
    r = block(dict(QWEN3_NEXT, linear_key_head_dim=64), {}, version=v)
    assert r["gdn_prefill_backend"] == "triton" and r["effective_block"] == 288
    assert block(QWEN3_NEXT, {"enable_prefix_caching": False}, version=v)["effective_block"] == 544
    # SM90: FlashInfer regardless of CUDA / head dim
    assert block(QWEN3_NEXT, {}, platform="sm90", version=v, cuda_version="12.4")["effective_block"] == 576
    # before 0.33 the FlashInfer GDN prefill adds no alignment
    r = block(QWEN3_NEXT, {}, version="0.30.0")
    assert r["gdn_prefill_backend"] == "flashinfer" and r["effective_block"] == 544


def test_cpu_block_128_and_ssm_forced_fp32():
    # CPU: K = 128 (default block); auto SSM reset to fp32: 2,097,152 + 49,152 = 2,146,304
    # 128 * ceil(2,146,304 / (128 x 2048) = 8.19) = 1152
    r = block(QWEN3_NEXT, {}, platform="cpu", version="0.32.0")
    assert r["kernel_alignment"] == 128 and r["mamba_state"]["gdn"]["ssm_dtype"] == "float32"
    assert r["effective_block"] == 1152 and r["gdn_prefill_backend"] == "triton"
    # explicit bf16 SSM is kept by the accelerated GDN backend: 1,097,728 / 262,144 = 4.19 -> 5 x 128 = 640
    assert (
        block(QWEN3_NEXT, {"mamba_ssm_cache_dtype": "bfloat16"}, platform="cpu", version="0.32.0")["effective_block"]
        == 640
    )
    # without AVX512-BF16 nothing is reset (auto stays bf16) -> 640
    assert block(QWEN3_NEXT, {}, platform="cpu", version="0.32.0", cpu_avx512_bf16=False)["effective_block"] == 640
    # user --block-size 64 on CPU: K = max(32, 64) = 64 -> 64 * ceil(2,146,304 / 131,072 = 16.4) = 1088
    assert block(QWEN3_NEXT, {"block_size": 64}, platform="cpu", version="0.32.0")["effective_block"] == 1088
    # 0.33 CPU: no FlashInfer -> no 64 alignment -> same 1152
    assert block(QWEN3_NEXT, {}, platform="cpu", version="0.33.0")["effective_block"] == 1152


def test_tiny_engine_config_predictions():
    """The configs the truth tier starts (tests/engine/test_block_truth.py)."""
    tiny = json.loads((REPO / "tests" / "engine" / "models" / "tiny-qwen3-next" / "config.json").read_text())
    # ssm fp32 4 x 128 x 128 x 4 = 262,144; conv 3 x 1536 x 2 = 9,216 -> 271,360; bpt 1 x 2 x 32 x 2 = 128
    # 128 * ceil(271,360 / 16,384 = 16.56) = 2176 ; MTP3: conv 18,432 -> 280,576 / 16,384 = 17.1 -> 2304
    assert block(tiny, {}, platform="cpu", version="0.32.0")["effective_block"] == 2176
    assert block(tiny, {"speculative_config": mtp(3)}, platform="cpu", version="0.32.0")["effective_block"] == 2304


def test_mamba_cache_mode_per_version():
    # 0.30: "all" is accepted but Qwen GDN models lack SupportsMambaPrefixCaching -> align
    assert block(QWEN3_NEXT, {"mamba_cache_mode": "all"}, version="0.30.0")["mamba_cache_mode"] == "align"
    # 0.30/0.32: "none" with prefix caching on becomes "align"
    assert block(QWEN3_NEXT, {"mamba_cache_mode": "none"}, version="0.32.0")["mamba_cache_mode"] == "align"
    # 0.32 removed "all"
    r = block(QWEN3_NEXT, {"mamba_cache_mode": "all"}, version="0.32.0")
    assert any("invalid choice" in e["message"] for e in r["errors"])
    # 0.33: the flag has no effect; prefix caching decides
    assert block(QWEN3_NEXT, {"mamba_cache_mode": "none"}, version="0.33.0")["mamba_cache_mode"] == "align"
    assert (
        block(QWEN3_NEXT, {"enable_prefix_caching": False, "mamba_cache_mode": "align"}, version="0.33.0")[
            "mamba_cache_mode"
        ]
        == "none"
    )


LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 8192,
}


def test_non_hybrid_block_is_the_configured_or_default_block():
    r = block(LLAMA, {})
    assert r["hybrid"] is False and r["effective_block"] == 16 and r["scheduler_block"] == 16
    assert r["has_mamba_or_sliding_window"] is False and r["attn_page_bytes_per_token"] == 8 * 2 * 128 * 2
    assert block(LLAMA, {"block_size": 32})["effective_block"] == 32
    assert block(LLAMA, {}, platform="cpu", version="0.32.0")["effective_block"] == 128
    assert block(LLAMA, {}, platform="cpu", version="0.33.0")["effective_block"] == 128


def test_non_hybrid_retention_rules():
    assert block(LLAMA, {"prefix_cache_retention_interval": 0})["retention"]["ok"]
    r = block(LLAMA, {"prefix_cache_retention_interval": 1600})
    assert r["retention"]["ok"] is False
    assert r["retention"]["error"].startswith(
        "prefix_cache_retention_interval is set but this model has no sliding-window or Mamba KV cache group"
    )
    # a sliding-window model has such a group: multiples of the block pass
    swa = dict(LLAMA, model_type="mistral", sliding_window=4096)
    r = block(swa, {"prefix_cache_retention_interval": 1600})
    assert r["has_mamba_or_sliding_window"] and r["retention"]["ok"]


def test_retention_none_is_dense_and_accepted():
    r = block(TARGET, {"tensor_parallel_size": 2, "prefix_cache_retention_interval": None})
    assert r["retention"] == {"value": None, "ok": True, "error": None}
    assert block(TARGET, {"tensor_parallel_size": 2})["retention"] is None


def test_versions_and_inputs_are_validated():
    assert version_key("0.30.1rc1.dev648") == "0.30" and version_key("0.30.0") == "0.30"
    assert version_key("0.32.0+cpu") == "0.32" and version_key("v0.33.0") == "0.33"
    with pytest.raises(ValueError, match=r"0\.30\.x, 0\.32\.x, 0\.33\.x"):
        block(QWEN3_NEXT, {}, version="0.31.0")
    with pytest.raises(ValueError, match="unsupported platform"):
        block(QWEN3_NEXT, {}, platform="h100")
    with pytest.raises(ValueError, match="unsupported hybrid model type 'nemotron_h'"):
        block({"model_type": "nemotron_h", "num_attention_heads": 8, "hidden_size": 1024}, {})
    with pytest.raises(ValueError, match="unsupported hybrid model type"):
        block(
            {
                "model_type": "mystery",
                "layer_types": ["linear_attention", "full_attention"],
                "num_attention_heads": 8,
                "hidden_size": 1024,
            },
            {},
        )
    with pytest.raises(ValueError, match="not modelled"):
        block(QWEN3_NEXT, {"attention_backend": "B12X"})


def test_result_is_json_serialisable_and_explains_itself():
    r = block(
        TARGET,
        {"tensor_parallel_size": 2, "speculative_config": mtp(3), "prefix_cache_retention_interval": 1600},
        env={"VLLM_LOGGING_LEVEL": "INFO"},
    )
    json.dumps(r)
    text = "\n".join(r["steps"])
    assert "GDN conv state (6, 5120) bfloat16 = 61440 B" in text
    assert "GDN ssm state (24, 128, 128) float32 = 1572864 B" in text
    assert "Setting attention block size to 1600 tokens" in text
