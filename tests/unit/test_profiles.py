"""Shipped profiles render cleanly; malformed ones are refused with the field named (schema + vllm_args)."""

import copy

import jsonschema
import pytest
import yaml
from ansible.module_utils.engine_rules import plan
from ansible.module_utils.hybrid_block import PLATFORMS
from ansible.modules import vllm_args

from tests.profiles import ROOT, SCHEMA, extra, profile, profiles, set_in, vllm_args_params


def schema_errors(prof):
    validator = jsonschema.Draft202012Validator(SCHEMA)
    return [(".".join(map(str, e.absolute_path)), e.message) for e in validator.iter_errors(prof)]


def all_violations(prof, rank=0):
    """Schema errors, and when the shape is right, every vllm_args violation."""
    errors = schema_errors(prof)
    if errors:
        return [{"field": path or "(profile)", "message": f"{path}: {msg}"} for path, msg in errors]
    return plan(vllm_args_params(prof, rank=rank))["violations"]


@pytest.mark.parametrize("name", sorted(profiles()))
def test_shipped_profile_is_valid_and_renders(name):
    prof = profile(name)
    assert schema_errors(prof) == []
    for rank in range(prof["nodes"]):
        result = plan(vllm_args_params(prof, rank=rank))
        assert result["violations"] == [], result["violations"]
        assert all(isinstance(token, str) for token in result["argv"])
        assert result["argv"][:3] == ["vllm", "serve", prof["model"]["id"]]
        assert all(isinstance(v, str) for v in result["env"].values())
        assert isinstance(result["effective_block"], int)


def test_pair_renders_rank_arguments_and_allocator_from_one_value():
    prof = profile("pair")
    head = plan(vllm_args_params(prof, rank=0, master_addr="192.0.2.10"))
    worker = plan(vllm_args_params(prof, rank=1, master_addr="192.0.2.10"))
    for result in (head, worker):
        argv = result["argv"]
        assert argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--master-addr") + 1] == "192.0.2.10"
        assert result["env"]["PYTORCH_ALLOC_CONF"] == "per_process_memory_fraction:0.7"
        assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.7"
    assert "--headless" not in head["argv"] and "--headless" in worker["argv"]
    assert worker["argv"][worker["argv"].index("--node-rank") + 1] == "1"


def test_false_booleans_use_the_versions_negative_spelling():
    prof = profile("no-prefix")
    argv = plan(vllm_args_params(prof))["argv"]  # 0.33: --disable-X is the documented spelling
    assert "--disable-prefix-caching" in argv and "--enable-prefix-caching" not in argv
    prof["engine_version"] = "0.30.0"
    argv = plan(vllm_args_params(prof))["argv"]  # up to 0.32 only --no-X exists
    assert "--no-enable-prefix-caching" in argv and "--disable-prefix-caching" not in argv
    prof["extra_args"] = ["--disable-log-stats", "--disable-prefix-caching"]
    rules = {v["field"]: v["rule"] for v in plan(vllm_args_params(prof))["violations"]}
    assert rules == {"extra_args[1]": "unknown-flag"}


def test_underscore_and_abbreviated_options_count_as_the_same_flag():
    prof = profile("single")
    prof["extra_args"] = ["--max_num_seqs", "2", "--max-num-batched", "1024"]
    fields = {v["field"] for v in plan(vllm_args_params(prof))["violations"]}
    assert fields == {"extra_args[0]", "extra_args[2]"}


def test_seed_000_retention_1600_after_mtp4_is_caught_with_block_and_nearest_values():
    prof = profile("pair")
    prof["engine"].update(mamba_ssm_cache_dtype="float32", prefix_cache_retention_interval=1600)
    prof["engine"]["speculative_config"]["num_speculative_tokens"] = 3
    assert plan(vllm_args_params(prof))["violations"] == [], "1600 fits the FP32/MTP3 block"
    prof["engine"]["speculative_config"]["num_speculative_tokens"] = 4
    violations = plan(vllm_args_params(prof))["violations"]
    assert [v["rule"] for v in violations] == ["retention-multiple-of-block"]
    message = violations[0]["message"]
    assert "engine.prefix_cache_retention_interval=1600" in message
    assert "1616" in message
    assert "nearest valid values: 1616" in message


