"""Hostile and careless input, case by case, through what `site.yml --tags validate` runs: the spark_profile
action's schema check, then library/vllm_args for every rank with its argument file as the destination.

Every case asserts the rule and the field of its refusal, that the message names the field, that nothing was
written, and that no secret value appears anywhere in what the refusal returns.
"""

import json
from pathlib import Path

import pytest
from ansible.modules import vllm_args
from ansible.plugins.action.spark_profile import schema_problems

from tests.hostile_cases import CASES, PAIR_LINK, SECRET
from tests.module_harness import run_module
from tests.profiles import ROOT, SCHEMA, profile, vllm_args_params


def validate(prof, out_dir, master_addr="192.0.2.10", fast_link=PAIR_LINK):
    """Violations as the validate play finds them (schema first; vllm_args only when the shape is right)."""
    problems = schema_problems(prof, SCHEMA)
    if problems:
        return problems
    violations = []
    for rank in range(prof["nodes"]):
        args = vllm_args_params(prof, rank, master_addr, config_as_path=True)
        args.update(fast_link_addresses=fast_link, dest=str(out_dir / f"rank{rank}.args.json"))
        result = run_module(vllm_args, args)
        violations += result.get("violations", [])
        if result["failed"]:
            assert result["msg"].count("\n") == len(result["violations"]), "one line per violation after the head"
            assert "argv" not in result, "a refusal returns its violations, not the rendered command"
    return violations


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_hostile_input_is_refused_by_rule_and_field(case, tmp_path):
    case_id, _, base, mutate, field, rule = case
    out = tmp_path / "out"
    out.mkdir()
    prof = profile(base)
    mutate(prof, out) if getattr(mutate, "needs_dir", False) else mutate(prof)
    violations = validate(prof, out)
    assert violations, f"{case_id}: accepted"
    named = [v for v in violations if v["field"] == field]
    assert named, f"{case_id}: no violation names {field}: {[(v['field'], v['rule']) for v in violations]}"
    assert rule in {v["rule"] for v in named}, named
    assert all(v["message"].startswith(field) for v in named), named
    if field.startswith("model_config"):
        assert all("config.json" in v["message"] for v in named), "a model-config refusal names the file"
    assert list(out.iterdir()) == [], "a refused profile wrote an argument file"
    assert SECRET not in json.dumps(violations), "a secret value leaked into the refusal"


def test_case_table_covers_every_class_with_sixty_cases():
    classes = {c[1] for c in CASES}
    assert classes == {"secrets", "fabric", "rank", "boolean", "values", "layout", "model-config", "syntax"}
    assert len(CASES) >= 60 and len({c[0] for c in CASES}) == len(CASES)


def rendered(prof, tmp_path, **kwargs):
    assert validate(prof, tmp_path, **kwargs) == []
    return [json.loads((tmp_path / f"rank{r}.args.json").read_text())["argv"] for r in range(prof["nodes"])]


def test_engine_syntax_dotted_json_keys_merge_and_render_canonically(tmp_path):
    prof = profile("baseline")
    prof["extra_args"] = [
        "--compilation-config.cudagraph_num_of_warmups",
        "2",
        "--compilation_config.cudagraph_mode=FULL_DECODE_ONLY",
    ]
    (argv,) = rendered(prof, tmp_path)
    value = argv[argv.index("--compilation-config") + 1]
    assert json.loads(value) == {"cudagraph_num_of_warmups": 2, "cudagraph_mode": "FULL_DECODE_ONLY"}
    assert not any("." in token and token.startswith("--compilation") for token in argv)


def test_engine_syntax_dash_o_is_the_optimization_level(tmp_path):
    for spelling in (["-O3"], ["-O=3"], ["-O", "3"]):
        prof = profile("single")
        prof["extra_args"] = spelling
        (argv,) = rendered(prof, tmp_path)
        assert argv[argv.index("--optimization-level") + 1] == "3", spelling


def test_negative_boolean_forms_render_as_the_parser_reads_them(tmp_path):
    prof = profile("single")
    prof["extra_args"] = ["--no-trust-remote-code", "--enforce-eager"]
    prof["engine"].pop("enforce_eager", None)
    (argv,) = rendered(prof, tmp_path)
    assert "--no-trust-remote-code" in argv and "--enforce-eager" in argv
    assert "--trust-remote-code" not in argv


def test_remote_code_runs_when_the_profile_names_the_model(tmp_path):
    prof = profile("single")
    prof["engine"]["trust_remote_code"] = True
    prof["model"]["trust_remote_code"] = prof["model"]["id"]
    (argv,) = rendered(prof, tmp_path)
    assert "--trust-remote-code" in argv


@pytest.mark.parametrize(("value", "allowed"), [("1", ["VLLM_SERVER_DEV_MODE"]), ("0", []), (False, [])])
def test_a_switch_turned_off_or_named_by_the_profile_renders(tmp_path, value, allowed):
    prof = profile("single")
    prof["env"] = dict(prof.get("env", {}), VLLM_SERVER_DEV_MODE=value)
    prof["allow_unsafe_env"] = allowed
    assert validate(prof, tmp_path) == []
    rendered_env = json.loads((tmp_path / "rank0.args.json").read_text())["env"]
    assert rendered_env["VLLM_SERVER_DEV_MODE"] == str(value).lower()


