"""The hostile and careless profile inputs, case by case: (id, class, base profile, mutation, field the refusal
names, rule). tests/unit/test_hostile_input.py runs every case; docs/profiles.md states how many there are."""

import json

from tests.profiles import ROOT, extra, set_in

SECRET = "sk-HOSTILE-0123456789"
PAIR_LINK = ["192.0.2.10", "192.0.2.11"]
TWO_RAILS = "rocep1s0f1:1,roceP2p1s0f1:1"  # what the quad profile once set, to be silently replaced


def extra_instead(key, *args):
    """Move an engine setting to extra_args (the profile's own value would make it a duplicate)."""

    def mutate(prof):
        prof["engine"].pop(key)
        prof["extra_args"] = list(args)

    return mutate


def model_file(content):
    """Point the profile at a model config file with `content` (text, or an object dumped as JSON)."""

    def mutate(prof, out_dir):
        path = out_dir.parent / "config.json"
        path.write_text(content if isinstance(content, str) else json.dumps(content))
        prof["model"]["config"] = str(path)

    mutate.needs_dir = True
    return mutate


def tiny_next(**changes):
    """The tiny qwen3_next test model's config with some keys changed (None removes the key)."""
    config = json.loads((ROOT / "tests/engine/models/tiny-qwen3-next/config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return config


# (id, class, base profile, mutation, field the refusal names, rule)
CASES = [
    # --- secrets: never in argv, env, messages or files
    ("api-key-extra", "secrets", "single", extra("--api-key", SECRET), "extra_args[0]", "secret-in-argv"),
    ("api-key-extra-eq", "secrets", "single", extra(f"--api-key={SECRET}"), "extra_args[0]", "secret-in-argv"),
    ("api-key-abbrev", "secrets", "single", extra("--api-k", SECRET), "extra_args[0]", "secret-in-argv"),
    ("api-key-abbrev-eq", "secrets", "single", extra(f"--api-ke={SECRET}"), "extra_args[0]", "secret-in-argv"),
    ("api-key-underscore", "secrets", "single", extra(f"--api_key={SECRET}"), "extra_args[0]", "secret-in-argv"),
    ("api-key-engine", "secrets", "single", set_in("engine.api_key", SECRET), "engine.api_key", "secret-in-argv"),
    ("api-key-engine-dash", "secrets", "single", set_in("engine.api-key", SECRET), "engine", "schema pattern"),
    ("hf-token-extra", "secrets", "pair", extra("--hf-token", SECRET), "extra_args[0]", "secret-in-argv"),
    ("hf-token-engine", "secrets", "pair", set_in("engine.hf_token", SECRET), "engine.hf_token", "secret-in-argv"),
    ("env-api-key", "secrets", "single", set_in("env.VLLM_API_KEY", SECRET), "env.VLLM_API_KEY", "secret-in-env"),
    ("env-apikey", "secrets", "single", set_in("env.OPENAI_APIKEY", SECRET), "env.OPENAI_APIKEY", "secret-in-env"),
    ("env-key", "secrets", "single", set_in("env.MY_KEY", SECRET), "env.MY_KEY", "secret-in-env"),
    ("env-token", "secrets", "pair", set_in("env.HF_TOKEN", SECRET), "env.HF_TOKEN", "secret-in-env"),
    ("env-hftoken", "secrets", "pair", set_in("env.HFTOKEN", SECRET), "env.HFTOKEN", "secret-in-env"),
    (
        "env-secret",
        "secrets",
        "single",
        set_in("env.AWS_SECRET_ACCESS", SECRET),
        "env.AWS_SECRET_ACCESS",
        "secret-in-env",
    ),
    ("env-password", "secrets", "single", set_in("env.DB_PASSWORD", SECRET), "env.DB_PASSWORD", "secret-in-env"),
    ("env-passwd", "secrets", "single", set_in("env.REDIS_PASSWD", SECRET), "env.REDIS_PASSWD", "secret-in-env"),
    ("env-newline", "secrets", "single", set_in("env.NCCL_DEBUG", "INFO\nEVIL=1"), "env.NCCL_DEBUG", "no-newline"),
    # A key smuggled after a line break: refused for the line break, and the refusal does not print the key.
    (
        "env-newline-key",
        "secrets",
        "single",
        set_in("env.NCCL_DEBUG", f"INFO\nVLLM_API_KEY={SECRET}"),
        "env.NCCL_DEBUG",
        "no-newline",
    ),
    (
        "extra-newline-key",
        "secrets",
        "single",
        extra("--max-logprobs", f"4\n--api-key {SECRET}"),
        "extra_args[0]",
        "no-newline",
    ),
    # --- the fabric's environment is the inventory's (roce_network checks every rail), never a profile's
    ("env-nccl-ib-hca", "fabric", "quad", set_in("env.NCCL_IB_HCA", TWO_RAILS), "env.NCCL_IB_HCA", "fabric-env"),
    ("env-gid-index", "fabric", "pair", set_in("env.NCCL_IB_GID_INDEX", "3"), "env.NCCL_IB_GID_INDEX", "fabric-env"),
    ("env-host-ip", "fabric", "pair", set_in("env.VLLM_HOST_IP", "10.0.0.1"), "env.VLLM_HOST_IP", "fabric-env"),
    ("extra-newline", "secrets", "single", extra("--max-logprobs", "4\n--api-key"), "extra_args[0]", "no-newline"),
    (
        "engine-newline",
        "secrets",
        "single",
        set_in("engine.tool_call_parser", "x\ny"),
        "engine.tool_call_parser",
        "no-newline",
    ),
    # --- rank and topology flags come only from the inventory
    ("nnodes-extra", "rank", "single", extra("--nnodes", "2"), "extra_args[0]", "rank-args"),
    ("nnodes-short", "rank", "single", extra("-n", "2"), "extra_args[0]", "rank-args"),
    ("node-rank-underscore", "rank", "pair", extra("--node_rank=1"), "extra_args[0]", "rank-args"),
    ("node-rank-abbrev", "rank", "pair", extra("--node-r", "1"), "extra_args[0]", "rank-args"),
    ("master-addr-extra", "rank", "pair", extra("--master-addr", "10.0.0.1"), "extra_args[0]", "rank-args"),
    ("master-port-extra", "rank", "pair", extra("--master-port=29501"), "extra_args[0]", "rank-args"),
    ("headless-extra", "rank", "single", extra("--headless"), "extra_args[0]", "rank-args"),
    ("dp-address-extra", "rank", "pair", extra("--data-parallel-address", "10.0.0.1"), "extra_args[0]", "rank-args"),
    ("dp-rpc-port-short", "rank", "pair", extra("-dpp", "13345"), "extra_args[0]", "rank-args"),
    ("dp-size-local", "rank", "pair", extra("--data-parallel-size-local=1"), "extra_args[0]", "rank-args"),
    (
        "dp-start-rank-engine",
        "rank",
        "pair",
        set_in("engine.data_parallel_start_rank", 1),
        "engine.data_parallel_start_rank",
        "rank-args",
    ),
    ("master-addr-engine", "rank", "pair", set_in("engine.master_addr", "10.0.0.1"), "engine.master_addr", "rank-args"),
    ("nnodes-engine", "rank", "single", set_in("engine.nnodes", 2), "engine.nnodes", "rank-args"),
    # --- boolean spellings: rendered as the parser reads them, or refused; never inverted
    ("bool-eq-false", "boolean", "single", extra("--trust-remote-code=false"), "extra_args[0]", "bool-takes-no-value"),
    ("bool-eq-true", "boolean", "single", extra("--trust-remote-code=true"), "extra_args[0]", "bool-takes-no-value"),
    ("bool-eq-0", "boolean", "single", extra("--trust-remote-code=0"), "extra_args[0]", "bool-takes-no-value"),
    ("bool-eq-yes", "boolean", "single", extra("--trust-remote-code=yes"), "extra_args[0]", "bool-takes-no-value"),
    ("bool-space-no", "boolean", "single", extra("--trust-remote-code", "no"), "extra_args[0]", "bool-takes-no-value"),
    ("bool-space-1", "boolean", "single", extra("--trust-remote-code", "1"), "extra_args[0]", "bool-takes-no-value"),
    (
        "bool-negative-eq",
        "boolean",
        "single",
        extra("--no-trust-remote-code=true"),
        "extra_args[0]",
        "bool-takes-no-value",
    ),
    (
        "bool-engine-string",
        "boolean",
        "single",
        set_in("engine.enforce_eager", "false"),
        "engine.enforce_eager",
        "schema type",
    ),
    (
        "bool-engine-string-uncatalogued",
        "boolean",
        "single",
        set_in("engine.trust_remote_code", "false"),
        "engine.trust_remote_code",
        "flag-type",
    ),
    (
        "bool-engine-int",
        "boolean",
        "single",
        set_in("engine.trust_remote_code", 0),
        "engine.trust_remote_code",
        "flag-type",
    ),
    # --- values: ports, bounds, names, images, allocator, master address
    ("port-zero", "values", "single", set_in("engine.port", 0), "engine.port", "port-range"),
    # --- code from the model repository runs only when the profile names the model
    (
        "remote-code",
        "values",
        "single",
        set_in("engine.trust_remote_code", True),
        "engine.trust_remote_code",
        "remote-code",
    ),
    ("remote-code-extra", "values", "pair", extra("--trust-remote-code"), "extra_args[0]", "remote-code"),
    # --- vLLM switches that open the engine to whoever reaches it: only when the profile names them
    ("dev-mode", "values", "single", set_in("env.VLLM_SERVER_DEV_MODE", 1), "env.VLLM_SERVER_DEV_MODE", "unsafe-env"),
    (
        "runtime-lora",
        "values",
        "pair",
        set_in("env.VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True"),
        "env.VLLM_ALLOW_RUNTIME_LORA_UPDATING",
        "unsafe-env",
    ),
    (
        "pickled-messages",
        "values",
        "single",
        set_in("env.VLLM_ALLOW_INSECURE_SERIALIZATION", "1"),
        "env.VLLM_ALLOW_INSECURE_SERIALIZATION",
        "unsafe-env",
    ),
    ("remote-code-abbrev", "values", "single", extra("--trust-remote"), "extra_args[0]", "remote-code"),
    (
        "remote-code-other-model",
        "values",
        "single",
        lambda prof: (
            prof["model"].update(trust_remote_code="other/model") or prof["engine"].update(trust_remote_code=True)
        ),
        "engine.trust_remote_code",
        "remote-code",
    ),
    ("port-high", "values", "single", set_in("engine.port", 70000), "engine.port", "port-range"),
    ("port-extra-high", "values", "single", extra_instead("port", "--port=65536"), "extra_args[0]", "port-range"),
    ("int-2-70", "values", "single", set_in("engine.max_logprobs", 2**70), "engine.max_logprobs", "int-range"),
    ("seqs-huge", "values", "single", set_in("engine.max_num_seqs", 2**40), "engine.max_num_seqs", "int-range"),
    ("pp-zero-extra", "values", "single", extra("-pp", "0"), "extra_args[0]", "int-range"),
    ("model-id-shell", "values", "single", set_in("model.id", "org/m; reboot"), "model.id", "schema pattern"),
    ("model-id-space", "values", "single", set_in("model.id", "org/my model"), "model.id", "schema pattern"),
    (
        "served-name-quote",
        "values",
        "single",
        set_in("engine.served_model_name", ["a'b"]),
        "engine.served_model_name",
        "safe-name",
    ),
    (
        "parser-shell",
        "values",
        "single",
        set_in("engine.tool_call_parser", "hermes;id"),
        "engine.tool_call_parser",
        "safe-name",
    ),
    (
        "reasoning-parser-space",
        "values",
        "single",
        set_in("engine.reasoning_parser", "deep seek"),
        "engine.reasoning_parser",
        "safe-name",
    ),
    (
        "image-with-tag",
        "values",
        "single",
        set_in("image.name", "registry.local:5000/vllm:latest"),
        "image.name",
        "schema pattern",
    ),
    ("image-uppercase", "values", "single", set_in("image.name", "Registry/VLLM"), "image.name", "schema pattern"),
    ("choice-bad", "values", "single", extra("--uvicorn-log-level", "loud"), "extra_args[0]", "flag-type"),
    (
        "alloc-unknown-key",
        "values",
        "single",
        set_in("env.PYTORCH_ALLOC_CONF", "expandable:True"),
        "env.PYTORCH_ALLOC_CONF",
        "allocator-key",
    ),
    (
        "alloc-bad-bool",
        "values",
        "single",
        set_in("env.PYTORCH_ALLOC_CONF", "expandable_segments:sure"),
        "env.PYTORCH_ALLOC_CONF",
        "allocator-value",
    ),
    (
        "alloc-bad-mb",
        "values",
        "single",
        set_in("env.PYTORCH_ALLOC_CONF", "max_split_size_mb:lots"),
        "env.PYTORCH_ALLOC_CONF",
        "allocator-value",
    ),
    (
        "alloc-bad-backend",
        "values",
        "single",
        set_in("env.PYTORCH_ALLOC_CONF", "backend:cuda"),
        "env.PYTORCH_ALLOC_CONF",
        "allocator-value",
    ),
    (
        "alloc-fraction-above-one",
        "values",
        "single",
        set_in("env.PYTORCH_CUDA_ALLOC_CONF", "per_process_memory_fraction:1.5"),
        "env.PYTORCH_CUDA_ALLOC_CONF",
        "allocator-value",
    ),
    (
        "alloc-disagree",
        "values",
        "single",
        lambda p: p["env"].update(
            PYTORCH_ALLOC_CONF="expandable_segments:True", PYTORCH_CUDA_ALLOC_CONF="expandable_segments:False"
        ),
        "env.PYTORCH_CUDA_ALLOC_CONF",
        "allocator-disagree",
    ),
    # --- parallel layout: TP x PP x DP = nodes x GPUs per node
    (
        "dp2-on-tp2-pair",
        "layout",
        "pair",
        set_in("engine.data_parallel_size", 2),
        "engine.tensor_parallel_size",
        "layout-equals-ranks",
    ),
    (
        "dp2-pair-tp1",
        "layout",
        "pair",
        lambda p: p["engine"].update(tensor_parallel_size=1, data_parallel_size=2),
        "engine.data_parallel_size",
        "data-parallel-replicas",
    ),
    (
        "pp2-on-pair-tp2",
        "layout",
        "pair",
        set_in("engine.pipeline_parallel_size", 2),
        "engine.tensor_parallel_size",
        "layout-equals-ranks",
    ),
    ("dp-extra-single", "layout", "single", extra("-dp", "2"), "engine.tensor_parallel_size", "layout-equals-ranks"),
    (
        "quad-tp2",
        "layout",
        "quad",
        set_in("engine.tensor_parallel_size", 2),
        "engine.tensor_parallel_size",
        "layout-equals-ranks",
    ),
    (
        "quad-tp2-pp2-ple",
        "layout",
        "quad",
        lambda p: p["engine"].update(tensor_parallel_size=2, pipeline_parallel_size=2),
        "engine.pipeline_parallel_size",
        "pp-per-layer-embeddings",
    ),
    (
        "quad-tp8",
        "layout",
        "quad",
        set_in("engine.tensor_parallel_size", 8),
        "engine.tensor_parallel_size",
        "layout-equals-ranks",
    ),
    # --- malformed model configs: refused naming the file and the key
    ("config-not-object", "model-config", "single", model_file("[1, 2, 3]"), "model_config.(file)", "model-config"),
    ("config-not-json", "model-config", "single", model_file("{not json"), "model_config", "model-config"),
    (
        "config-heads-string",
        "model-config",
        "testbed",
        model_file(tiny_next(num_attention_heads="16")),
        "model_config.num_attention_heads",
        "model-config",
    ),
    (
        "config-zero-layers",
        "model-config",
        "testbed",
        model_file(tiny_next(num_hidden_layers=0)),
        "model_config.num_hidden_layers",
        "model-config",
    ),
    (
        "config-negative-head-dim",
        "model-config",
        "testbed",
        model_file(tiny_next(linear_key_head_dim=-128)),
        "model_config.linear_key_head_dim",
        "model-config",
    ),
    (
        "config-text-config-list",
        "model-config",
        "testbed",
        model_file(tiny_next(text_config=[1])),
        "model_config.text_config",
        "model-config",
    ),
    (
        "config-no-model-type",
        "model-config",
        "testbed",
        model_file(tiny_next(model_type=None)),
        "model_config.model_type",
        "model-config",
    ),
    (
        "config-layer-types-string",
        "model-config",
        "testbed",
        model_file(tiny_next(layer_types="linear_attention")),
        "model_config.layer_types",
        "model-config",
    ),
    (
        "config-missing-gdn-key",
        "model-config",
        "testbed",
        model_file(tiny_next(num_attention_heads=None)),
        "model_config",
        "block-prediction",
    ),
    # --- syntaxes the engine accepts stay accepted (see test_engine_syntax_*), ambiguous prefixes are named
    ("ambiguous-prefix", "syntax", "single", extra("--max-num", "4"), "extra_args[0]", "ambiguous-option"),
    ("ambiguous-prefix-eq", "syntax", "single", extra(f"--api={SECRET}"), "extra_args[0]", "ambiguous-option"),
    ("dotted-not-json-flag", "syntax", "single", extra("--max-num-seqs.x", "4"), "extra_args[0]", "dotted-json-key"),
    (
        "dotted-duplicate-key",
        "syntax",
        "baseline",
        extra("--compilation-config.mode", "3", "--compilation-config.mode", "2"),
        "extra_args[2]",
        "duplicate-option",
    ),
]