def test_every_violation_is_listed_at_once():
    prof = profile("pair")
    prof["engine"]["max_num_seq"] = 2
    prof["engine"]["prefix_cache_retention_interval"] = 1000
    prof["env"]["PYTORCH_ALLOC_CONF"] = "per_process_memory_fraction:0.9"
    fields = {v["field"] for v in all_violations(prof)}
    assert fields == {"engine.max_num_seq", "engine.prefix_cache_retention_interval", "env.PYTORCH_ALLOC_CONF"}


def drop(path):
    def mutate(prof):
        node = prof
        keys = path.split(".")
        for key in keys[:-1]:
            node = node[key]
        del node[keys[-1]]

    return mutate


def both(*mutations):
    def mutate(prof):
        for m in mutations:
            m(prof)

    return mutate


# (id, base profile, mutation, field the message must name, text the message must contain)
MALFORMED = [
    ("engine-version-type", "pair", set_in("engine_version", 33), "engine_version", "string"),
    ("missing-revision", "pair", drop("model.revision"), "model", "revision"),
    ("revision-is-branch", "pair", set_in("model.revision", "main"), "model.revision", "does not match"),
    ("tag-without-digest", "single", set_in("image.digest", "latest"), "image.digest", "does not match"),
    ("image-name-with-digest", "single", set_in("image.name", "repo@sha256:abc"), "image.name", "does not match"),
    ("too-many-nodes", "pair", set_in("nodes", 65), "nodes", "maximum"),
    ("three-nodes-for-tp2", "pair", set_in("nodes", 3), "engine.tensor_parallel_size", "nodes x GPUs"),
    ("unknown-platform", "single", set_in("platform", "h100"), "platform", "h100"),
    ("unknown-top-level-key", "single", set_in("engin", {}), "(profile)", "engin"),
    ("util-above-one", "single", set_in("engine.gpu_memory_utilization", 1.5), "engine.gpu_memory_utilization", "1.5"),
    ("seqs-not-int", "single", set_in("engine.max_num_seqs", "two"), "engine.max_num_seqs", "two"),
    (
        "prefix-caching-string",
        "single",
        set_in("engine.enable_prefix_caching", "yes"),
        "engine.enable_prefix_caching",
        "yes",
    ),
    ("env-value-mapping", "single", set_in("env.NCCL_DEBUG", {"level": "INFO"}), "env.NCCL_DEBUG", "level"),
    ("unknown-flag", "single", set_in("engine.max_num_seq", 4), "engine.max_num_seq", "max_num_seqs"),
    ("bad-choice", "single", set_in("engine.mamba_ssm_cache_dtype", "fp9"), "engine.mamba_ssm_cache_dtype", "one of"),
    ("bad-int", "single", set_in("engine.max_logprobs", "several"), "engine.max_logprobs", "integer"),
    (
        "bool-flag-as-number",
        "single",
        set_in("engine.enable_chunked_prefill", 1),
        "engine.enable_chunked_prefill",
        "true or false",
    ),
    (
        "spec-config-unknown-key",
        "pair",
        set_in("engine.speculative_config.num_spec_tokens", 3),
        "engine.speculative_config.num_spec_tokens",
        "num_speculative_tokens",
    ),
    (
        "spec-config-bad-method",
        "pair",
        set_in("engine.speculative_config.method", "medusa2"),
        "engine.speculative_config.method",
        "one of",
    ),
    (
        "spec-tokens-zero",
        "single",
        set_in("engine.speculative_config.num_speculative_tokens", 0),
        "engine.speculative_config.num_speculative_tokens",
        "positive",
    ),
    (
        "draft-tp-three",
        "pair",
        set_in("engine.speculative_config.draft_tensor_parallel_size", 3),
        "engine.speculative_config.draft_tensor_parallel_size",
        "1 or tensor_parallel_size",
    ),
    (
        "cudagraph-mode-choice",
        "pair",
        set_in("engine.compilation_config.cudagraph_mode", "FULL_ALWAYS"),
        "engine.compilation_config.cudagraph_mode",
        "one of",
    ),
    (
        "engram-unknown-key",
        "pair",
        set_in("engine.engram_config.offload_cpu", False),
        "engine.engram_config.offload_cpu",
        "cpu_offload",
    ),
    (
        "retention-not-multiple",
        "pair",
        set_in("engine.prefix_cache_retention_interval", 800),
        "engine.prefix_cache_retention_interval",
        "nearest valid values",
    ),
    (
        "retention-on-non-hybrid",
        "testbed",
        set_in("engine.prefix_cache_retention_interval", 128),
        "engine.prefix_cache_retention_interval",
        "none",
    ),
    (
        "allocator-mismatch",
        "single-throughput",
        set_in("env.PYTORCH_ALLOC_CONF", "per_process_memory_fraction:0.72"),
        "env.PYTORCH_ALLOC_CONF",
        "0.822",
    ),
    (
        "cuda-allocator-mismatch",
        "single",
        set_in("env.PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True,per_process_memory_fraction:0.9"),
        "env.PYTORCH_CUDA_ALLOC_CONF",
        "0.8",
    ),
    (
        "allocator-unknown-key",
        "single",
        set_in("env.PYTORCH_ALLOC_CONF", "expandable_segment:True"),
        "env.PYTORCH_ALLOC_CONF",
        "expandable_segment",
    ),
    (
        "duplicate-through-extra-args",
        "single",
        extra("--mamba-cache-mode", "none"),
        "extra_args[0]",
        "engine.mamba_cache_mode",
    ),
    ("duplicate-through-alias", "single", extra("-tp", "1"), "extra_args[0]", "engine.tensor_parallel_size"),
    (
        "duplicate-inside-extra-args",
        "baseline",
        extra("--max-logprobs", "2", "--max-logprobs=4"),
        "extra_args[2]",
        "extra_args[0]",
    ),
    ("unknown-extra-flag", "single", extra("--turbo"), "extra_args[0]", "turbo"),
    (
        "tp-mismatch-pair",
        "pair",
        set_in("engine.tensor_parallel_size", 1),
        "engine.tensor_parallel_size",
        "nodes x GPUs",
    ),
    (
        "tp-mismatch-single",
        "single",
        set_in("engine.tensor_parallel_size", 2),
        "engine.tensor_parallel_size",
        "nodes x GPUs",
    ),
    (
        "seqs-above-batched",
        "single",
        set_in("engine.max_num_seqs", 4096),
        "engine.max_num_seqs",
        "max_num_batched_tokens",
    ),
    ("max-len-above-model", "single", set_in("engine.max_model_len", 300000), "engine.max_model_len", "262144"),
    (
        "long-prefill-above-max-len",
        "baseline",
        set_in("engine.long_prefill_token_threshold", 40000),
        "engine.long_prefill_token_threshold",
        "32768",
    ),
    (
        "moe-table-missing",
        "pair",
        set_in("tuned_config_dir", "schemas"),
        "tuned_config_dir",
        "E=512,N=320,device_name=NVIDIA_GB10.json",
    ),
    ("api-key-in-env", "single", set_in("env.VLLM_API_KEY", "sk-secret"), "env.VLLM_API_KEY", "api_key_file"),
    ("api-key-in-argv", "single", set_in("engine.api_key", "sk-secret"), "engine.api_key", "api_key_file"),
    ("rank-arg-in-profile", "pair", set_in("engine.node_rank", 1), "engine.node_rank", "inventory"),
    (
        "unknown-flag-of-a-catalogued-version",
        "single",
        set_in("engine.brand_new_flag", 1),
        "engine.brand_new_flag",
        "has no engine argument",
    ),
    (
        "mtp-prefix-on-cpu-hybrid",
        "testbed",
        both(
            set_in("model.config", "tests/engine/models/tiny-qwen3-next/config.json"),
            set_in("engine.speculative_config", {"method": "mtp", "num_speculative_tokens": 1}),
        ),
        "engine.speculative_config",
        "CPU build",
    ),
]


