"""What a profile's engine takes from a node's memory, and whether the node has it available now.

A Spark's GPU shares one pool with the CPU (unified memory): vLLM claims gpu_memory_utilization of all of it at
the start, and a node whose page cache, desktop or another engine holds too much of the rest freezes whole instead
of failing the allocation. So the need is judged against MemAvailable (what the kernel can hand out without
swapping), never MemTotal. The CPU build claims VLLM_CPU_KVCACHE_SPACE GiB for its KV cache instead. Both add a
margin for the engine's processes outside that pool and the weights' page cache while they load. A profile that
leaves gpu_memory_utilization out gets its engine's own default, from the flag catalog of its engine_version. Pure:
no Ansible API (roles/spark_preflight/library/spark_memory.py and action_plugins/vllm_staged_start.py use it).
"""

from ansible.module_utils.vllm_catalogs import DEFAULT_ENGINE_VERSION, nearest_catalog, option_value

KIB_PER_GIB = 1024 * 1024
# The engine's processes, CUDA context and compile workers outside the pool, and the page cache of the weights
# as they stream in (GiB); a profile's memory_margin_gib overrides it.
DEFAULT_MARGIN_GIB = {"gb10": 8.0, "cpu": 1.0}


def read_meminfo(text):
    """{field: GiB} of /proc/meminfo's kB lines (MemTotal, MemAvailable, ...)."""
    fields = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        words = rest.split()
        if len(words) == 2 and words[1] == "kB" and words[0].isdigit():
            fields[name.strip()] = int(words[0]) / KIB_PER_GIB
    return fields


def memory_plan(profile):
    """What the profile's engine takes on each node: a share of the node's memory and a fixed part, in GiB."""
    platform = profile.get("platform", "gb10")
    engine, env = profile.get("engine") or {}, profile.get("env") or {}
    margin = profile.get("memory_margin_gib", DEFAULT_MARGIN_GIB.get(platform, DEFAULT_MARGIN_GIB["gb10"]))
    if platform == "cpu":
        return {"share": 0.0, "fixed_gib": float(env.get("VLLM_CPU_KVCACHE_SPACE") or 0), "margin_gib": float(margin)}
    share = option_value(engine_catalog(profile), engine, "gpu_memory_utilization")
    return {"share": float(share), "fixed_gib": 0.0, "margin_gib": float(margin)}


def engine_catalog(profile):
    """The catalog vllm_args renders the profile's engine with (the nearest for a version with none of its own), so
    the guard and the argv take one default; the same default version as vllm_args when the profile names none."""
    return nearest_catalog(profile.get("engine_version", DEFAULT_ENGINE_VERSION))


def need_gib(plan, total_gib):
    return plan["share"] * total_gib + plan["fixed_gib"] + plan["margin_gib"]


def how_needed(plan, total_gib):
    """The need spelt out, so a refusal shows where its number comes from."""
    parts = [f"gpu_memory_utilization {plan['share']:g} x {total_gib:.1f} GiB"] if plan["share"] else []
    parts += [f"VLLM_CPU_KVCACHE_SPACE {plan['fixed_gib']:g} GiB"] if plan["fixed_gib"] else []
    return " + ".join(parts + [f"{plan['margin_gib']:g} GiB margin (memory_margin_gib)"])


def memory_verdict(label, meminfo_text, plan):
    """(available GiB, needed GiB, problem or ""): the node must have the profile's need available now."""
    fields = read_meminfo(meminfo_text)
    if "MemTotal" not in fields or "MemAvailable" not in fields:
        return None, None, f"{label}: /proc/meminfo shows no MemTotal or MemAvailable, so its memory is unknown"
    total, available = fields["MemTotal"], fields["MemAvailable"]
    need = need_gib(plan, total)
    if available >= need:
        return round(available, 1), round(need, 1), ""
    return (
        round(available, 1),
        round(need, 1),
        f"{label}: {available:.1f} GiB of memory available (MemAvailable), the profile takes {need:.1f} GiB "
        f"({how_needed(plan, total)}): free memory on the node (another engine, a desktop session, caches) or "
        "lower gpu_memory_utilization; an engine that overshoots unified memory freezes the node instead of failing",
    )
