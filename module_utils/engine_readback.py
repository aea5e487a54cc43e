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
    """The figures one rank's log holds: attention block, KV capacity, concurrency, MoE table, attention backend."""
    block, kv, table, default, backend = (
        _last(p, lines) for p in (BLOCK, KV_CAPACITY, MOE_TABLE, MOE_DEFAULT, ATTENTION_BACKEND)
    )
    return {
        "attention_block": int(block.group(1)) if block else None,
        "kv_cache_tokens": _number(kv.group("tokens")) if kv else None,
        "max_concurrency": float(kv.group("concurrency")) if kv else None,
        "concurrency_at_tokens": _number(kv.group("len")) if kv else None,
        "moe_config": table.group(1) if table else None,
        "moe_default_warning": default.group(0).strip() if default else None,
        "attention_backend": backend.group(1) if backend else None,
    }


def combine(ranks):
    """One figure set for the service from every rank's (rank 0 first): the head's value, else any rank's."""
    figures = {}
    for key in read_figures([]):
        values = [rank[key] for rank in ranks if rank.get(key) is not None]
        figures[key] = values[0] if values else None
    return figures


def judge(figures, predicted_block, tuned_table=None):
    """Failures (one line each, both values named) when the engine contradicts what was predicted or asked for."""
    failures = []
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
