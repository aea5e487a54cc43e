"""roles/container_toolkit's decisions (module_utils/toolkit_checks.py) through its modules: container_toolkit_target
(the version to install: the pin, or a newer one the node has, never a downgrade, in Debian's version order) and
container_toolkit_check (the verdict after the install), fed the dpkg-query, nvidia-ctk and docker_host_info results
the role registers."""

import subprocess

import pytest
from ansible.module_utils.toolkit_checks import debian_version_key, upstream_version
from ansible.modules import container_toolkit_check, container_toolkit_target

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


# Debian's version order, each row checked against dpkg itself below: (a, relation, b).
ORDER = [
    ("1.17.8-1", "lt", "1.18.0-1"),
    ("1.18.0-1", "lt", "1.18.1-1"),
    ("1.17.9-1", "lt", "1.17.10-1"),  # numbers, not text
    ("1.18.0~rc.1-1", "lt", "1.18.0-1"),  # a pre-release (~) before its release
    ("1.17.8-1", "lt", "1.18.0~rc.1-1"),
    ("1.18.0~rc.1-1", "lt", "1.18.0~rc.2-1"),
    ("1.0~~", "lt", "1.0~"),
    ("1.0~", "lt", "1.0"),
    ("1.0", "lt", "1.0a"),  # the end of a run before a letter
    ("1.0a", "lt", "1.0+"),  # letters before every other character
    ("1.0", "lt", "1.0.0"),
    ("1.0-1", "lt", "1.0-1.1"),
    ("1.0-1~ubuntu1", "lt", "1.0-1"),
    ("1.0-1ubuntu1", "lt", "1.0-1ubuntu1.1"),
    ("1.0-1", "lt", "1.0-1+deb12u1"),
    ("1.0-0a", "lt", "1.0-a"),
    ("1.0-0~", "lt", "1.0"),
    ("1.2-3-3", "lt", "1.2-3-4"),  # the revision is after the last hyphen
    ("9.9-1", "lt", "1:0.1-1"),  # the epoch first
    ("580.95.05-0ubuntu1", "lt", "580.173.02-0ubuntu1"),
    ("1.0", "eq", "1.0-0"),
    ("1.0", "eq", "0:1.0"),
    ("1.00", "eq", "1.0"),
]


@pytest.mark.parametrize(("a", "relation", "b"), ORDER)
def test_versions_sort_in_debians_order(a, relation, b):
    key_a, key_b = debian_version_key(a), debian_version_key(b)
    assert (key_a < key_b, key_a == key_b, key_a > key_b) == (relation == "lt", relation == "eq", False)


def test_the_order_table_is_dpkgs_own():
    wrong = [
        row
        for row in ORDER
        if subprocess.run(["dpkg", "--compare-versions", *row], capture_output=True, check=False).returncode != 0
    ]
    assert wrong == []


def target(installed):
    args = {"node": "node-0", "packages": PACKAGES, "version": "1.17.8-1", "dpkg": ran(*installed)}
    return run_module(container_toolkit_target, args)


@pytest.mark.parametrize(
    ("installed", "version", "kept", "msg"),
    [
        (
            [],
            "1.17.8-1",
            False,
            "the pin): nvidia-container-toolkit not installed -> 1.17.8-1, "
            "nvidia-container-toolkit-base not installed -> 1.17.8-1",
        ),
        (
            ["nvidia-container-toolkit installed 1.17.7-1", "nvidia-container-toolkit-base installed 1.17.7-1"],
            "1.17.8-1",
            False,
            "the pin): nvidia-container-toolkit 1.17.7-1 -> 1.17.8-1, "
            "nvidia-container-toolkit-base 1.17.7-1 -> 1.17.8-1",
        ),
        (
            ["nvidia-container-toolkit installed 1.17.8-1", "nvidia-container-toolkit-base installed 1.17.8-1"],
            "1.17.8-1",
            False,
            "the pin): every package is at it",
        ),
        (
            ["nvidia-container-toolkit installed 1.18.1-1", "nvidia-container-toolkit-base installed 1.18.1-1"],
            "1.18.1-1",
            True,
            "newer than container_toolkit_version=1.17.8-1: kept, never downgraded): every package is at it",
        ),
        (  # a pre-release of a newer toolkit is newer than the pin; one of the pin's own is older
            [
                "nvidia-container-toolkit installed 1.18.0~rc.1-1",
                "nvidia-container-toolkit-base installed 1.17.8~rc.1-1",
            ],
            "1.18.0~rc.1-1",
            True,
            "newer than container_toolkit_version=1.17.8-1: kept, never downgraded): "
            "nvidia-container-toolkit-base 1.17.8~rc.1-1 -> 1.18.0~rc.1-1",
        ),
        (  # a removed package's version is no installed one
            ["nvidia-container-toolkit deinstall 1.18.1-1", "nvidia-container-toolkit-base installed 1.17.8-1"],
            "1.17.8-1",
            False,
            "the pin): nvidia-container-toolkit not installed -> 1.17.8-1",
        ),
    ],
    ids=["fresh", "older", "at-the-pin", "newer", "newer-pre-release-and-mixed", "removed"],
)
def test_the_toolkit_is_installed_at_the_pin_unless_the_node_has_a_newer_one(installed, version, kept, msg):
    result = target(installed)
    assert not result["failed"], result
    assert (result["version"], result["kept"]) == (version, kept)
    assert result["ansible_facts"] == {"container_toolkit_installed_version": version}
    assert result["msg"] == f"node-0: toolkit {version} ({msg}"
    assert not result["changed"]


@pytest.mark.parametrize("module", [container_toolkit_target, container_toolkit_check])
@pytest.mark.parametrize("version", ["latest", "1.17.8-", "v1.17.8", "x:1.17.8-1", ""])
def test_a_pin_that_is_no_debian_version_is_refused_by_name(module, version):
    args = {"node": "node-0", "packages": PACKAGES, "version": version, "dpkg": ran()}
    if module is container_toolkit_check:
        args.update(runtime_name="nvidia", default_runtime=False, ctk=ran(), docker_info=DAEMON)
    result = run_module(module, args)
    assert result["failed"]
    assert result["msg"] == (
        f"node-0: container_toolkit_version={version!r}: not a Debian package version (rule: "
        "[epoch:]upstream[-revision], the upstream part starting with a digit, as apt installs it: e.g. 1.17.8-1)"
    )


def test_a_newer_toolkit_the_node_kept_passes_the_verdict_and_is_named_in_its_summary():
    result = judge(
        dpkg=ran(*(f"{package} installed 1.18.1-1" for package in PACKAGES)),
        ctk=ran("NVIDIA Container Toolkit CLI version 1.18.1"),
    )
    assert result["problems"] == []
    assert result["summary"].startswith("node-0: nvidia-ctk 1.18.1 (newer than the pin 1.17.8-1: kept), Docker")


def test_after_the_install_every_package_must_be_at_the_newest_version_installed():
    result = judge(
        dpkg=ran("nvidia-container-toolkit installed 1.18.1-1", "nvidia-container-toolkit-base installed 1.17.8-1"),
        ctk=ran("NVIDIA Container Toolkit CLI version 1.18.1"),
    )
    assert result["problems"] == ["node-0: package nvidia-container-toolkit-base is 1.17.8-1, expected 1.18.1-1 (dpkg)"]
