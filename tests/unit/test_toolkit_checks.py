"""roles/container_toolkit's verdict on a node (module_utils/toolkit_checks.py) through its module
container_toolkit_check, fed the dpkg-query, nvidia-ctk and docker_host_info results the role registers."""

import pytest
from ansible.module_utils.toolkit_checks import upstream_version
from ansible.modules import container_toolkit_check

from tests.module_harness import run_module
from tests.probe_results import ran

PACKAGES = ["nvidia-container-toolkit", "nvidia-container-toolkit-base"]
DAEMON = {"host_info": {"Runtimes": {"io.containerd.runc.v2": {}, "nvidia": {}, "runc": {}}, "DefaultRuntime": "runc"}}


def judge(**changes):
    args = {
        "node": "node-0",
        "packages": PACKAGES,
        "version": "1.17.8-1",
        "runtime_name": "nvidia",
        "default_runtime": False,
        "dpkg": ran(*(f"{package} installed 1.17.8-1" for package in PACKAGES)),
        "ctk": ran("NVIDIA Container Toolkit CLI version 1.17.8", "commit: f202b80a9b9d0db00d9b1d73c0128c8962c55f4d"),
        "docker_info": DAEMON,
        **changes,
    }
    result = run_module(container_toolkit_check, args)
    assert not result["failed"], result
    return result


def test_the_pinned_toolkit_and_a_daemon_with_its_runtime_pass_with_a_summary():
    result = judge()
    assert result["problems"] == []
    assert (
        result["summary"]
        == "node-0: nvidia-ctk 1.17.8, Docker runtimes io.containerd.runc.v2, nvidia, runc (default runc)"
    )


@pytest.mark.parametrize(
    ("version", "upstream"), [("1.17.8-1", "1.17.8"), ("1.18.0~rc.1-1", "1.18.0-rc.1"), ("1.17.8", "1.17.8")]
)
def test_nvidia_ctk_reports_the_upstream_part_of_the_package_version(version, upstream):
    assert upstream_version(version) == upstream


@pytest.mark.parametrize(
    ("changes", "problems"),
    [
        (
            {
                "dpkg": ran(
                    "nvidia-container-toolkit installed 1.17.7-1", "nvidia-container-toolkit-base deinstall 1.17.8-1"
                )
            },
            [
                "package nvidia-container-toolkit is 1.17.7-1, expected 1.17.8-1 (dpkg)",
                "package nvidia-container-toolkit-base is not installed, expected 1.17.8-1 (dpkg)",
            ],
        ),
        (
            {"ctk": {"rc": 2, "msg": "Error executing command.", "stdout": ""}},
            ["nvidia-ctk reports version (none), expected 1.17.8 (nvidia-ctk --version: not found or not executable)"],
        ),
        (
            {"ctk": ran("NVIDIA Container Toolkit CLI version 1.17.7")},
            ["nvidia-ctk reports version 1.17.7, expected 1.17.8 (nvidia-ctk --version: )"],
        ),
        (
            {"docker_info": {"failed": True, "msg": "Error connecting: Error while fetching server API version \n"}},
            ["docker info failed: Error connecting: Error while fetching server API version"],
        ),
        (
            {"docker_info": {"msg": "Error connecting"}},
            ["the running Docker daemon has no nvidia runtime (runtimes: ) (docker info)"],
        ),
        (
            {
                "docker_info": {"host_info": {"Runtimes": {"runc": {}}, "DefaultRuntime": "runc"}},
                "default_runtime": True,
            },
            [
                "the running Docker daemon has no nvidia runtime (runtimes: runc) (docker info)",
                "Docker default runtime is runc, expected nvidia (docker info)",
            ],
        ),
        (
            {"docker_info": {"host_info": dict(DAEMON["host_info"], DefaultRuntime="nvidia")}, "default_runtime": True},
            [],
        ),
    ],
)
def test_each_problem_is_named_by_node_value_and_expectation(changes, problems):
    assert judge(**changes)["problems"] == [f"node-0: {problem}" for problem in problems]
