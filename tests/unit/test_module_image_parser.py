"""roles/vllm_service/library/vllm_image_parser.py in-process, docker faked: a refusal names every refused rank and
the image's vLLM version, a pass is remembered by image id and argv, a broken image is named."""

import json
import os
import subprocess
import sys

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.image_parser import PROVENANCE
from ansible.modules import vllm_image_parser

from tests.module_harness import run_module

ARGV = ["vllm", "serve", "org/model", "--max-num-seqs", "2"]


def fake_docker(monkeypatch, answers, version="0.34.0.dev12", image_id="sha256:" + "1" * 64):
    """docker image inspect answers `image_id`; docker run prints the parser's answer for `answers` (None: python3
    missing in the image)."""
    runs = []

    def run_command(module, argv, **kwargs):
        if argv[:3] == ["docker", "image", "inspect"]:
            return 0, image_id + "\n", ""
        runs.append(argv)
        if answers is None:
            return 127, "", 'exec: "python3": executable file not found in $PATH'
        return 0, "noise\nspark-serve-parser " + json.dumps({"version": version, "answers": answers}) + "\n", ""

    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    return runs


def params(tmp_path, ranks=2):
    argvs = [ARGV] * ranks
    return {
        "image": "spark-serve/gb10:0123456789abcdef",
        "argvs": argvs,
        "hosts": ["a", "b"][:ranks],
        "cache_dir": str(tmp_path / "checks"),
    }


@pytest.mark.parametrize(
    ("answers", "refused"),
    [
        (
            [{"ok": True}, {"ok": False, "error": "vllm: error: unrecognized arguments: --x"}],
            ["rank 1 (b): vLLM 0.34.0.dev12 in the image refuses its argv: vllm: error: unrecognized arguments: --x"],
        ),
        (
            [{"ok": False, "error": "e0"}, {"ok": False, "error": "e1"}],
            [
                "rank 0 (a): vLLM 0.34.0.dev12 in the image refuses its argv: e0",
                "rank 1 (b): vLLM 0.34.0.dev12 in the image refuses its argv: e1",
            ],
        ),
    ],
)
def test_every_refused_rank_is_named_with_the_images_version(monkeypatch, tmp_path, answers, refused):
    fake_docker(monkeypatch, answers)
    result = run_module(vllm_image_parser, params(tmp_path))
    assert result["failed"] and result["refused"] == refused
    assert f"{len(refused)} rank(s) refused by the image's own vLLM parser; nothing was started" in result["msg"]
    assert not (tmp_path / "checks").exists()  # a refusal is never remembered


def test_a_pass_is_remembered_by_image_and_argv(monkeypatch, tmp_path):
    runs = fake_docker(monkeypatch, [{"ok": True}, {"ok": True}])
    first = run_module(vllm_image_parser, params(tmp_path))
    assert (first["failed"], first["cached"], first["version"]) == (False, False, "0.34.0.dev12")
    assert runs[0][:9] == ["timeout", "300", "docker", "run", "--rm", "--network", "none", "--pull", "never"]
    again = run_module(vllm_image_parser, params(tmp_path))
    assert (again["cached"], again["version"], len(runs)) == (True, "0.34.0.dev12", 1)
    fake_docker(monkeypatch, [{"ok": True}], image_id="sha256:" + "2" * 64)  # a rebuilt image: looked at again
    assert run_module(vllm_image_parser, params(tmp_path, ranks=1))["cached"] is False


def test_an_image_that_cannot_run_the_parser_is_named(monkeypatch, tmp_path):
    fake_docker(monkeypatch, None)
    result = run_module(vllm_image_parser, params(tmp_path))
    assert result["failed"] and result["msg"] == (
        "cannot run the image's own vLLM parser in spark-serve/gb10:0123456789abcdef (python3 or vLLM did not "
        'start, rc 127); nothing was started: exec: "python3": executable file not found in $PATH'
    )
    assert result["traceback"] == 'exec: "python3": executable file not found in $PATH'


# A fake vLLM package whose import fails as a bad patch makes it fail; the parser script runs on it for real.
SERVE_IMPORTS = {
    "vllm/__init__.py": "",
    "vllm/utils/__init__.py": "",
    "vllm/utils/argparse_utils.py": "FlexibleArgumentParser = None\n",
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/cli/__init__.py": "",
}
TAIL = "nothing was started (the traceback is in this task's `traceback`)"
LOCAL = "a patch of its series likely broke it (patches/0001-a.patch, patches.local/0001-mine.patch): fix or drop it "
LOCAL += "in the image folder (series and SHA256SUMS) and rerun"