def test_master_address_must_be_an_address_on_the_nodes_fast_link(tmp_path):
    prof = profile("pair")
    for bad, rule_text in (
        ("192.168.100.300", "not a valid IPv4"),
        ("192.168.100.10; reboot", "host name"),
        ("10.9.9.9", "same fast link"),
    ):
        violations = validate(prof, tmp_path, master_addr=bad, fast_link=["192.168.100.10", "192.168.100.11"])
        named = [v for v in violations if v["field"] == "master_addr" and v["rule"] == "master-addr"]
        assert named and rule_text in named[0]["message"], (bad, violations)
        assert list(tmp_path.iterdir()) == []
    argv = rendered(prof, tmp_path, master_addr="192.168.100.10", fast_link=["192.168.100.10", "192.168.100.11"])
    assert all(a[a.index("--master-addr") + 1] == "192.168.100.10" for a in argv)


def test_refusal_lists_every_violation_first_one_line_each(tmp_path):
    prof = profile("pair")
    prof["extra_args"] = [f"--api-key={SECRET}", "--nnodes", "3", "--enforce-eager=false"]
    prof["env"]["HF_TOKEN"] = SECRET
    args = {
        "engine": prof["engine"],
        "env": prof["env"],
        "engine_version": prof["engine_version"],
        "model": prof["model"]["id"],
        "model_config": str(ROOT / prof["model"]["config"]),
        "nodes": 2,
        "master_addr": "192.0.2.10",
        "extra_args": prof["extra_args"],
        "dest": str(tmp_path / "rank0.args.json"),
    }
    result = run_module(vllm_args, args)
    lines = result["msg"].splitlines()
    assert lines[0].startswith("4 violation(s)") and len(lines) == 5
    assert [line.split("=", 1)[0] for line in lines[1:]] == [
        "- extra_args[0]",
        "- extra_args[1]",
        "- extra_args[3]",
        "- env.HF_TOKEN",
    ]
    assert all("[rule: " in line for line in lines[1:])
    shown = {key: value for key, value in result.items() if key != "invocation"}  # the task runs with no_log
    assert len(result["msg"]) < 2000 and SECRET not in json.dumps(shown)
    assert not Path(args["dest"]).exists()


WRONG_VALUES = [None, "x", 2**70, [{"k": 1}], True, "a\nb"]
FUZZED = ("engine", "env", "model", "image", "nodes", "engine_version", "platform")


def leaf_paths(node, prefix=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaf_paths(value, (*prefix, key))
    elif prefix:
        yield prefix


@pytest.mark.parametrize("base", ["pair", "testbed"])
def test_no_wrong_value_anywhere_in_a_profile_crashes_or_writes(base, tmp_path):
    """Every leaf the engine sees replaced by values of other types: refused or rendered, never a crash."""
    refused = 0
    for path in (p for p in leaf_paths(profile(base)) if p[0] in FUZZED):
        for wrong in WRONG_VALUES:
            prof = profile(base)
            node = prof
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = wrong
            out = tmp_path / f"{'.'.join(map(str, path))}-{WRONG_VALUES.index(wrong)}"
            out.mkdir()
            violations = validate(prof, out)  # raises on a module crash (no exit_json/fail_json)
            refused += bool(violations)
            assert bool(violations) != bool(list(out.iterdir())), (path, wrong, violations)
    assert refused > 50


def test_pipeline_split_warns_when_uneven_and_refuses_more_stages_than_layers():
    from ansible.module_utils.engine_rules import plan

    config = json.loads((ROOT / "tests/engine/models/tiny-llama/config.json").read_text())
    params = {"model": "m", "engine_version": "0.32.0", "platform": "cpu", "nodes": 2, "master_addr": "192.0.2.10"}
    for layers, pp, warned, rule in ((5, 2, True, None), (4, 2, False, None), (1, 2, False, "pp-layers")):
        result = plan(
            dict(params, model_config=dict(config, num_hidden_layers=layers), engine={"pipeline_parallel_size": pp})
        )
        assert [v["rule"] for v in result["violations"]] == ([rule] if rule else []), result["violations"]
        assert any("split unevenly" in w for w in result["warnings"]) == warned, result["warnings"]


def test_the_fabric_environment_comes_from_roce_network_only(tmp_path):
    """fabric_env (roce_network's per-node variables) is merged into the rendered env; it takes no other key."""
    prof = profile("quad")
    args = vllm_args_params(prof, 1, "192.0.2.10", config_as_path=True)
    fabric = {"NCCL_IB_HCA": "rocep1s0f1:1,roceP2p1s0f1:1", "NCCL_IB_GID_INDEX": "3", "VLLM_HOST_IP": "192.0.2.11"}
    args.update(fabric_env=fabric, fast_link_addresses=["192.0.2.1" + str(n) for n in range(4)])
    result = run_module(vllm_args, args)
    assert not result["failed"], result.get("msg")
    assert fabric.items() <= result["env"].items()
    args.update(fabric_env={"NCCL_DEBUG": "INFO"})
    result = run_module(vllm_args, args)
    assert result["failed"] and [v["rule"] for v in result["violations"]] == ["fabric-env-key"], result
