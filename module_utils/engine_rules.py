"""Render a declarative vLLM engine profile to `vllm serve` argv and list every rule it breaks.

Pure Python (stdlib only) so plain pytest can test it; library/vllm_args.py is the Ansible face.
Every violation names the field, the value and the rule, and all of them are returned at once.
"""

import difflib
import json
import math
import re

from ansible.module_utils.hybrid_block import GPUS_PER_NODE, PLATFORMS, predict_block, text_config
from ansible.module_utils.input_rules import (
    MODEL_ID,
    RANK_DESTS,
    SECRET_DESTS,
    address_problem,
    allocator_problems,
    has_newline,
    model_config_problems,
    same_link_problem,
    value_problem,
)
from ansible.module_utils.redaction import REDACTED, is_secret_name, redact
from ansible.module_utils.vllm_catalogs import catalog_for, nearest_catalog

ALLOCATOR_ENV = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")
# The fabric's environment (roles/roce_network/tasks/verify.yml publishes it per node): never a profile's.
FABRIC_ENV = frozenset(
    (
        "NCCL_IB_HCA",
        "NCCL_IB_GID_INDEX",
        "NCCL_SOCKET_IFNAME",
        "GLOO_SOCKET_IFNAME",
        "TP_SOCKET_IFNAME",
        "UCX_NET_DEVICES",
        "VLLM_HOST_IP",
    )
)
API_KEY_FILE_ENV = "SPARK_SERVE_API_KEY_FILE"
# vLLM switches (vllm/envs.py) that open the engine to whoever reaches its port: refused while on unless the profile
# names them in allow_unsafe_env.
UNSAFE_ENV = {
    "VLLM_SERVER_DEV_MODE": "serves the developer endpoints (/reset_prefix_cache, /sleep, /collective_rpc, ...) that "
    "change or stop the engine",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "lets a client load LoRA adapters from paths or repositories it names",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "lets the engine unpickle its messages (running code sent to its sockets)",
}
OFF_WORDS = ("", "0", "false", "no", "off")
# vLLM reports usage to its maintainers unless told not to (vllm/envs.py): off in every profile unless it says so.
NO_USAGE_STATS = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
BOOL_WORDS = ("true", "false", "yes", "no", "0", "1", "on", "off")

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's CacheConfig default
WHEN = {"startup": "at startup", "load": "while loading the model", "after_load": "only after the model load"}


def violation(field, value, rule, message):
    """One refusal; a secret inside the value (`INFO\nVLLM_API_KEY=...`) is hidden in it and in the message."""
    value = REDACTED if is_secret_name(field) and isinstance(value, str) and value else redact(value)
    return {"field": field, "value": value, "rule": rule, "message": redact(f"{field}={value!r}: {message}")}


