"""roles/hf_model's refusal of bad model inputs (module_utils/model_checks.py) through its module hf_model_inputs: every
node's problems and every node given another model than the first, in play order, before any node changes."""

import pytest
from ansible.modules import hf_model_inputs

from tests.module_harness import run_module

COMMIT = "c1899de289a04d12100db370d81485cdf75e47ca"
DIGEST = "registry.local/spark-serve/vllm@sha256:" + "0" * 64
HOSTS = ["node-0", "node-1"]


def request(**changes):
    return {
        "repo": "Qwen/Qwen3-0.6B",
        "revision": COMMIT,
        "cache_dir": "/var/lib/spark-serve/huggingface",
        "image": DIGEST,
        "download_host": "node-0",
        "peer_address": "192.168.100.10",
        "download_attempts": 3,
        **changes,
    }


def judge(requests, hosts=None):
    hosts = hosts or list(requests)
    result = run_module(hf_model_inputs, {"hosts": hosts, "requests": requests, "play_hosts": HOSTS})
    assert not result["failed"], result
    return result["problems"]


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({}, None),
        ({"revision": COMMIT[:7], "image": "spark-serve/vllm-cuda:0123456789abcdef"}, None),
        ({"repo": "Qwen3-0.6B"}, "hf_model_repo 'Qwen3-0.6B' is not org/name"),
        ({"repo": "-org/name"}, "hf_model_repo '-org/name' is not org/name"),
        (
            {"revision": "main"},
            "hf_model_revision 'main' is not a commit: pin a commit sha or a prefix of at least 7 hex digits (branches "
            "and tags move)",
        ),
        ({"revision": COMMIT[:6]}, f"hf_model_revision '{COMMIT[:6]}' is not a commit"),
        ({"cache_dir": "cache"}, "hf_model_cache_dir cache is not an absolute path"),
        (
            {"image": "vllm/vllm-openai:latest"},
            "hf_model_image 'vllm/vllm-openai:latest' is neither <repository>@sha256:<64 hex> nor an image "
            "engine_image built (spark-serve/<name>:<inputs hash>): the download runs in the pinned engine image",
        ),
        ({"download_host": "node-9"}, "hf_model_download_host node-9 is not in this play"),
        ({"peer_address": ""}, "hf_model_peer_address is empty (the fast-link address, roce_network_address)"),
        ({"download_attempts": 0}, "hf_model_download_attempts must be at least 1"),
        ({"download_attempts": "none"}, "hf_model_download_attempts must be at least 1"),
    ],
)
def test_each_input_problem_is_named_with_its_node(changes, problem):
    problems = judge({"node-0": request(**changes)})
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].startswith(f"node-0: {problem}"), problems


def test_every_node_is_judged_and_each_given_another_model_than_the_first_is_named():
    requests = {"node-0": request(), "node-1": request(revision="main", cache_dir="/srv/hf")}
    assert judge(requests) == [
        "node-1: hf_model_revision 'main' is not a commit: pin a commit sha or a prefix of at least 7 hex digits "
        "(branches and tags move)",
        f"node-1: model, revision, cache, image or download host (Qwen/Qwen3-0.6B main /srv/hf {DIGEST} node-0) "
        f"differ from node-0 (Qwen/Qwen3-0.6B {COMMIT} /var/lib/spark-serve/huggingface {DIGEST} node-0): every "
        "node serves the same snapshot",
    ]


def test_the_peer_address_and_the_attempts_may_differ_between_nodes():
    requests = {"node-1": request(peer_address="192.168.100.11", download_attempts=5), "node-0": request()}
    assert judge(requests, hosts=HOSTS) == []
