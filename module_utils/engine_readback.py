"""The engine's own figures, read back from its rank logs after a start, and what they say about the prediction.

Pure Python (no Ansible). The lines are the ones vLLM logs (0.30-0.33: platforms/interface.py,
v1/core/kv_cache_utils.py, fused_moe/fused_moe.py, platforms/*.py). A figure the log does not hold is None:
vLLM logs the attention block only when it raises it for a hybrid model, and the MoE lines only for MoE models.
"""

import re

BLOCK = re.compile(r"Setting attention block size to (\d+) tokens")
KV_CAPACITY = re.compile(
    r"(?P<pool>[A-Z+ ]+) KV cache size: (?P<tokens>[\d,]+) tokens, "
    r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<concurrency>[\d.]+)x"
)
MOE_TABLE = re.compile(r"Using configuration from (\S+) for MoE layer")
MOE_DEFAULT = re.compile(r"Using default MoE config\. Performance might be sub-optimal! Config file not found at (.*)")
ATTENTION_BACKEND = re.compile(r"Using (?:the )?(\w+) (?:attention )?backend\b(?! for ViT)")
# NCCL's own line once it chose its transport (src/init.cc, INFO(NCCL_INIT, "Using network %s")): IB (RDMA, RoCE
# included) or Socket (TCP). Printed at NCCL_DEBUG=INFO or TRACE only.
NCCL_NETWORK = re.compile(r"NCCL INFO Using network (\S+)")
NCCL_LOUD = ("INFO", "TRACE")


def _number(text):
    return int(text.replace(",", ""))


def _last(pattern, lines):
    """The last match of pattern in lines (a restarted engine logs again; the newest line counts)."""
    found = None
    for line in lines:
        match = pattern.search(line)
        if match:
            found = match
    return found


def read_figures(lines):
    """The figures one rank's log holds: attention block, KV capacity, concurrency, MoE table, attention backend,
    NCCL's transport."""
    block, kv, table, default, backend, network = (
        _last(p, lines) for p in (BLOCK, KV_CAPACITY, MOE_TABLE, MOE_DEFAULT, ATTENTION_BACKEND, NCCL_NETWORK)
    )
    return {
        "attention_block": int(block.group(1)) if block else None,
        "kv_cache_tokens": _number(kv.group("tokens")) if kv else None,
        "max_concurrency": float(kv.group("concurrency")) if kv else None,
        "concurrency_at_tokens": _number(kv.group("len")) if kv else None,
        "moe_config": table.group(1) if table else None,
        "moe_default_warning": default.group(0).strip() if default else None,
        "attention_backend": backend.group(1) if backend else None,
        "nccl_network": network.group(1) if network else None,
    }


def combine(ranks):
    """One figure set for the service from every rank's (rank 0 first): the head's value, else any rank's."""
    figures = {}
    for key in read_figures([]):
        values = [rank[key] for rank in ranks if rank.get(key) is not None]
        figures[key] = values[0] if values else None
    return figures


def expected_nccl_network(platform, nodes, env):
    """IB when NCCL must cross nodes over RDMA and its log says which transport it chose (NCCL_DEBUG INFO or TRACE,
    which the Spark cluster profiles set); None when there is nothing to hold it to."""
    loud = str((env or {}).get("NCCL_DEBUG", "")).upper() in NCCL_LOUD
    return "IB" if platform != "cpu" and int(nodes or 1) > 1 and loud else None


def network_failures(ranks, expected):
    """One line per rank whose NCCL did not report the expected transport."""
    failures = []
    for rank, figures in enumerate(ranks):
        found = figures.get("nccl_network")
        if found is None:
            failures.append(
                f"rank {rank}: NCCL's log names no transport (no 'NCCL INFO Using network' line at NCCL_DEBUG=INFO), "
                f"so {expected} over the RoCE link is unproven"
            )
        elif found != expected:
            failures.append(
                f"rank {rank}: NCCL chose network {found}, not {expected}: its collectives run over TCP sockets at a "
                "fraction of the RoCE link's speed (check NCCL_IB_HCA, /dev/infiniband in the container, the RoCE v2 "
                "GID index; the rank's NCCL lines say why IB was skipped)"
            )
    return failures


def judge(figures, predicted_block, tuned_table=None, ranks=(), nccl_network=None):
    """Failures (one line each, both values named) when the engine contradicts what was predicted or asked for."""
    failures = network_failures(ranks, nccl_network) if nccl_network else []
    logged = figures.get("attention_block")
    if logged is not None and predicted_block is not None and logged != predicted_block:
        failures.append(
            f"the engine set the attention block to {logged} tokens where {predicted_block} was predicted: the "
            "model config or the block rules do not match this engine (docs/block-size.md, correcting a model config)"
        )
    if tuned_table and figures.get("moe_default_warning"):
        failures.append(
            f"the profile names the tuned MoE table {tuned_table} but the engine fell back to its default MoE "
            f"config ({figures['moe_default_warning']}); seed 000 measured that fallback at 43 instead of 51 tok/s"
        )
    return failures
