"""Shape and safety rules for hostile or careless input: secrets, names, ports, bounds, addresses, model configs.

Pure Python (stdlib only). Each check returns (rule, message) problems; the engine rule sets (engine_*) turn them
into violations that name the field and the value (redacted where the value may be a secret).
"""

import ipaddress
import math
import re

# Engine arguments that carry a credential: never in argv (process lists, compose files, records).
SECRET_DESTS = frozenset({"api_key", "hf_token"})


# The per-rank topology comes from the inventory: nodes, rank, head address, store port, headless workers and
# every data-parallel placement flag. data_parallel_size is the profile's layout and is checked, not refused.
RANK_DESTS = frozenset(
    {
        "nnodes",
        "node_rank",
        "master_addr",
        "master_port",
        "headless",
        "data_parallel_size_local",
        "data_parallel_address",
        "data_parallel_rpc_port",
        "data_parallel_start_rank",
        "data_parallel_rank",
        "data_parallel_hybrid_lb",
        "data_parallel_external_lb",
        "data_parallel_multi_port_external_lb",
        "data_parallel_backend",
        "data_parallel_supervisor_port",
    }
)

# Counts the engine allocates by: at least 1 and within a C int.
POSITIVE_DESTS = frozenset(
    {
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "data_parallel_size",
        "max_model_len",
        "max_num_seqs",
        "max_num_batched_tokens",
        "block_size",
    }
)
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# Names that end up in argv, compose files and URLs: no spaces, quotes, shell or YAML metacharacters.
MODEL_ID = re.compile(r"^(?:/[A-Za-z0-9._/-]+|[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)?)$")
SERVED_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")
PARSER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
NAME_DESTS = {"served_model_name": SERVED_NAME, "tool_call_parser": PARSER_NAME, "reasoning_parser": PARSER_NAME}
HOSTNAME_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")

# PyTorch caching-allocator keys (torch 2.9+) and the form of their values; an unknown key or a malformed
# value makes CUDA initialisation fail inside the engine, after the container started.
BOOL_TEXT = re.compile(r"^(True|False|true|false)$")
INT_TEXT = re.compile(r"^[0-9]+$")
FRACTION_TEXT = re.compile(r"^(0(\.[0-9]+)?|1(\.0+)?|\.[0-9]+)$")
ALLOCATOR_VALUES = {
    "backend": (re.compile(r"^(native|cudaMallocAsync)$"), "native or cudaMallocAsync"),
    "expandable_segments": (BOOL_TEXT, "True or False"),
    "garbage_collection_threshold": (FRACTION_TEXT, "a fraction between 0 and 1"),
    "graph_capture_record_stream_reuse": (BOOL_TEXT, "True or False"),
    "max_non_split_rounding_mb": (INT_TEXT, "a whole number of MiB"),
    "max_split_size_mb": (INT_TEXT, "a whole number of MiB"),
    "per_process_memory_fraction": (FRACTION_TEXT, "a fraction between 0 and 1"),
    "pinned_max_round_threshold_mb": (INT_TEXT, "a whole number of MiB"),
    "pinned_num_register_threads": (INT_TEXT, "a whole number"),
    "pinned_reserve_segment_size_mb": (INT_TEXT, "a whole number of MiB"),
    "pinned_use_background_threads": (BOOL_TEXT, "True or False"),
    "pinned_use_cuda_host_register": (BOOL_TEXT, "True or False"),
    "release_lock_on_cudamalloc": (BOOL_TEXT, "True or False"),
    "roundup_power2_divisions": (re.compile(r"^([0-9]+|\[[0-9:,>\s]+\])$"), "a number or a [size:divisions,...] list"),
}

# config.json keys the block prediction and the layout checks read, by expected type.
MODEL_POSITIVE_INTS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "intermediate_size",
    "moe_intermediate_size",
    "num_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "full_attention_interval",
    "vocab_size",
)
MODEL_COUNT_INTS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")
MODEL_STRINGS = ("dtype", "torch_dtype")


def has_newline(value):
    return isinstance(value, str) and ("\n" in value or "\r" in value)


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def value_problem(dest, value):
    """(rule, message) when one engine argument's parsed value is out of bounds, else None."""
    if has_newline(value) or (isinstance(value, list) and any(has_newline(v) for v in value)):
        return "no-newline", "must not contain a line break (it would split the argument or env file)"
    if isinstance(value, float) and not math.isfinite(value):
        return "finite-number", "must be a finite number"
    if is_int(value):
        return int_problem(dest, value)
    if dest in NAME_DESTS and value is not None:
        pattern = NAME_DESTS[dest]
        bad = [v for v in (value if isinstance(value, list) else [value]) if not pattern.match(str(v))]
        if bad:
            return "safe-name", f"{bad[0]!r} must match {pattern.pattern} (no spaces, quotes or shell characters)"
    return None


