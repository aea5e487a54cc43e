"""vllm_container_paths on a node the prepare stage never reached (playbooks/deploy.yml run alone there): the
refusal names the missing step, before any rank is started."""

from unittest import mock

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.modules import vllm_container_paths

from tests.module_harness import run_module

ARGS = {"image": "registry.example/vllm@sha256:" + "ab" * 32, "argv": ["vllm", "serve", "org/model"], "label": "rank 0"}
STEP = "run ansible-playbook playbooks/prepare.yml (or site.yml) on this inventory first"


def test_a_node_without_docker_is_refused_naming_the_prepare_stage():
    with mock.patch.object(AnsibleModule, "get_bin_path", return_value=None):
        result = run_module(vllm_container_paths, ARGS)
    assert result["failed"] and result["msg"].startswith("rank 0: no docker on the node; nothing was started")
    assert STEP in result["msg"]


@pytest.mark.parametrize(
    "docker_says",
    ["Unable to find image 'registry.example/vllm@sha256:abab' locally", "invalid mount config: bind source path"],
)
def test_an_image_or_a_mount_source_the_node_lacks_names_the_prepare_stage_too(docker_says):
    with (
        mock.patch.object(AnsibleModule, "get_bin_path", return_value="/usr/bin/docker"),
        mock.patch.object(AnsibleModule, "run_command", return_value=(125, "", docker_says)),
    ):
        result = run_module(vllm_container_paths, ARGS)
    assert result["failed"] and docker_says in result["msg"]
    assert result["msg"].endswith(f"if this node was never prepared: the prepare stage puts Docker, the pinned image "
                                  f"and the model on every node: {STEP}")  # fmt: skip
