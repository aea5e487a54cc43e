"""Render a declarative vLLM engine profile to `vllm serve` argv and list every rule it breaks.

Pure Python (stdlib only) so plain pytest can test it; library/vllm_args.py is the Ansible face.
Every violation names the field, the value and the rule, and all of them are returned at once.
"""

import difflib
import json
import math
import re

try:  # inside an Ansible module (AnsiballZ bundles these by their ansible.module_utils name)
    from ansible.module_utils.hybrid_block import predict_block
    from ansible.module_utils.vllm_catalogs import catalog_for
except ImportError:  # plain pytest / tools: module_utils/ is on sys.path
    from hybrid_block import predict_block
    from vllm_catalogs import catalog_for

PLATFORMS = {
    # platform: GPUs (ranks) per node by default
    "gb10": 1,
    "sm90": 8,
    "cpu": 1,
}

# Keys the PyTorch CUDA caching allocator accepts in PYTORCH_(CUDA_)ALLOC_CONF (torch 2.9+);
# any other key makes CUDA initialisation fail inside the engine.
ALLOCATOR_KEYS = frozenset(
    {
        "backend",
        "expandable_segments",
        "garbage_collection_threshold",
        "graph_capture_record_stream_reuse",
        "max_non_split_rounding_mb",
        "max_split_size_mb",
        "per_process_memory_fraction",
        "pinned_max_round_threshold_mb",
        "pinned_num_register_threads",
        "pinned_reserve_segment_size_mb",
        "pinned_use_background_threads",
        "pinned_use_cuda_host_register",
        "release_lock_on_cudamalloc",
        "roundup_power2_divisions",
    }
)
ALLOCATOR_ENV = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")