def int_problem(dest, value):
    if dest.endswith("_port") or dest == "port":
        if not 1 <= value <= 65535:
            return "port-range", "must be a TCP port between 1 and 65535"
    elif dest in POSITIVE_DESTS:
        if not 1 <= value <= INT32_MAX:
            return "int-range", f"must be between 1 and {INT32_MAX}"
    elif abs(value) > INT64_MAX:
        return "int-range", f"must fit a 64-bit integer (|value| <= {INT64_MAX})"
    return None


def allocator_problems(pairs):
    """(key, problem) for every unknown key or malformed value of a PYTORCH_ALLOC_CONF mapping."""
    problems = []
    for key, val in pairs.items():
        if key not in ALLOCATOR_VALUES:
            problems.append(
                (
                    "allocator-key",
                    f"unknown allocator key '{key}' makes CUDA initialisation fail; known keys: "
                    f"{', '.join(sorted(ALLOCATOR_VALUES))}",
                )
            )
            continue
        pattern, wanted = ALLOCATOR_VALUES[key]
        if not pattern.match(val):
            problems.append(("allocator-value", f"{key}:{val!r} is malformed; {key} takes {wanted}"))
    return problems


def address_problem(text):
    """None for a valid IPv4/IPv6 address or RFC 1123 host name, else why not."""
    text = str(text)
    try:
        ipaddress.ip_address(text)
        return None
    except ValueError:
        pass
    labels = text.rstrip(".").split(".")
    if re.fullmatch(r"[0-9.]+", text):
        return "is not a valid IPv4 address"
    if len(text) > 253 or not all(HOSTNAME_LABEL.match(label) for label in labels):
        return "is neither an IP address nor a valid host name (letters, digits, '-' and '.')"
    return None


def same_link_problem(master_addr, addresses, prefix_length):
    """None when every fast-link address is an IP on the head's subnet, else why not."""
    try:
        network = ipaddress.ip_interface(f"{master_addr}/{prefix_length}").network
    except ValueError:
        return None  # a host name: the deploy stage checks that the head owns it
    outside = []
    for address in addresses:
        try:
            if ipaddress.ip_address(str(address)) not in network:
                outside.append(str(address))
        except ValueError:
            outside.append(str(address))
    if outside:
        return f"is not on the same fast link ({network}) as the nodes' addresses {', '.join(outside)}"
    return None


def model_config_problems(config):
    """(key path, value, problem) for every key of a config.json that cannot drive the prediction."""
    if not isinstance(config, dict):
        return [("(file)", type(config).__name__, "must be a JSON object")]
    problems = []
    text = config.get("text_config")
    if "text_config" in config and not isinstance(text, dict):
        problems.append(("text_config", text, "must be a JSON object"))
        text = None
    scopes = [("", config)] + ([("text_config.", text)] if isinstance(text, dict) else [])
    if not isinstance(config.get("model_type") or (text or {}).get("model_type"), str):
        problems.append(("model_type", config.get("model_type"), "is required and must be a string"))
    for prefix, scope in scopes:
        problems.extend(scope_problems(prefix, scope))
    return problems


def scope_problems(prefix, scope):
    problems = []
    for key in MODEL_POSITIVE_INTS:
        if key in scope and scope[key] is not None and not (is_int(scope[key]) and 0 < scope[key] <= INT32_MAX):
            problems.append((prefix + key, scope[key], "must be a positive integer"))
    for key in MODEL_COUNT_INTS:
        if key in scope and scope[key] is not None and not (is_int(scope[key]) and 0 <= scope[key] <= 1024):
            problems.append((prefix + key, scope[key], "must be a whole number (0 or more)"))
    for key in MODEL_STRINGS:
        if key in scope and scope[key] is not None and not isinstance(scope[key], str):
            problems.append((prefix + key, scope[key], "must be a string"))
    if "layer_types" in scope and not (
        isinstance(scope["layer_types"], list) and all(isinstance(t, str) for t in scope["layer_types"])
    ):
        problems.append((prefix + "layer_types", scope["layer_types"], "must be a list of strings"))
    if scope.get("rope_scaling") is not None and not isinstance(scope["rope_scaling"], dict):
        problems.append((prefix + "rope_scaling", scope["rope_scaling"], "must be a JSON object or null"))
    return problems