class Renderer:
    """Collects argv, parsed values and violations for one rank of one profile."""

    def __init__(self, catalog, deferred=False):
        self.catalog = catalog
        self.deferred = deferred  # no catalog of the engine's own version: unknown flags are the image's to judge
        self.flags = catalog["FLAGS"]
        self.version = catalog["ENGINE_VERSION"]
        self.dash_o = (catalog.get("CLI_SYNTAX") or {}).get("dash_O") or []
        self.by_option = {}
        for dest, spec in self.flags.items():
            for opt in spec["options"] + spec["negatives"]:
                self.by_option[opt] = dest
        self.argv = []
        self.values = {}  # dest -> parsed value, what the engine will see
        self.violations = []
        self.seen = {}  # dest -> field that set it
        self.dotted = {}  # dest -> (field, merged mapping) from --json-flag.key value

    def fail(self, field, value, rule, message):
        self.violations.append(violation(field, value, rule, message))

    def prefix_matches(self, option):
        return sorted(o for o in self.by_option if o.startswith(option))

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
        matches = self.prefix_matches(option)
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
            self.fail(
                field,
                value,
                "duplicate-option",
                f"sets --{dest.replace('_', '-')} which {self.seen[dest]} already sets; vLLM keeps only "
                "the last occurrence, so one of them would be silently ignored",
            )
            return False
        self.seen[dest] = field
        return True

    def unknown(self, field, value, name):
        if self.deferred:  # the image's own parser judges it; a secret's name is refused here all the same
            if not self.secret_unknown(field, name):
                self.argv.extend(generic_tokens(name, value))
            return
        near = difflib.get_close_matches(name, list(self.flags), n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        self.fail(
            field, value, "unknown-flag", f"vLLM {self.version} has no engine argument '{name}' (flag catalog){hint}"
        )

    def secret_unknown(self, field, name):
        """A flag no catalog knows that names a secret (a nightly's --new-api-key): refused like a known one."""
        if not is_secret_name(name):
            return False
        self.fail(
            field,
            REDACTED,
            "secret-in-argv",
            f"--{name.replace('_', '-')} in argv shows in every process "
            "list, compose file and record; use api_key_file",
        )
        return True

    def refused_dest(self, dest, field, value):
        """True (and a violation) for arguments the profile may never set: secrets and rank topology."""
        if dest in SECRET_DESTS:
            self.fail(
                field,
                REDACTED,
                "secret-in-argv",
                f"--{dest.replace('_', '-')} in argv shows in every process list, compose file and record; "
                "use api_key_file",
            )
            return True
        if dest in RANK_DESTS:
            self.fail(
                field,
                value,
                "rank-args",
                f"--{dest.replace('_', '-')} is decided per rank from the inventory (spark_nodes, its order "
                "and the head's fast-link address); remove it from the profile",
            )
            return True
        return False

    def add(self, key, value, field, trusted=False):
        """One engine mapping entry; `trusted` entries come from the inventory (rank flags)."""
        dest = self.dest_for_key(key)
        if dest is None:
            self.unknown(field, value, key)
            return
        if (not trusted and self.refused_dest(dest, field, value)) or not self.claim(dest, field, value):
            return
        self.render(dest, value, field, value)

    def render(self, dest, value, field, shown):
        """Append one flag in the catalog's canonical spelling after type and bound checks."""
        if has_newline(value) or (isinstance(value, list) and any(has_newline(v) for v in value)):
            self.fail(field, shown, "no-newline", "must not contain a line break (it would split the argument)")
            return
        tokens, problem = render_value(self.flags[dest], value)
        if problem:
            self.fail(field, shown, "flag-type", f"{problem} (vLLM {self.version})")
            return
        bound = value_problem(dest, parsed_value(self.flags[dest], value))
        if bound:
            self.fail(field, shown, bound[0], bound[1])
            return
        self.argv.extend(tokens)
        self.values[dest] = parsed_value(self.flags[dest], value)

    def add_raw(self, raw_args, field):
        """Extra args given as raw strings, read the way vLLM's FlexibleArgumentParser reads them."""
        tokens = [str(t) for t in raw_args]
        i = 0
        while i < len(tokens):
            i = self.add_raw_option(tokens, i, f"{field}[{i}]")
        for dest, (item_field, merged) in self.dotted.items():
            if self.claim(dest, item_field, merged):
                self.render(dest, merged, item_field, merged)

    def add_raw_option(self, tokens, i, item_field):
        """Read the option at tokens[i] (and its values); returns the index of the next option."""
        token = tokens[i]
        if has_newline(token):
            self.fail(item_field, token, "no-newline", "must not contain a line break")
            return i + 1
        if token.startswith("-O") and not token.startswith("--") and self.dash_o:
            return self.add_dash_o(tokens, i, item_field)
        option, _, inline = token.partition("=")
        if not option.startswith("-"):
            self.fail(item_field, token, "extra-args-shape", "expected an option starting with '-'")
            return i + 1
        if "." in option and option.startswith("--"):
            return self.add_dotted(tokens, i, item_field)
        dest = self.dest_for_option(option)
        if dest is None and self.deferred:
            if not self.secret_unknown(item_field, option.lstrip("-").replace("-", "_")):
                self.argv.extend(tokens[i : skip_values(tokens, i + 1)])  # as given: the image's parser judges it
            return skip_values(tokens, i + 1)
        if dest is None:
            self.unresolved(option, item_field, token)
            return skip_values(tokens, i + 1)
        spec = self.flags[dest]
        if spec["kind"] == "bool":
            return self.add_raw_bool(tokens, i, item_field, dest)
        values, i = raw_values(tokens, i + 1, inline, spec)
        shown = REDACTED if dest in SECRET_DESTS else token
        if self.refused_dest(dest, item_field, shown) or not self.claim(dest, item_field, shown):
            return i
        if not values:
            self.fail(item_field, token, "flag-type", f"{option} needs a value")
            return i
        value = values if spec["kind"] == "list" else coerce(spec["kind"], values[0])
        self.render(dest, value, item_field, token)
        return i

    def unresolved(self, option, item_field, token):
        """An option the catalog cannot resolve: ambiguous prefix or unknown. Its value is never echoed."""
        shown = option + ("=..." if "=" in token else "")
        spelled = "--" + option[2:].replace("_", "-") if option.startswith("--") else option
        candidates = self.prefix_matches(spelled) if spelled.startswith("--") else []
        if len(candidates) > 1:
            self.fail(
                item_field,
                shown,
                "ambiguous-option",
                f"{option} is an abbreviation of {len(candidates)} options in vLLM {self.version} "
                f"({', '.join(candidates[:8])}{', ...' if len(candidates) > 8 else ''}); the engine refuses "
                "it; spell the option out",
            )
        else:
            self.unknown(item_field, shown, option.lstrip("-").replace("-", "_"))

    def add_raw_bool(self, tokens, i, item_field, dest):
        """A boolean flag takes no value: argparse refuses `--flag=false`, and `--flag false` leaves a stray
        positional. Both are refused here rather than rendered as the bare flag (which would invert them)."""
        token = tokens[i]
        option, has_inline, inline = token.partition("=")
        spec = self.flags[dest]
        follower = tokens[i + 1] if i + 1 < len(tokens) else None
        stray = follower is not None and follower.lower() in BOOL_WORDS
        if has_inline or stray:
            value = inline if has_inline else follower
            positive, negative = spec["options"][:1], sorted(spec["negatives"])[:1]
            spellings = " or ".join(positive + negative) or option
            self.fail(
                item_field,
                f"{option} {value}" if stray else token,
                "bool-takes-no-value",
                f"vLLM {self.version}'s parser reads no value after a boolean flag (it refuses "
                f"'{option}={value}' or keeps '{value}' as a stray argument); write {spellings}, or set "
                f"engine.{dest}: true/false",
            )
            return i + (2 if stray else 1)
        if self.refused_dest(dest, item_field, token) or not self.claim(dest, item_field, token):
            return i + 1
        stored = spec.get("store", True)
        value = not stored if self.canonical_option(option) in spec["negatives"] else stored
        self.render(dest, value, item_field, token)
        return i + 1

    def add_dash_o(self, tokens, i, item_field):
        """-O3, -O=3 and -O 3 are the optimization level (FlexibleArgumentParser rewrites them)."""
        token = tokens[i]
        if token == "-O":
            if i + 1 >= len(tokens):
                self.fail(item_field, token, "flag-type", "-O needs a level")
                return i + 1
            level, nxt = tokens[i + 1], i + 2
        else:
            level, nxt = token[3:] if token[2:3] == "=" else token[2:], i + 1
        dest = self.dash_o[0]
        if self.claim(dest, item_field, token):
            self.render(dest, coerce(self.flags[dest]["kind"], level), item_field, token)
        return nxt

    def add_dotted(self, tokens, i, item_field):
        """--speculative-config.num_speculative_tokens 4: one key of a JSON flag, merged like vLLM merges it."""
        token = tokens[i]
        option, has_inline, inline = token.partition("=")
        base, *keys = option.split(".")
        dest = self.dest_for_option(base)
        if dest is None or self.flags[dest]["kind"] != "json" or not all(keys):
            self.fail(item_field, token, "dotted-json-key", f"{base} is not a JSON config flag of vLLM {self.version}")
            return i + 1
        if not has_inline and i + 1 >= len(tokens):
            self.fail(item_field, token, "flag-type", f"{option} needs a value")
            return i + 1
        raw, nxt = (inline, i + 1) if has_inline else (tokens[i + 1], i + 2)
        value = coerce("json", raw)
        field, merged = self.dotted.setdefault(dest, (item_field, {}))
        node = merged
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                break
        if not isinstance(node, dict) or keys[-1] in node:
            self.fail(item_field, token, "duplicate-option", f"{option} is already set by {field}")
        else:
            node[keys[-1]] = value
        return nxt


def raw_values(tokens, i, inline, spec):
    """The values that follow an option in raw args, and the index after them."""
    if inline:
        return [inline], i
    values = []
    while i < len(tokens) and not (tokens[i].startswith("-") and values):
        values.append(tokens[i])
        i += 1
        if spec.get("nargs") not in ("+", "*"):
            break
    return values, i


def generic_tokens(name, value):
    """An engine argument no catalog knows, spelled as vLLM spells its own: --dashed-name, booleans as --x / --no-x,
    mappings as JSON."""
    option = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return [option if value else "--no-" + option[2:]]
    if value is None:
        return []
    if isinstance(value, dict):
        return [option, json.dumps(value, separators=(",", ":"), sort_keys=True)]
    if isinstance(value, list):
        return [option] + [str(item) for item in value]
    return [option, str(value)]


def skip_values(tokens, i):
    """Index of the next option after an unresolved one (its values are not reported on their own)."""
    while i < len(tokens) and not tokens[i].startswith("-"):
        i += 1
    return i


def parsed_value(spec, value):
    """The value as the engine will hold it (JSON text parsed)."""
    if spec["kind"] == "json" and isinstance(value, str):
        return coerce("json", value)
    return value


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
        return [option, json.dumps(value, separators=(",", ":"), sort_keys=True)], None
    if kind == "list":
        items = value if isinstance(value, list) else [value]
        bad = [v for v in items if not isinstance(v, (str, int, float)) or isinstance(v, bool)]
        if bad:
            return [], f"items must be scalars, got {bad!r}"
        return [option] + [str(v) for v in items], check_choices(spec, items)
    if isinstance(value, (dict, list, bool)):
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

        renderer = Renderer(catalog, deferred)
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
        self.check_parallel(model_config, values, platform, nodes)
        self.check_sizes(model_config, values)
        self.check_json_configs(catalog, values)
        self.check_moe_table(model_config, values)
        self.check_remote_code(values, renderer.seen)
        rendered_env = self.check_env(env, values, platform)
        rendered_env.update(self.check_fabric_env(p.get("fabric_env") or {}))
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

    def check_parallel(self, model_config, values, platform, nodes):
        tp = values.get("tensor_parallel_size", 1)
        pp = values.get("pipeline_parallel_size", 1)
        dp = values.get("data_parallel_size", 1)
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
        cfg = text_config(model_config)
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
            if is_secret_name(key):
                self.fail(
                    f"env.{key}",
                    REDACTED,
                    "secret-in-env",
                    "a credential-like name (KEY, TOKEN, SECRET, PASSWORD) never goes into the rendered "
                    "environment, compose file or record; use api_key_file",
                )
            elif key in FABRIC_ENV:
                self.fail(
                    f"env.{key}",
                    val,
                    "fabric-env",
                    "roce_network sets it per node from the inventory (roce_network_interface, roce_network_nccl_ib_hca"
                    " and _twins for the rails), after checking every port; a profile value would be silently replaced",
                )
            elif isinstance(val, (dict, list)) or val is None:
                self.fail(f"env.{key}", val, "env-string", "environment values must be scalars")
            elif has_newline(val):
                self.fail(f"env.{key}", val, "no-newline", "must not contain a line break (it would inject lines)")
            else:
                rendered[key] = str(val).lower() if isinstance(val, bool) else str(val)
                self.check_unsafe_env(key, rendered[key])
        if self.p.get("api_key_file"):
            rendered[API_KEY_FILE_ENV] = str(self.p["api_key_file"])
        for name, value in NO_USAGE_STATS.items():
            rendered.setdefault(name, value)
        present = [name for name in ALLOCATOR_ENV if name in rendered]
        confs = {name: parse_allocator_conf(rendered[name]) for name in present}
        for name, pairs in confs.items():
            for rule, problem in allocator_problems(pairs):
                self.fail(f"env.{name}", rendered[name], rule, problem)
        if len(confs) == 2 and confs[ALLOCATOR_ENV[0]] != confs[ALLOCATOR_ENV[1]]:
            self.fail(
                f"env.{ALLOCATOR_ENV[1]}",
                rendered[ALLOCATOR_ENV[1]],
                "allocator-disagree",
                f"differs from {ALLOCATOR_ENV[0]}={rendered[ALLOCATOR_ENV[0]]!r}; torch reads only one of "
                "them, so one setting would be silently ignored: set one",
            )
        if platform != "cpu":
            self.render_allocator_fraction(rendered, confs, values)
        return rendered

    def check_unsafe_env(self, key, value):
        """A switch of UNSAFE_ENV turned on needs the profile's allow_unsafe_env to name it."""
        allowed = self.p.get("allow_unsafe_env") or []
        if key in UNSAFE_ENV and value.strip().lower() not in OFF_WORDS and key not in allowed:
            self.fail(
                f"env.{key}",
                value,
                "unsafe-env",
                f"{UNSAFE_ENV[key]}; acknowledge it by name with allow_unsafe_env: [{key}] in the profile",
            )

    def check_fabric_env(self, fabric_env):
        """The fabric's variables as roce_network published them (it checked every port): only FABRIC_ENV keys."""
        rendered = {}
        for key, val in fabric_env.items():
            if key not in FABRIC_ENV:
                self.fail(f"fabric_env.{key}", val, "fabric-env-key", f"not a fabric variable ({sorted(FABRIC_ENV)})")
            elif has_newline(val):
                self.fail(f"fabric_env.{key}", val, "no-newline", "must not contain a line break")
            else:
                rendered[key] = str(val)
        return rendered

    def render_allocator_fraction(self, rendered, confs, values):
        """per_process_memory_fraction follows gpu_memory_utilization: rendered when absent, checked when set."""
        util = values.get("gpu_memory_utilization", DEFAULT_GPU_MEMORY_UTILIZATION)
        for name, pairs in confs.items():
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
        if not confs:
            rendered["PYTORCH_ALLOC_CONF"] = f"per_process_memory_fraction:{format_scalar(util)}"

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