@pytest.mark.parametrize("case_id,base,mutate,field,text", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_profile_is_refused_naming_the_field(case_id, base, mutate, field, text):
    prof = profile(base)
    mutate(prof)
    violations = all_violations(prof)
    assert violations, f"{case_id}: accepted"
    named = [v for v in violations if v["field"] == field]
    assert named, f"{case_id}: no violation names {field}: {violations}"
    assert any(text in v["message"] for v in named), named
    assert "sk-secret" not in repr(violations), "the secret value leaked into a message"


def test_malformed_table_is_large_enough():
    assert len(MALFORMED) >= 20
    assert len({c[0] for c in MALFORMED}) == len(MALFORMED)


def test_a_profile_change_does_not_mutate_the_shipped_one():
    """Both ways to read a profile hand out copies: a test that changes what it read leaves the next read alone."""
    before = copy.deepcopy(profiles())
    profiles()["pair"]["engine"]["max_num_seqs"] = 99
    profile("pair")["engine"]["tensor_parallel_size"] = 7
    assert profiles() == before
    assert before["pair"]["engine"]["max_num_seqs"] != 99


def test_extra_args_are_typed_rendered_canonically_and_feed_the_block_prediction():
    prof = profile("single")
    prof["engine"].pop("enable_prefix_caching")
    prof["extra_args"] = ["--disable-prefix", "--max-logprobs", "many"]
    result = plan(vllm_args_params(prof))
    assert "--disable-prefix-caching" in result["argv"]
    assert result["block"]["enable_prefix_caching"] is False
    assert [(v["field"], v["rule"]) for v in result["violations"]] == [("extra_args[1]", "flag-type")]


def test_argv_is_one_canonical_form_whatever_the_key_order():
    """A record keeps its profile as JSON with sorted keys; restoring it must render the very argv the profile did
    (same config hash, so no restart of a pair that already runs it)."""
    prof = profile("pair")
    reordered = copy.deepcopy(prof)
    reordered["engine"] = dict(reversed(list(prof["engine"].items())))
    spec = reordered["engine"].get("speculative_config")
    assert isinstance(spec, dict) and len(spec) > 1, "the pair profile's speculative_config is a JSON mapping"
    reordered["engine"]["speculative_config"] = dict(reversed(list(spec.items())))
    assert list(reordered["engine"]) != list(prof["engine"])
    assert plan(vllm_args_params(reordered))["argv"] == plan(vllm_args_params(prof))["argv"]


def test_the_platform_list_is_defined_once():
    """hybrid_block.PLATFORMS is the definition; the schema's enum and vllm_args' documented choices follow it."""
    assert set(SCHEMA["properties"]["platform"]["enum"]) == set(PLATFORMS)
    documented = yaml.safe_load(vllm_args.DOCUMENTATION)["options"]["platform"]["choices"]
    assert set(documented) == set(PLATFORMS)


def test_the_tests_render_a_profile_with_the_parameters_the_role_renders_it_with():
    """tests/profiles.py maps a profile to vllm_args by hand: every name it passes is one render.yml passes too, and
    render.yml passes nothing from the profile that the mapping leaves out."""
    tasks = yaml.safe_load((ROOT / "roles/vllm_service/tasks/render.yml").read_text())
    role_params = next(task["vllm_args"] for task in tasks if "vllm_args" in task)
    from_nodes = {"node_rank", "master_addr", "master_port", "fabric_env", "fast_link_addresses"}
    prof = profile("pair")
    prof["model"]["trust_remote_code"] = prof["model"]["id"]  # every optional field set, so none is left out
    prof.setdefault("cuda_version", "13.0")
    prof["allow_unsafe_env"] = []
    mapped = set(vllm_args_params(prof, config_as_path=True)) - from_nodes
    assert mapped == set(role_params) - from_nodes - {"fast_link_prefix_length"}, (mapped, set(role_params))


@pytest.mark.parametrize(
    ("version", "catalog"), [("0.34.0.dev12", "0.33.0"), ("0.31.0", "0.30.0"), ("0.29.0", "0.30.0")]
)
def test_a_version_without_a_catalog_validates_and_leaves_its_flags_to_the_image(version, catalog):
    """A nightly or a newer release: every other rule holds, an argument the nearest catalog does not know is
    rendered as given and the warning says the image's own parser checks the flags before the start."""
    prof = profile("single")
    prof["engine_version"] = version
    prof["engine"]["brand_new_flag"] = True
    prof["extra_args"] = ["--nightly-only", "x"]
    result = plan(vllm_args_params(prof))
    assert result["violations"] == [] and result["engine_version"] == catalog
    assert "--brand-new-flag" in result["argv"] and result["argv"][-2:] == ["--nightly-only", "x"]
    assert any(
        f"no flag catalog for vLLM {version}" in w and "the image's own vLLM parses" in w for w in result["warnings"]
    )
    prof["engine"]["api_key"] = "sk-not-here"  # the Spark rules stay whatever the catalog
    prof["extra_args"] = ["--nightly-api-token", "sk-also-not-here"]
    refused = plan(vllm_args_params(prof))
    assert [v["rule"] for v in refused["violations"]] == ["secret-in-argv", "secret-in-argv"]
    assert "sk-" not in str(refused["violations"]) and "sk-" not in " ".join(refused["argv"])
