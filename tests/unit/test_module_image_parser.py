"""roles/vllm_service/library/vllm_image_parser.py in-process, docker faked: a refusal names every refused rank and
the image's vLLM version, a pass is remembered by image id and argv, a broken image is named."""

import json

import pytest
from ansible.module_utils.basic import AnsibleModule
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
    assert result["failed"] and "cannot run the image's own vLLM parser in spark-serve/gb10:" in result["msg"]
    assert "python3" in result["msg"] and "nothing was started" in result["msg"]


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