# Engine arguments that the deployment (inventory, rank, secrets) decides, never the profile.
RANK_ARGS = ("nnodes", "node_rank", "master_addr", "master_port", "headless")
SECRET_ENV = re.compile(r"(API_KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)
API_KEY_FILE_ENV = "SPARK_SERVE_API_KEY_FILE"

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's CacheConfig default
WHEN = {"startup": "at startup", "load": "while loading the model", "after_load": "only after the model load"}


def violation(field, value, rule, message):
    return {"field": field, "value": value, "rule": rule, "message": f"{field}={value!r}: {message}"}


class Renderer:
    """Collects argv and violations for one rank of one profile."""

    def __init__(self, catalog):
        self.catalog = catalog
        self.flags = catalog["FLAGS"]
        self.version = catalog["ENGINE_VERSION"]
        self.by_option = {}
        for dest, spec in self.flags.items():
            for opt in spec["options"] + spec["negatives"]:
                self.by_option[opt] = dest
        self.argv = []
        self.violations = []
        self.seen = {}  # dest -> field that set it

    def canonical_option(self, option):
        """The option string vLLM's parser resolves `option` to: underscores are dashes, and a unique prefix
        of a long option is that option (argparse allow_abbrev)."""
        if option in self.by_option:
            return option
        if not option.startswith("--"):
            return None
        option = "--" + option[2:].replace("_", "-")
        if option in self.by_option:
            return option
        matches = [o for o in self.by_option if o.startswith(option)]
        return matches[0] if len(matches) == 1 else None

    def dest_for_option(self, option):
        canonical = self.canonical_option(option)
        return self.by_option[canonical] if canonical else None

    def dest_for_key(self, key):
        """An engine mapping key: a vLLM dest (`max_num_seqs`) or a flag spelling (`max-num-seqs`)."""
        if key in self.flags:
            return key
        for spelling in ("--" + key.replace("_", "-"), "-" + key):
            if spelling in self.by_option:
                return self.by_option[spelling]
        return None

    def claim(self, dest, field, value):
        if dest in self.seen:
            self.violations.append(
                violation(
                    field,
                    value,
                    "duplicate-option",
                    f"sets --{dest.replace('_', '-')} which {self.seen[dest]} already sets; vLLM keeps only "
                    "the last occurrence, so one of them would be silently ignored",
                )
            )
            return False
        self.seen[dest] = field
        return True

    def unknown(self, field, value, name):
        near = difflib.get_close_matches(name, list(self.flags), n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        self.violations.append(
            violation(
                field,
                value,
                "unknown-flag",
                f"vLLM {self.version} has no engine argument '{name}' (flag catalog){hint}",
            )
        )

    def add(self, key, value, field):
        dest = self.dest_for_key(key)
        if dest is None:
            self.unknown(field, value, key)
            return
        if not self.claim(dest, field, value):
            return
        tokens, problem = render_value(self.flags[dest], value)
        if problem:
            self.violations.append(violation(field, value, "flag-type", f"{problem} (vLLM {self.version})"))
            return
        self.argv.extend(tokens)

    def add_raw(self, raw_args, field):
        """Extra args given as raw strings: each option is checked and claimed like a mapping key."""
        i = 0
        while i < len(raw_args):
            token = str(raw_args[i])
            item_field = f"{field}[{i}]"
            option, _, inline = token.partition("=")
            if not option.startswith("-"):
                self.violations.append(
                    violation(item_field, token, "extra-args-shape", "expected an option starting with '-'")
                )
                i += 1
                continue
            dest = self.dest_for_option(option)
            if dest is None:
                self.unknown(item_field, token, option.lstrip("-").replace("-", "_"))
                i += 1
                continue
            spec = self.flags[dest]
            takes_value = spec["kind"] != "bool"
            values = [inline] if inline else []
            i += 1
            if takes_value and not inline:
                while i < len(raw_args) and not (str(raw_args[i]).startswith("-") and len(values) > 0):
                    values.append(str(raw_args[i]))
                    i += 1
                    if spec.get("nargs") not in ("+", "*"):
                        break
            if not self.claim(dest, item_field, token):
                continue
            if takes_value and not values:
                self.violations.append(violation(item_field, token, "flag-type", f"{option} needs a value"))
                continue
            if not takes_value:
                stored = spec.get("store", True)
                value = not stored if self.canonical_option(option) in spec["negatives"] else stored
            else:
                value = values if spec["kind"] == "list" else values[0]
            # Rendered in the catalog's canonical spelling, so abbreviations and underscores come out plain.
            tokens, problem = render_value(spec, value)
            if problem:
                self.violations.append(violation(item_field, token, "flag-type", f"{problem} (vLLM {self.version})"))
                continue
            self.argv.extend(tokens)


def render_value(spec, value):
    """(argv tokens, problem) for one flag and one profile value, following the catalog's kind."""
    option = spec["options"][0] if spec["options"] else None
    kind = spec["kind"]
    if kind == "bool":
        if not isinstance(value, bool):
            return [], f"must be true or false, got {type(value).__name__}"
        if value == spec.get("store", True):
            return [option or spec["negatives"][0]], None
        # The spelling this version shows in --help (0.33: --disable-X; up to 0.32: --no-X).
        negatives = sorted(spec["negatives"], key=lambda o: o in spec.get("hidden", []))
        # store_true flag set to false (or store_false set to true) is the default: nothing to render.
        return ([negatives[0]] if negatives else []), None
    if value is None:
        if spec.get("default", "unset") is None:
            return [], None  # None is the engine default: same as not rendering the flag
        if spec.get("accepts_none"):
            return [option, "None"], None
        return [], "does not accept None"
    if kind == "json":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as err:
                return [], f"is not valid JSON ({err})"
        if not isinstance(value, dict):
            return [], "must be a mapping (JSON object)"
        return [option, json.dumps(value, separators=(",", ":"))], None
    if kind == "list":
        items = value if isinstance(value, list) else [value]
        bad = [v for v in items if not isinstance(v, (str, int, float)) or isinstance(v, bool)]
        if bad:
            return [], f"items must be scalars, got {bad!r}"
        return [option] + [str(v) for v in items], check_choices(spec, items)
    if isinstance(value, (dict, list)) or isinstance(value, bool):
        return [], f"must be a {kind}, got {type(value).__name__}"
    if kind == "int":
        if isinstance(value, float) or not re.fullmatch(r"-?\d+", str(value)):
            return [], f"must be an integer, got {value!r}"
    elif kind == "float":
        try:
            float(value)
        except ValueError:
            return [], f"must be a number, got {value!r}"
    return [option, format_scalar(value)], check_choices(spec, [value])


def format_scalar(value):
    if isinstance(value, float):
        return repr(value)
    return str(value)


def check_choices(spec, items):
    choices = spec.get("choices")
    if choices and any(str(v) not in choices for v in items):
        return f"must be one of {choices}"
    return None


def parse_allocator_conf(text):
    pairs = {}
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        key, _, val = part.partition(":")
        pairs[key.strip()] = val.strip()
    return pairs


def format_allocator_conf(pairs):
    return ",".join(f"{k}:{v}" for k, v in pairs.items())


def model_text_config(model_config):
    return model_config.get("text_config") or model_config


def model_max_len(model_config):
    cfg = model_text_config(model_config)
    limit = cfg.get("max_position_embeddings") or model_config.get("max_position_embeddings")
    scaling = cfg.get("rope_scaling") or {}
    if (
        limit
        and scaling.get("factor")
        and scaling.get("rope_type", scaling.get("type")) in ("yarn", "dynamic", "linear")
    ):
        limit = int(limit * scaling["factor"])
    return limit


def model_dtype(model_config):
    cfg = model_text_config(model_config)
    return cfg.get("dtype") or cfg.get("torch_dtype") or model_config.get("dtype") or model_config.get("torch_dtype")


class Plan:
    """Everything vllm_args decides for one rank: argv, env, block prediction, warnings, violations."""

    def __init__(self, params):
        self.p = params
        self.violations = []
        self.warnings = []

    def fail(self, field, value, rule, message):
        self.violations.append(violation(field, value, rule, message))

    def build(self):
        p = self.p
        engine = dict(p.get("engine") or {})
        env = {str(k): v for k, v in (p.get("env") or {}).items()}
        platform = p.get("platform", "gb10")
        version = p["engine_version"]
        nodes = p.get("nodes") or 1
        model_config = p.get("model_config") or {}

        if platform not in PLATFORMS:
            self.fail("platform", platform, "platform", f"must be one of {sorted(PLATFORMS)}")
            return self.result(None, [], {}, None)
        try:
            catalog = catalog_for(version)
        except ValueError as err:
            self.fail("engine_version", version, "engine-version", str(err))
            return self.result(None, [], {}, None)

        renderer = Renderer(catalog)
        renderer.argv = ["vllm", "serve", str(p.get("model") or model_config.get("_name_or_path") or "")]
        if not renderer.argv[-1]:
            self.fail("model", p.get("model"), "required", "the model id or path to serve is required")
        if p.get("revision"):
            renderer.add("revision", str(p["revision"]), "revision")
        for key, value in engine.items():
            if renderer.dest_for_key(key) in RANK_ARGS:
                self.fail(
                    f"engine.{key}",
                    value,
                    "rank-args",
                    "is decided per rank from the inventory (nodes, node_rank, master_addr); remove it",
                )
                continue
            if renderer.dest_for_key(key) == "api_key":
                self.fail(
                    f"engine.{key}",
                    "<redacted>",
                    "secret-in-argv",
                    "an API key in argv shows in every process list; use api_key_file",
                )
                continue
            renderer.add(key, value, f"engine.{key}")
        self.add_rank_args(renderer, nodes)
        renderer.add_raw(list(p.get("extra_args") or []), "extra_args")
        self.violations.extend(renderer.violations)

        values = self.effective_engine(engine, renderer)
        block = self.check_block(model_config, values, platform, version, env)
        self.check_parallel(model_config, values, platform, nodes)
        self.check_sizes(model_config, values)
        self.check_json_configs(catalog, values)
        self.check_moe_table(model_config, values)
        rendered_env = self.check_env(env, values, platform)
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

    def add_rank_args(self, renderer, nodes):
        p = self.p
        if nodes <= 1:
            return
        rank = p.get("node_rank", 0)
        renderer.add("nnodes", nodes, "nodes")
        renderer.add("node_rank", rank, "node_rank")
        if not p.get("master_addr"):
            self.fail(
                "master_addr",
                p.get("master_addr"),
                "required",
                f"nodes={nodes} needs the head node's address on the fast link",
            )
        else:
            renderer.add("master_addr", str(p["master_addr"]), "master_addr")
        if p.get("master_port"):
            renderer.add("master_port", p["master_port"], "master_port")
        if rank != 0:
            renderer.add("headless", True, "node_rank")
        if not 0 <= rank < nodes:
            self.fail("node_rank", rank, "node-rank", f"must be between 0 and nodes-1 ({nodes - 1})")

    def effective_engine(self, engine, renderer):
        """Engine values by dest, from the mapping and the extra args (the last word wins as in vLLM)."""
        values = {}
        for key, value in engine.items():
            dest = renderer.dest_for_key(key)
            if dest:
                values[dest] = value
        extra = list(self.p.get("extra_args") or [])
        for i, token in enumerate(extra):
            option, _, inline = str(token).partition("=")
            dest = renderer.dest_for_option(option)
            if not dest:
                continue
            spec = renderer.flags[dest]
            if spec["kind"] == "bool":
                stored = spec.get("store", True)
                values[dest] = not stored if renderer.canonical_option(option) in spec["negatives"] else stored
            elif inline or i + 1 < len(extra):
                raw = inline or str(extra[i + 1])
                values[dest] = coerce(spec["kind"], raw)
        return values

    def check_block(self, model_config, values, platform, version, env):
        if not model_config:
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
            )
        except ValueError as err:
            self.fail("model_config", model_config.get("model_type"), "block-prediction", str(err))
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

    def check_parallel(self, model_config, values, platform, nodes):
        tp = values.get("tensor_parallel_size", 1)
        pp = values.get("pipeline_parallel_size", 1)
        per_node = self.p.get("gpus_per_node") or PLATFORMS.get(platform, 1)
        if isinstance(tp, int) and isinstance(pp, int) and tp * pp != nodes * per_node:
            self.fail(
                "engine.tensor_parallel_size",
                tp,
                "tp-equals-ranks",
                f"tensor_parallel_size x pipeline_parallel_size ({tp} x {pp}) must equal nodes x GPUs "
                f"per node ({nodes} x {per_node} on {platform})",
            )
        if not isinstance(tp, int) or tp < 1:
            return
        cfg = model_text_config(model_config)
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

    def check_moe_table(self, model_config, values):
        table = self.p.get("moe_table")
        if table is None:
            return None
        cfg = model_text_config(model_config)
        experts = cfg.get("num_experts") or cfg.get("n_routed_experts")
        inter = cfg.get("moe_intermediate_size")
        tp = values.get("tensor_parallel_size", 1)
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

    def check_env(self, env, values, platform):
        rendered = {}
        for key, val in env.items():
            if SECRET_ENV.search(key):
                self.fail(
                    f"env.{key}",
                    "<redacted>",
                    "secret-in-env",
                    "secrets never go into the rendered environment; use api_key_file",
                )
                continue
            if isinstance(val, (dict, list)):
                self.fail(f"env.{key}", val, "env-string", "environment values must be scalars")
                continue
            rendered[key] = str(val).lower() if isinstance(val, bool) else str(val)
        if self.p.get("api_key_file"):
            rendered[API_KEY_FILE_ENV] = str(self.p["api_key_file"])
        if platform == "cpu":
            return rendered
        util = values.get("gpu_memory_utilization", DEFAULT_GPU_MEMORY_UTILIZATION)
        present = [name for name in ALLOCATOR_ENV if name in rendered]
        for name in present:
            pairs = parse_allocator_conf(rendered[name])
            for key in pairs:
                if key not in ALLOCATOR_KEYS:
                    self.fail(
                        f"env.{name}",
                        rendered[name],
                        "allocator-key",
                        f"unknown allocator key '{key}' makes CUDA initialisation fail; "
                        f"known keys: {', '.join(sorted(ALLOCATOR_KEYS))}",
                    )
            fraction = pairs.get("per_process_memory_fraction")
            if fraction is not None and not same_number(fraction, util):
                self.fail(
                    f"env.{name}",
                    rendered[name],
                    "allocator-fraction",
                    f"per_process_memory_fraction {fraction} must equal gpu_memory_utilization {util}; "
                    "leave it out and it is rendered from gpu_memory_utilization",
                )
            elif fraction is None:
                pairs["per_process_memory_fraction"] = format_scalar(util)
                rendered[name] = format_allocator_conf(pairs)
        if not present:
            rendered["PYTORCH_ALLOC_CONF"] = f"per_process_memory_fraction:{format_scalar(util)}"
        return rendered

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


def moe_table_name(experts, n, device_name, dtype=None, block_shape=None):
    """File name vLLM's fused MoE looks up (fused_moe.get_config_file_name)."""
    dtype_part = f",dtype={dtype}" if dtype else ""
    shape_part = f",block_shape=[{','.join(map(str, block_shape))}]" if block_shape and all(block_shape) else ""
    return f"E={experts},N={n},device_name={device_name}{dtype_part}{shape_part}.json"


def coerce(kind, raw):
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "json":
            return json.loads(raw)
    except ValueError:
        return raw
    return raw


def in_choices(value, choices):
    """Enum-backed choices (upper-case member names) match case-insensitively, as vLLM parses them."""
    if all(str(c).isupper() for c in choices):
        return str(value).upper() in choices
    return str(value) in choices


def lookup(values, model_config, field):
    """The profile value a dotted field names (engine.* from the engine values, model_config.* from the model)."""
    head, _, path = field.partition(".")
    node = values if head == "engine" else model_config if head == "model_config" else {}
    for key in path.split(".") if path else []:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def same_number(text, number):
    try:
        return math.isclose(float(text), float(number), abs_tol=1e-9)
    except (TypeError, ValueError):
        return False


def plan(params):
    """Render and check one rank's `vllm serve` command. Returns the result dict (see vllm_args RETURN)."""
    return Plan(params).build()
