"""The engine's logged figures read back (module_utils/engine_readback, library/vllm_readback) from log lines in
the formats vLLM writes them."""

import pytest
from ansible.module_utils.engine_readback import combine, expected_nccl_network, judge, read_figures
from ansible.modules import vllm_readback

from tests.module_harness import run_module

HEAD_LOG = """\
INFO 12-01 23:40:01 [interface.py:1097] Setting attention block size to 832 tokens to ensure that attention page \
size is >= mamba page size.
INFO 12-01 23:40:02 [cuda.py:507] Using FLASHINFER attention backend out of potential backends: ['FLASHINFER'].
INFO 12-01 23:41:10 [fused_moe.py:1151] Using configuration from /opt/spark-serve/tuned_configs/\
E=512,N=320,device_name=NVIDIA_GB10.json for MoE layer.
INFO 12-01 23:42:00 [kv_cache_utils.py:2328] GPU KV cache size: 1,048,576 tokens, Maximum concurrency for \
262,144 tokens per request: 4.00x
"""
DEFAULT_MOE = (
    "WARNING 12-01 23:41:10 [fused_moe.py:1164] Using default MoE config. Performance might be sub-optimal! "
    "Config file not found at /usr/lib/python3/dist-packages/vllm/model_executor/layers/fused_moe/configs/"
    "E=512,N=320,device_name=NVIDIA_GB10.json\n"
)
TABLE = "E=512,N=320,device_name=NVIDIA_GB10.json"


def test_every_figure_is_read_from_the_lines_vllm_logs():
    figures = read_figures(HEAD_LOG.splitlines())
    assert figures == {
        "attention_block": 832,
        "kv_cache_tokens": 1048576,
        "max_concurrency": 4.0,
        "concurrency_at_tokens": 262144,
        "moe_config": f"/opt/spark-serve/tuned_configs/{TABLE}",
        "moe_default_warning": None,
        "attention_backend": "FLASHINFER",
        "nccl_network": None,
    }


def test_the_cpu_builds_lines_and_a_log_without_figures():
    cpu = read_figures(
        [
            "INFO [cpu.py:175] Using CPU_ATTN backend.",
            "INFO [kv_cache_utils.py:2328] CPU KV cache size: 8,192 tokens, Maximum concurrency for 2,048 tokens "
            "per request: 4.00x",
        ]
    )
    assert (cpu["attention_backend"], cpu["kv_cache_tokens"], cpu["attention_block"]) == ("CPU_ATTN", 8192, None)
    assert set(read_figures(["nothing here"]).values()) == {None}


def test_the_head_speaks_for_the_service_and_workers_fill_what_it_lacks():
    worker = read_figures(["Setting attention block size to 832 tokens", DEFAULT_MOE])
    head = read_figures(["Using CPU_ATTN backend."])
    figures = combine([head, worker])
    assert figures["attention_backend"] == "CPU_ATTN" and figures["attention_block"] == 832
    assert figures["moe_default_warning"].startswith("Using default MoE config")


def test_a_block_other_than_predicted_and_a_default_moe_fallback_both_fail_with_both_values():
    figures = read_figures(["Setting attention block size to 2960 tokens", DEFAULT_MOE])
    failures = judge(figures, predicted_block=1600, tuned_table=TABLE)
    assert len(failures) == 2
    assert "2960" in failures[0] and "1600" in failures[0]
    assert TABLE in failures[1] and "default MoE config" in failures[1]
    assert judge(figures, predicted_block=2960) == [], "without a tuned table the default MoE config is expected"
    assert judge(read_figures([]), predicted_block=128, tuned_table=TABLE) == [], "nothing logged, nothing to doubt"


def test_the_module_returns_figures_per_rank_and_the_failures():
    result = run_module(
        vllm_readback,
        {"logs": [HEAD_LOG, DEFAULT_MOE], "predicted_block": 832, "tuned_table": TABLE},
        check_mode=True,
    )
    assert result["changed"] is False and result["figures"]["attention_block"] == 832
    assert [rank["moe_default_warning"] is not None for rank in result["ranks"]] == [False, True]
    assert len(result["failures"]) == 1 and "default MoE config" in result["failures"][0]


# NCCL's own lines at NCCL_DEBUG=INFO (the process prefix is the host name, pid and thread).
NCCL_IB = "spark-a:312:312 [0] NCCL INFO Using network IB"
NCCL_SOCKET = "spark-b:298:298 [0] NCCL INFO Using network Socket"
LOUD = {"NCCL_DEBUG": "INFO"}


@pytest.mark.parametrize(
    ("platform", "nodes", "env", "expected"),
    [
        ("gb10", 2, LOUD, "IB"),
        ("gb10", 4, {"NCCL_DEBUG": "trace"}, "IB"),
        ("gb10", 1, LOUD, None),
        ("cpu", 2, LOUD, None),
        ("gb10", 2, {}, None),
        ("gb10", 2, {"NCCL_DEBUG": "WARN"}, None),
    ],
)
def test_ib_is_expected_only_across_gpu_nodes_whose_nccl_says_what_it_chose(platform, nodes, env, expected):
    assert expected_nccl_network(platform, nodes, env) == expected


def test_a_rank_on_sockets_or_silent_fails_the_gate_naming_the_rank():
    ranks = [read_figures([NCCL_IB]), read_figures([NCCL_SOCKET]), read_figures(["no nccl here"])]
    failures = judge(combine(ranks), None, ranks=ranks, nccl_network="IB")
    assert [f.split(":")[0] for f in failures] == ["rank 1", "rank 2"], failures
    assert "NCCL chose network Socket, not IB" in failures[0] and "names no transport" in failures[1]
    assert judge(combine(ranks), None, ranks=ranks) == [], "nothing expected, nothing judged"


def test_the_module_holds_a_spark_pair_to_ib():
    args = {"logs": [NCCL_IB, NCCL_SOCKET], "platform": "gb10", "nodes": 2, "env": LOUD}
    result = run_module(vllm_readback, args, check_mode=True)
    assert [r["nccl_network"] for r in result["ranks"]] == ["IB", "Socket"]
    assert len(result["failures"]) == 1 and result["failures"][0].startswith("rank 1: NCCL chose network Socket")
