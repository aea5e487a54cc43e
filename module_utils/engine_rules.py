"""Render a declarative vLLM engine profile to `vllm serve` argv and list every rule it breaks.

Pure Python (stdlib only) so plain pytest can test it; library/vllm_args.py is the Ansible face. Plan runs the rule
sets in order, each from its own file: engine_flags and engine_extra_args (argv), engine_block_rules,
engine_parallel_rules, engine_value_rules, engine_env; engine_refusals says what a refusal is.
"""

from ansible.module_utils.engine_block_rules import BlockRules
from ansible.module_utils.engine_env import EnvRules
from ansible.module_utils.engine_extra_args import ArgvRenderer
from ansible.module_utils.engine_parallel_rules import ParallelRules
from ansible.module_utils.engine_value_rules import ValueRules
from ansible.module_utils.hybrid_block import PLATFORMS
from ansible.module_utils.input_rules import MODEL_ID, address_problem, model_config_problems, same_link_problem
from ansible.module_utils.vllm_catalogs import catalog_for, nearest_catalog


class Plan(BlockRules, ParallelRules, ValueRules, EnvRules):
    """Everything vllm_args decides for one rank: argv, env, block prediction, warnings, violations."""

    def build(self):
        p = self.p
        engine = dict(p.get("engine") or {})
        env = {str(k): v for k, v in (p.get("env") or {}).items()}
        platform = p.get("platform", "gb10")
        version = p["engine_version"]
        nodes = p.get("nodes") or 1
        model_config = self.checked_model_config(p.get("model_config"))

        if platform not in PLATFORMS:
            self.fail("platform", platform, "platform", f"must be one of {sorted(PLATFORMS)}")
            return self.result(None, [], {}, None)
        try:
            catalog, deferred = catalog_for(version), False
        except ValueError as err:
            catalog, deferred = nearest_catalog(version), True
            self.warnings.append(
                f"engine_version={version!r}: {err}: its flags are rendered with vLLM {catalog['ENGINE_VERSION']}'s "
                "and an argument that catalog does not know is passed as given; the image's own vLLM parses every "
                "rank's argv before any rank starts (vllm_image_parser); the cache block is predicted with "
                f"vLLM {catalog['ENGINE_VERSION']}'s rules"
            )
            version = catalog["ENGINE_VERSION"]

        renderer = ArgvRenderer(catalog, deferred)
        renderer.argv = ["vllm", "serve", self.model_arg(model_config)]
        if p.get("revision"):
            renderer.add("revision", str(p["revision"]), "revision", trusted=True)
        # One canonical argv whatever the key order (a record's JSON has its keys sorted): a restored record and
        # the profile it came from render the same argv, so the same config hash and no restart.
        for key, value in sorted(engine.items()):
            renderer.add(key, value, f"engine.{key}")
        self.add_rank_args(renderer, nodes)
        renderer.add_raw(list(p.get("extra_args") or []), "extra_args")
        self.violations.extend(renderer.violations)

        values = renderer.values
        block = self.check_block(model_config, values, platform, version, env)
        self.check_parallel(model_config, values, platform, nodes, catalog)
        self.check_sizes(model_config, values)
        self.check_json_configs(catalog, values)
        self.check_moe_table(model_config, values, catalog)
        self.check_remote_code(values, renderer.seen)
        rendered_env = self.check_env(env, values, platform, catalog)
        rendered_env.update(self.check_fabric_env(p.get("fabric_env") or {}))
        # enable_prefix_caching's parser default is None, so the catalog holds no value: the engine turns it on for a
        # model that supports it (EngineArgs._set_default_chunked_prefill_and_prefix_caching_args), as hybrid_block.
        if (
            platform == "cpu"
            and block
            and block.get("hybrid")
            and values.get("speculative_config")
            and values.get("enable_prefix_caching", True)
        ):
            self.fail(
                "engine.speculative_config",
                values["speculative_config"],
                "cpu-mtp-prefix",
                "speculative decoding with prefix caching on a hybrid model crashes the CPU build's "
                "first request (Triton kernel); turn one of them off",
            )
        return self.result(catalog, renderer.argv, rendered_env, block)

    def check_remote_code(self, values, fields):
        """trust_remote_code runs Python from the model repository inside the engine, as root on the node: only
        when the profile names that model in model.trust_remote_code."""
        acknowledged = self.p.get("trust_remote_code")
        if values.get("trust_remote_code") and acknowledged != self.p.get("model"):
            self.fail(
                fields["trust_remote_code"],
                True,
                "remote-code",
                f"runs Python code from the repository of {self.p.get('model')} inside the engine, as root on every "
                f"node; acknowledge it by name with model.trust_remote_code: {self.p.get('model')} in the profile"
                + (f" (it names {acknowledged})" if acknowledged else ""),
            )

    def checked_model_config(self, model_config):
        """The config.json mapping, or {} (model-dependent checks skipped) after naming every bad key."""
        source = self.p.get("model_config_path") or "the model config"
        problems = model_config_problems(model_config) if model_config is not None else []
        for key, value, problem in problems:
            self.fail(f"model_config.{key}", value, "model-config", f"{source}: {key} {problem}")
        return {} if problems or not model_config else model_config

    def model_arg(self, model_config):
        model = self.p.get("model") or (model_config.get("_name_or_path") if isinstance(model_config, dict) else "")
        if not model:
            self.fail("model", self.p.get("model"), "required", "the model id or path to serve is required")
        elif not MODEL_ID.match(str(model)):
            self.fail(
                "model",
                model,
                "safe-name",
                f"must be a repository id (org/name) or an absolute path matching {MODEL_ID.pattern}",
            )
        return str(model or "")

    def add_rank_args(self, renderer, nodes):
        """Rank flags from the inventory: node count, this node's rank, the head's fast-link address."""
        p = self.p
        if nodes <= 1:
            return
        rank = p.get("node_rank", 0)
        renderer.add("nnodes", nodes, "nodes", trusted=True)
        renderer.add("node_rank", rank, "node_rank", trusted=True)
        if self.master_addr_ok(nodes):
            renderer.add("master_addr", str(p["master_addr"]), "master_addr", trusted=True)
        if p.get("master_port") is not None:
            renderer.add("master_port", p["master_port"], "master_port", trusted=True)
        if rank != 0:
            renderer.add("headless", True, "node_rank", trusted=True)
        if not 0 <= rank < nodes:
            self.fail("node_rank", rank, "node-rank", f"must be between 0 and nodes-1 ({nodes - 1})")

    def master_addr_ok(self, nodes):
        addr = self.p.get("master_addr")
        if not addr:
            self.fail("master_addr", addr, "required", f"nodes={nodes} needs the head node's address on the fast link")
            return False
        problem = address_problem(addr)
        links = self.p.get("fast_link_addresses") or []
        if not problem and links:
            problem = same_link_problem(addr, links, self.p.get("fast_link_prefix_length") or 24)
        if problem:
            self.fail(
                "master_addr",
                addr,
                "master-addr",
                f"{problem}; the head's fast-link address comes from the "
                "inventory (roce_network_address of the first spark_nodes host)",
            )
            return False
        return True

    def result(self, catalog, argv, env, block):
        block = block or {}
        return {
            "argv": argv,
            "env": env,
            "effective_block": block.get("effective_block"),
            "scheduler_block": block.get("scheduler_block"),
            "block": block,
            "moe_table_file": getattr(self, "moe_table_file", None),
            "engine_version": catalog["ENGINE_VERSION"] if catalog else None,
            "warnings": self.warnings,
            "violations": self.violations,
        }


def plan(params):
    """Render and check one rank's `vllm serve` command. Returns the result dict (see vllm_args RETURN)."""
    return Plan(params).build()