@pytest.mark.parametrize(
    ("files", "patches", "said"),
    [
        # a hunk that left a bracket open: the file and line the compiler names
        (
            {"vllm/__init__.py": "from vllm import platforms\n", "vllm/platforms.py": "a = 1\nb = (2,\n"},
            ["patches/0001-a.patch", "patches.local/0001-mine.patch"],
            f"SyntaxError: '(' was never closed (vllm/platforms.py, line 2); {LOCAL}",
        ),
        # a name a patch renamed: the vLLM frame that raised, not the import machinery's
        (
            {**SERVE_IMPORTS, "vllm/entrypoints/cli/serve.py": "import os\n\nPORT = default_port()\n"},
            ["patches/0001-a.patch", "patches.local/0001-mine.patch"],
            f"NameError: name 'default_port' is not defined (vllm/entrypoints/cli/serve.py, line 3); {LOCAL}",
        ),
        # a missing module other than the argparse_utils an older vLLM lacks is not taken for an older vLLM
        (
            {**SERVE_IMPORTS, "vllm/utils/argparse_utils.py": "import vllm.gone\n"},
            [],
            "ModuleNotFoundError: No module named 'vllm.gone' (vllm/utils/argparse_utils.py, line 1); the image "
            "applies no patch: its base's vLLM does not import",
        ),
        # a registry image: no provenance.json, so no series to blame
        (
            {**SERVE_IMPORTS, "vllm/entrypoints/cli/serve.py": "raise RuntimeError('bad\\n  build')\n"},
            None,
            "RuntimeError: bad build (vllm/entrypoints/cli/serve.py, line 1); the image was not built from an image "
            "folder (no provenance.json): its vLLM does not import",
        ),
    ],
)
def test_an_image_whose_vllm_does_not_import_is_named_in_one_line(monkeypatch, tmp_path, files, patches, said):
    """`docker run` of the image runs the parser script with this Python on a broken fake vLLM (and the image's
    provenance.json where the module names it): one line names the image, the error, its vLLM file and line, and
    the series; the traceback is returned apart."""
    site, provenance = tmp_path / "site", tmp_path / "provenance.json"
    for name, text in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    if patches is not None:
        provenance.write_text(json.dumps({"vllm_version": "0.33.0", "patches": [{"name": p} for p in patches]}))

    def run_command(module, argv, **kwargs):
        if argv[:3] == ["docker", "image", "inspect"]:
            return 0, "sha256:" + "1" * 64 + "\n", ""
        assert argv[-1] == PROVENANCE
        script, argvs = argv[argv.index("-c") + 1 : -1]
        env = {**os.environ, "PYTHONPATH": str(site)}
        proc = subprocess.run(
            [sys.executable, "-c", script, argvs, str(provenance)], capture_output=True, text=True, env=env, timeout=60
        )
        return proc.returncode, proc.stdout, proc.stderr

    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    result = run_module(vllm_image_parser, params(tmp_path))
    assert result["failed"] and result["msg"] == (
        f"vLLM unknown in spark-serve/gb10:0123456789abcdef does not import: {said}; {TAIL}"
    )
    assert result["traceback"].startswith("Traceback (most recent call last):")
    assert "Traceback" not in result["msg"] and not (tmp_path / "checks").exists()


@pytest.mark.parametrize(
    ("engine_version", "image_version", "refused"),
    [
        ("0.32.0", "0.32.0+cpu", False),  # a local part is the same release
        ("0.33.0", "0.33.0", False),
        ("0.30.1rc1.dev648", "0.30.1rc1.dev648+g1234abc", False),
        ("0.30.1rc1.dev648", "0.33.0", True),  # seed 000's private build against a stock image
        ("0.33.0", "0.32.0+cpu", True),
        ("0.32.0", "unknown", True),  # an image without vLLM's metadata cannot be shown to be the release
    ],
)
def test_the_images_vllm_must_be_the_profiles_engine_version(
    monkeypatch, tmp_path, engine_version, image_version, refused
):
    fake_docker(monkeypatch, [{"ok": True}, {"ok": True}], version=image_version)
    args = dict(params(tmp_path), engine_version=engine_version)
    for cached in (False, True):  # a remembered pass of the argv is judged against the release again
        result = run_module(vllm_image_parser, args)
        assert (result["failed"], result["cached"], result["version"]) == (refused, cached, image_version)
        if refused:
            assert f"engine_version={engine_version!r}: the image holds vLLM {image_version}" in result["msg"]
            assert "rule: engine-version-matches-image" in result["msg"] and "nothing was started" in result["msg"]
