"""The parallel layout against the nodes and the model: ranks, heads, layers and the draft model's TP.

Pure Python (stdlib only).
"""

from ansible.module_utils.engine_refusals import RuleChecks, is_int
from ansible.module_utils.hybrid_block import GPUS_PER_NODE, text_config
from ansible.module_utils.vllm_catalogs import option_value


class ParallelRules(RuleChecks):
    """Tensor, pipeline and data parallel sizes: what the nodes hold and what the model divides into."""

    def check_parallel(self, model_config, values, platform, nodes, catalog):
        tp = option_value(catalog, values, "tensor_parallel_size")
        pp = option_value(catalog, values, "pipeline_parallel_size")
        dp = option_value(catalog, values, "data_parallel_size")
        per_node = self.p.get("gpus_per_node") or GPUS_PER_NODE.get(platform, 1)
        if all(is_int(n) for n in (tp, pp, dp)) and tp * pp * dp != nodes * per_node:
            self.fail(
                "engine.tensor_parallel_size",
                tp,
                "layout-equals-ranks",
                f"tensor_parallel_size x pipeline_parallel_size x data_parallel_size ({tp} x {pp} x {dp}) "
                f"must equal nodes x GPUs per node ({nodes} x {per_node} on {platform})",
            )
        if is_int(dp) and dp > 1:
            self.fail(
                "engine.data_parallel_size",
                dp,
                "data-parallel-replicas",
                "data-parallel replicas need per-node --data-parallel-* placement flags that this deployment "
                "does not render; deploy each replica as its own inventory behind a router",
            )
        self.check_pipeline_split(model_config, pp)
        if not isinstance(tp, int) or tp < 1:
            return
        cfg = text_config(model_config)
        heads = cfg.get("num_attention_heads")
        kv_heads = cfg.get("num_key_value_heads", heads)
        if heads and heads % tp:
            self.fail(
                "engine.tensor_parallel_size",
                tp,
                "tp-divides-heads",
                f"the model's num_attention_heads ({heads}) must be divisible by it",
            )
        if kv_heads and kv_heads % tp and tp % kv_heads:
            self.fail(
                "engine.tensor_parallel_size",
                tp,
                "tp-kv-heads",
                f"the model's num_key_value_heads ({kv_heads}) must divide it or be divisible by it",
            )
        for key in ("linear_num_key_heads", "linear_num_value_heads"):
            if cfg.get(key) and cfg[key] % tp:
                self.fail(
                    "engine.tensor_parallel_size",
                    tp,
                    "tp-divides-gdn-heads",
                    f"the model's {key} ({cfg[key]}) must be divisible by it",
                )
        spec = values.get("speculative_config")
        if (
            isinstance(spec, dict)
            and "draft_tensor_parallel_size" in spec
            and spec["draft_tensor_parallel_size"] not in (1, tp)
        ):
            self.fail(
                "engine.speculative_config.draft_tensor_parallel_size",
                spec["draft_tensor_parallel_size"],
                "draft-tp",
                f"must be 1 or tensor_parallel_size ({tp})",
            )

    def check_pipeline_split(self, model_config, pp):
        """PP splits the decoder layers: refused where the engine refuses it, a warning where stages differ."""
        cfg = text_config(model_config)
        layers = cfg.get("num_hidden_layers")
        if not is_int(pp) or pp <= 1 or not is_int(layers):
            return
        if cfg.get("ple_layer_ids"):
            self.fail(
                "engine.pipeline_parallel_size",
                pp,
                "pp-per-layer-embeddings",
                "the model's per-layer embeddings (ple_layer_ids) need the raw input ids on every stage; vLLM "
                "refuses pipeline parallel for it before the load (use tensor parallel)",
            )
        elif pp > layers:
            self.fail("engine.pipeline_parallel_size", pp, "pp-layers", f"exceeds the model's {layers} layers")
        elif layers % pp:
            self.warnings.append(
                f"engine.pipeline_parallel_size={pp}: {layers} layers split unevenly "
                f"({layers // pp + 1} on the first {layers % pp} stage(s), {layers // pp} on the rest); the "
                "slowest stage sets the pace"
            )
