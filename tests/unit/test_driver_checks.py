"""roles/nvidia_driver's verdict on a node (module_utils/driver_checks.py) through its module nvidia_driver_check, fed
the dpkg-query and nvidia-smi results the role registers: every problem names node, value and what was expected."""

import pytest
from ansible.modules import nvidia_driver_check

from tests.module_harness import run_module
from tests.probe_results import ran

PACKAGE = "nvidia-driver-580-open"
HINT = " - the driver package changed in this run: reboot the node to load it"


def judge(**changes):
    args = {
        "node": "node-0",
        "package": PACKAGE,
        "branch": "580",
        "version": "",
        "expected_gpu": "NVIDIA GB10",
        "package_changed": False,
        "dpkg": ran("installed 580.95.05-0ubuntu1"),
        "smi": ran("NVIDIA GB10, 580.95.05"),
        **changes,
    }
    result = run_module(nvidia_driver_check, args)
    assert not result["failed"], result
    return result


def test_a_driver_on_the_branch_with_the_expected_gpu_passes_with_a_summary():
    result = judge()
    assert result["problems"] == []
    assert result["summary"] == "node-0: NVIDIA GB10, driver 580.95.05 (nvidia-driver-580-open 580.95.05-0ubuntu1)"


@pytest.mark.parametrize(
    ("changes", "problems"),
    [
        (
            {"dpkg": ran(rc=1, stderr=f"dpkg-query: no packages found matching {PACKAGE}")},
            [f"package {PACKAGE} is not installed (dpkg)"],
        ),
        ({"dpkg": ran("config-files 580.95.05-0ubuntu1")}, [f"package {PACKAGE} is not installed (dpkg)"]),
        ({"dpkg": ran("installed 5800.1-1")}, [f"package {PACKAGE} 5800.1-1 is not on branch 580 (dpkg)"]),
        (
            {"version": "580.126.09-0ubuntu1"},
            [f"package {PACKAGE} is 580.95.05-0ubuntu1, expected 580.126.09-0ubuntu1 (dpkg)"],
        ),
        ({"version": "580.95.05-0ubuntu1"}, []),
        (
            {"smi": {"rc": 2, "msg": "Error executing command.", "stdout_lines": []}},
            ["nvidia-smi reports no GPU (rc 2: not found or not executable)"],
        ),
        (
            {
                "smi": ran(
                    rc=9, stderr="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
                )
            },
            [
                "nvidia-smi reports no GPU (rc 9: NVIDIA-SMI has failed because it couldn't communicate with the "
                f"NVIDIA driver.){HINT}"
            ],
        ),
        ({"smi": ran("No devices were found")}, ["nvidia-smi reports no GPU (rc 0: )"]),
        (
            {"smi": ran("NVIDIA GB10, 570.195.03", "NVIDIA H100 80GB HBM3, 580.95.05")},
            [
                "driver 570.195.03 is not on branch 580 (nvidia-smi)",
                'GPU is "NVIDIA H100 80GB HBM3", expected "NVIDIA GB10" (nvidia-smi)',
            ],
        ),
    ],
)
def test_each_problem_is_named_by_node_value_and_expectation(changes, problems):
    changed = any(HINT in problem for problem in problems)
    assert judge(package_changed=changed, **changes)["problems"] == [f"node-0: {problem}" for problem in problems]


def test_the_package_and_the_running_driver_are_judged_together_with_the_reboot_hint():
    result = judge(package_changed=True, dpkg=ran("installed 570.195.03-0ubuntu1"), smi=ran("NVIDIA GB10, 570.195.03"))
    assert result["problems"] == [
        f"node-0: package {PACKAGE} 570.195.03-0ubuntu1 is not on branch 580 (dpkg)",
        f"node-0: driver 570.195.03 is not on branch 580 (nvidia-smi){HINT}",
    ]
    assert result["summary"] == "node-0: NVIDIA GB10, driver 570.195.03 (nvidia-driver-580-open 570.195.03-0ubuntu1)"
