"""The cache block a profile gives (hybrid_block's prediction) and what the engine would refuse about it, with the
moment it would: at startup, while loading, or only after the ~10 minute load.

Pure Python (stdlib only).
"""

from ansible.module_utils.engine_refusals import RuleChecks
from ansible.module_utils.hybrid_block import predict_block

WHEN = {"startup": "at startup", "load": "while loading the model", "after_load": "only after the model load"}


class BlockRules(RuleChecks):
    """The block prediction of one rank, and the engine's refusals it foresees."""

    def check_block(self, model_config, values, platform, version, env):
        if not model_config:
            if any(v["rule"] == "model-config" for v in self.violations):
                return None  # already named key by key
            self.fail(
                "model_config",
                model_config,
                "required",
                "the model's config.json (path or mapping) is needed to predict the block size",
            )
            return None
        try:
            block = predict_block(
                model_config,
                values,
                platform=platform,
                engine_version=version,
                env=env,
                cuda_version=self.p.get("cuda_version"),
                cpu_avx512_bf16=self.p.get("cpu_avx512_bf16", True),
            )
        except (ValueError, TypeError, KeyError, ZeroDivisionError) as err:
            source = self.p.get("model_config_path") or "the model config"
            self.fail("model_config", model_config.get("model_type"), "block-prediction", f"{source}: {err}")
            return None
        for error in block.get("errors", []):
            field = error.get("field", "engine")
            if field == "engine.prefix_cache_retention_interval":
                self.fail_retention(block, model_config, values[field.split(".", 1)[1]], version)
                continue
            self.fail(
                field,
                lookup(values, model_config, field),
                f"engine-fails-{error['when'].replace('_', '-')}",
                f"vLLM {version} would refuse this {WHEN[error['when']]}: {error['message']}",
            )
        return block

    def fail_retention(self, block, model_config, retention, version):
        field = "engine.prefix_cache_retention_interval"
        if not block.get("has_mamba_or_sliding_window"):
            self.fail(
                field,
                retention,
                "retention-needs-state",
                f"non-zero retention applies only to Mamba/sliding-window caches and model type "
                f"{model_config.get('model_type')!r} has none; use 0",
            )
        elif block["retention"].get("nearest_valid") is None:
            self.fail(field, retention, "retention-interval", "must be 0, None or a positive integer")
        else:
            near = ", ".join(map(str, block["retention"]["nearest_valid"]))
            self.fail(
                field,
                retention,
                "retention-multiple-of-block",
                f"must be a multiple of the scheduler block, which vLLM {version} will compute as "
                f"{block['scheduler_block']} tokens for this profile (effective block "
                f"{block['effective_block']}); nearest valid values: {near} (or 0); the engine would "
                "fail only after the model load",
            )


def lookup(values, model_config, field):
    """The profile value a dotted field names (engine.* from the engine values, model_config.* from the model)."""
    head, _, path = field.partition(".")
    node = values if head == "engine" else model_config if head == "model_config" else {}
    for key in path.split(".") if path else []:
        node = node.get(key) if isinstance(node, dict) else None
    return node
