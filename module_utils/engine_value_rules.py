"""Engine values against each other and the model: batch and length limits, the keys of JSON config flags, the
tuned MoE table the engine will look for.

Pure Python (stdlib only).
"""

import difflib

from ansible.module_utils.engine_refusals import RuleChecks, is_int
from ansible.module_utils.hybrid_block import text_config
from ansible.module_utils.vllm_catalogs import option_value


class ValueRules(RuleChecks):
    """Sizes, JSON configs and the MoE table of one rank."""

    def check_sizes(self, model_config, values):
        seqs, batched = values.get("max_num_seqs"), values.get("max_num_batched_tokens")
        if is_int(seqs) and is_int(batched) and seqs > batched:
            self.fail(
                "engine.max_num_seqs",
                seqs,
                "seqs-le-batched-tokens",
                f"must not exceed max_num_batched_tokens ({batched})",
            )
        limit = model_max_len(model_config)
        max_len = values.get("max_model_len")
        if is_int(max_len) and limit and max_len > limit:
            self.fail(
                "engine.max_model_len",
                max_len,
                "max-model-len",
                f"exceeds the model's limit of {limit} tokens (max_position_embeddings)",
            )
        threshold = values.get("long_prefill_token_threshold")
        ceiling = max_len if is_int(max_len) else limit
        if is_int(threshold) and ceiling and threshold > ceiling:
            self.fail(
                "engine.long_prefill_token_threshold",
                threshold,
                "long-prefill-le-max-len",
                f"must not exceed max_model_len ({ceiling})",
            )
        util = values.get("gpu_memory_utilization")
        if util is not None and not (isinstance(util, (int, float)) and 0 < util <= 1):
            self.fail("engine.gpu_memory_utilization", util, "fraction", "must be in (0, 1]")

    def check_json_configs(self, catalog, values):
        flags = catalog["FLAGS"]
        for dest in ("speculative_config", "compilation_config", "engram_config"):
            config = values.get(dest)
            if not isinstance(config, dict) or dest not in flags:
                continue
            spec = flags[dest]
            known = spec.get("json_keys")
            if known:
                for key in config:
                    if key not in known:
                        near = difflib.get_close_matches(key, known, n=2)
                        hint = f"; did you mean {', '.join(near)}?" if near else ""
                        self.fail(
                            f"engine.{dest}.{key}",
                            config[key],
                            "json-unknown-key",
                            f"vLLM {catalog['ENGINE_VERSION']} {dest} has no key '{key}'{hint}",
                        )
            for key, choices in (spec.get("json_choices") or {}).items():
                if key in config and config[key] is not None and not in_choices(config[key], choices):
                    self.fail(f"engine.{dest}.{key}", config[key], "json-choice", f"must be one of {choices}")
        spec_cfg = values.get("speculative_config")
        if isinstance(spec_cfg, dict):
            n = spec_cfg.get("num_speculative_tokens")
            if n is not None and (not is_int(n) or n < 1):
                self.fail(
                    "engine.speculative_config.num_speculative_tokens", n, "spec-tokens", "must be a positive integer"
                )

    def check_moe_table(self, model_config, values, catalog):
        table = self.p.get("moe_table")
        if table is None:
            return None
        cfg = text_config(model_config)
        experts = cfg.get("num_experts") or cfg.get("n_routed_experts")
        inter = cfg.get("moe_intermediate_size")
        tp = option_value(catalog, values, "tensor_parallel_size")
        if not experts or not inter:
            self.fail("moe_table", table, "moe-model", "the model config has no num_experts/moe_intermediate_size")
            return None
        name = moe_table_name(
            experts, inter // tp, self.p.get("device_name", "NVIDIA_GB10"), table.get("dtype"), table.get("block_shape")
        )
        self.moe_table_file = name
        folder = self.p.get("tuned_config_dir")
        files = self.p.get("tuned_config_files")
        if files is None:
            self.fail(
                "tuned_config_dir",
                folder,
                "moe-table",
                f"the profile uses a tuned MoE table, so {name} must exist in the tuned-config folder",
            )
        elif name not in files:
            near = difflib.get_close_matches(name, files, n=2)
            self.fail(
                "tuned_config_dir",
                folder,
                "moe-table",
                f"vLLM will look for {name} (E={experts}, N={inter}/{tp}) and it is not there, so the "
                f"engine would silently fall back to default kernels; present: {near or sorted(files)[:3]}",
            )
        return name


def model_max_len(model_config):
    cfg = text_config(model_config)
    limit = cfg.get("max_position_embeddings") or model_config.get("max_position_embeddings")
    scaling = cfg.get("rope_scaling") or {}
    if (
        limit
        and scaling.get("factor")
        and scaling.get("rope_type", scaling.get("type")) in ("yarn", "dynamic", "linear")
    ):
        limit = int(limit * scaling["factor"])
    return limit


def moe_table_name(experts, n, device_name, dtype=None, block_shape=None):
    """File name vLLM's fused MoE looks up (fused_moe.get_config_file_name)."""
    dtype_part = f",dtype={dtype}" if dtype else ""
    shape_part = f",block_shape=[{','.join(map(str, block_shape))}]" if block_shape and all(block_shape) else ""
    return f"E={experts},N={n},device_name={device_name}{dtype_part}{shape_part}.json"


def in_choices(value, choices):
    """Enum-backed choices (upper-case member names) match case-insensitively, as vLLM parses them."""
    if all(str(c).isupper() for c in choices):
        return str(value).upper() in choices
    return str(value) in choices
