"""module_utils/nccl_check.py: the pinned image's NCCL against the GB10 CUDA-graph deadlock (vLLM issue #52504)."""

import subprocess

import pytest
from ansible.module_utils.nccl_check import (
    cuda_graph_deadlock,
    parse_version,
    uses_cuda_graphs,
    version_script,
    what_was_checked,
)


def image_nccl(root, env=None):
    out = subprocess.run(["sh", "-c", version_script(str(root))], capture_output=True, text=True, env=env or {})
    return out.stdout.strip()


def test_the_version_is_read_from_the_wheel_then_the_library_then_the_environment(tmp_path):
    assert image_nccl(tmp_path) == "nccl:none"
    assert image_nccl(tmp_path, {"NCCL_VERSION": "2.27.3"}) == "nccl:2.27.3"
    library = tmp_path / "usr/lib/aarch64-linux-gnu"
    library.mkdir(parents=True)
    (library / "libnccl.so.2.30.4").touch()
    assert image_nccl(tmp_path, {"NCCL_VERSION": "2.27.3"}) == "nccl:2.30.4"
    (tmp_path / "opt/venv/lib/python3.12/site-packages/nvidia_nccl_cu13-2.28.9.dist-info").mkdir(parents=True)
    assert image_nccl(tmp_path) == "nccl:2.28.9", "the wheel is what a pip-installed torch loads"


@pytest.mark.parametrize(
    ("version", "cross_node", "graphs", "refused"),
    [
        ("2.28.9", True, True, True),
        ("2.28.9-1+cuda13.0", True, True, True),
        ("2.30.4", True, True, False),
        ("2.31.0", True, True, False),
        ("2.28.9", False, True, False),
        ("2.28.9", True, False, False),
        ("none", True, True, False),
    ],
)
def test_only_cross_node_cuda_graphs_on_an_older_nccl_are_refused(version, cross_node, graphs, refused):
    problem = cuda_graph_deadlock(version, cross_node, graphs)
    assert (problem is not None) is refused
    if refused:
        assert "vLLM issue #52504" in problem and "NCCL >= 2.30.4" in problem and "enforce_eager" in problem


def test_cuda_graphs_are_off_only_when_the_argv_says_so():
    assert uses_cuda_graphs(["vllm", "serve", "m", "--tensor-parallel-size", "2"])
    assert not uses_cuda_graphs(["vllm", "serve", "m", "--enforce-eager"])
    assert not uses_cuda_graphs(["vllm", "serve", "m", "--compilation-config", '{"cudagraph_mode": "NONE"}'])
    assert uses_cuda_graphs(["vllm", "serve", "m", "--compilation-config", '{"cudagraph_mode": "FULL"}'])


def test_the_output_says_what_was_checked():
    assert what_was_checked("none", True, True).startswith("no NCCL in the image (a CPU build)")
    assert what_was_checked("2.28.9", True, True) == "NCCL 2.28.9 (cross-node, CUDA graphs on): REFUSED"
    assert what_was_checked("2.30.4", True, True) == "NCCL 2.30.4 (cross-node, CUDA graphs on): no known deadlock"
    assert parse_version("2.x") is None
