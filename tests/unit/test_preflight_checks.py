"""roles/spark_preflight's judgement (module_utils/preflight_checks.py) through its module spark_preflight_check,
fed the results its probes register on a node: every problem named by node, value and what was expected, every
node's problems and the differences between the nodes in one list."""

import base64

import pytest
from ansible.module_utils.preflight_checks import logind_order
from ansible.modules import spark_preflight_check

from tests.module_harness import run_module
from tests.probe_results import ran

SETTINGS = {
    "architecture": "aarch64",
    "check_gpu": True,
    "gpu_name": "NVIDIA GB10",
    "driver_branch": "580",
    "smi_command": "nvidia-smi",
    "min_memory_gib": 100,
    "model_cache_path": "/var/lib/spark-serve/huggingface",
    "min_free_disk_gib": 150,
    "check_remove_ipc": True,
    "logind_conf": "/etc/systemd/logind.conf",
    "logind_dropin_dirs": ["/etc/systemd/logind.conf.d", "/run/systemd/logind.conf.d"],
    "check_clock": True,
    "max_clock_offset_s": 1.0,
    "check_port": True,
    "service_port": 8000,
    "engine_project": "spark-serve",
    "check_nic": True,
    "roce_netdev": "enp1s0f1np1",
    "ibdev2netdev_command": "ibdev2netdev",
}
NOT_FOUND = {"rc": 2, "msg": "Error executing command.", "stdout": "", "stdout_lines": []}
DROPIN = "/etc/systemd/logind.conf.d/spark-serve.conf"
ENGINE_ID = "4f1c" * 16


def read(*files):
    """A slurp loop's results: (item, text) read, (item, None) unreadable."""
    return [
        {"item": item, "content": base64.b64encode(text.encode()).decode()} if text is not None else {"item": item}
        for item, text in files
    ]


def probes(**changes):
    """A healthy DGX Spark: GB10 on 580, 121.6 GiB, 1 TiB free, RemoveIPC=no, clock in step, port free, CX-7 mapped."""
    return {
        "architecture": "aarch64",
        "proc": read(
            ("/proc/sys/kernel/osrelease", "6.11.0-1016-nvidia\n"), ("/proc/meminfo", "MemTotal: 127535896 kB\n")
        ),
        "smi": ran("NVIDIA GB10, 580.95.05"),
        "df": ran("           Avail Mounted on", "1099511627776 /", "1099511627776 /var"),
        "logind": read(("/etc/systemd/logind.conf", "[Login]\n#RemoveIPC=yes\n"), (DROPIN, "[Login]\nRemoveIPC=no\n")),
        "date": ran("1000.5"),
        "controller_before": 1000.0,
        "controller_after": 1001.0,
        "listeners": ran(),
        "engine": {"skipped": True},
        "netdev": {"stat": {"exists": True}},
        "ibdev": ran("rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)"),
        **changes,
    }


def judge(settings=None, **changes):
    args = {"stage": "node", "node": "node-0", "settings": dict(SETTINGS, **(settings or {})), **probes(**changes)}
    result = run_module(spark_preflight_check, args)
    assert not result["failed"], result
    return result


def test_a_healthy_node_has_its_facts_and_no_problem():
    result = judge()
    assert result["problems"] == []
    assert result["facts"] == {
        "architecture": "aarch64",
        "kernel": "6.11.0-1016-nvidia",
        "gpus": [{"name": "NVIDIA GB10", "driver_version": "580.95.05"}],
        "driver_version": "580.95.05",
        "smi_error": "",
        "memory_gib": 121.6,
        "model_cache_path": "/var/lib/spark-serve/huggingface",
        "model_cache_mount": "/var",
        "model_cache_free_gib": 1024.0,
        "remove_ipc": "no",
        "remove_ipc_source": DROPIN,
        "clock_offset_s": 0,
        "port_listeners": [],
        "roce_netdev_present": True,
        "nic_layout": ["rocep1s0f1 port 1 ==> enp1s0f1np1"],
        "ibdev2netdev_error": "",
    }


ENGINE_LISTENS = {
    "listeners": ran('LISTEN 0 4096 0.0.0.0:8000 0.0.0.0:* users:(("vllm",pid=4242,fd=12))'),
    "engine": ran(ENGINE_ID),
    "listener_cgroups": read(("4242", f"0::/system.slice/docker-{ENGINE_ID}.scope\n")),
}


@pytest.mark.parametrize(
    ("changes", "settings", "problems"),
    [
        ({"architecture": "x86_64"}, {}, ["architecture x86_64, expected aarch64 (uname -m)"]),
        (
            {"smi": NOT_FOUND},
            {},
            [
                "no GPU reported (nvidia-smi: not found or not executable), expected NVIDIA GB10 on driver branch 580 "
                "(nvidia-smi)"
            ],
        ),
        (
            {"smi": ran(rc=9, stderr="NVIDIA-SMI has failed because it couldn't communicate with the driver.\n")},
            {"smi_command": "/usr/bin/nvidia-smi"},
            [
                "no GPU reported (/usr/bin/nvidia-smi: NVIDIA-SMI has failed because it couldn't communicate with the "
                "driver.), expected NVIDIA GB10 on driver branch 580 (nvidia-smi)"
            ],
        ),
        (
            {"smi": ran()},
            {},
            ["no GPU reported (nvidia-smi: no output), expected NVIDIA GB10 on driver branch 580 (nvidia-smi)"],
        ),
        (
            {"smi": ran("NVIDIA GB10, 570.195.03", "NVIDIA H100, 580.95.05")},
            {},
            [
                "driver 570.195.03 is not on branch 580 (nvidia-smi)",
                'GPU is "NVIDIA H100", expected "NVIDIA GB10" (nvidia-smi)',
            ],
        ),
        (
            {"proc": read(("/proc/sys/kernel/osrelease", "6.8.0\n"), ("/proc/meminfo", "MemTotal: 16777216 kB\n"))},
            {},
            ["memory 16.0 GiB, expected at least 100.0 GiB (/proc/meminfo MemTotal)"],
        ),
        (
            {"proc": read(("/proc/sys/kernel/osrelease", "6.8.0\n"), ("/proc/meminfo", None))},
            {},
            ["memory 0.0 GiB, expected at least 100.0 GiB (/proc/meminfo MemTotal)"],
        ),
        (
            {"df": ran(rc=1, stderr="df: /: Permission denied\n")},
            {},
            ["free disk for /var/lib/spark-serve/huggingface could not be measured (df: df: /: Permission denied)"],
        ),
        (
            {"df": ran("     Avail Mounted on", "53687091200 /")},
            {"model_cache_path": "/srv/hf"},
            ["50.0 GiB free on / for /srv/hf, expected at least 150.0 GiB (df)"],
        ),
        (
            {"logind": read(("/etc/systemd/logind.conf", "[Login]\n"))},
            {},
            [
                "logind RemoveIPC=yes (systemd default), expected no: set RemoveIPC=no under [Login] in a .conf file "
                "in /etc/systemd/logind.conf.d (logind.conf)"
            ],
        ),
        (
            {
                "logind": read(
                    ("/etc/systemd/logind.conf", "RemoveIPC=no\n"),
                    (DROPIN, None),
                    ("/run/systemd/logind.conf.d/x.conf", " RemoveIPC = Yes \n"),
                )
            },
            {},
            [
                "logind RemoveIPC=Yes (/run/systemd/logind.conf.d/x.conf), expected no: set RemoveIPC=no under "
                "[Login] in a .conf file in /etc/systemd/logind.conf.d (logind.conf)"
            ],
        ),
        ({"logind": read((DROPIN, "RemoveIPC=Off\n"))}, {}, []),
        ({"date": NOT_FOUND}, {}, ["clock could not be read (date: not found or not executable)"]),
        ({"date": ran("Thu Jan  1 00:16:40 UTC 1970")}, {}, ["clock could not be read (date: )"]),
        ({"date": ran("1003.25")}, {}, ["clock is 2.25 s ahead of the controller, allowed 1.0 s (date)"]),
        (
            {"date": ran("997.5")},
            {"max_clock_offset_s": 2},
            ["clock is 2.5 s behind the controller, allowed 2.0 s (date)"],
        ),
        ({"date": ran("1001.9")}, {}, []),
        (
            {
                "listeners": ran(
                    'LISTEN 0 5 0.0.0.0:8000 0.0.0.0:* users:(("python3",pid=77,fd=3),("python3",pid=77,fd=4))'
                )
            },
            {},
            ["port 8000 is already in use by python3 pid 77, not by the spark-serve engine (ss -ltnp)"],
        ),
        (
            {"listeners": ran("LISTEN 0 5 0.0.0.0:8000 0.0.0.0:*")},
            {},
            [
                "port 8000 is already in use by LISTEN 0 5 0.0.0.0:8000 0.0.0.0:*, not by the spark-serve engine "
                "(ss -ltnp)"
            ],
        ),
        (ENGINE_LISTENS, {}, []),
        (
            dict(ENGINE_LISTENS, listener_cgroups=read(("4242", "0::/user.slice/session-3.scope\n"))),
            {},
            ["port 8000 is already in use by vllm pid 4242, not by the spark-serve engine (ss -ltnp)"],
        ),
        (
            {
                "netdev": {"stat": {"exists": False}},
                "ibdev": ran("mlx5_0 port 1 ==> eth0 (Down)", "b port 1 ==> enp1s0f1np10 (Up)"),
            },
            {},
            [
                "RoCE netdev enp1s0f1np1 is missing (/sys/class/net)",
                "no RDMA device is mapped to enp1s0f1np1 (ibdev2netdev: b port 1 ==> enp1s0f1np10; "
                "mlx5_0 port 1 ==> eth0)",
            ],
        ),
        ({"ibdev": ran()}, {}, ["no RDMA device is mapped to enp1s0f1np1 (ibdev2netdev: no devices)"]),
        ({"ibdev": NOT_FOUND}, {}, ["NIC layout unknown: ibdev2netdev: not found or not executable (ibdev2netdev)"]),
    ],
)
def test_each_problem_is_named_by_node_value_and_expectation(changes, settings, problems):
    assert judge(settings, **changes)["problems"] == [f"node-0: {problem}" for problem in problems]


def test_every_problem_of_a_node_at_once_in_a_fixed_order_then_the_memory_guards():
    problems = judge(
        architecture="x86_64",
        smi=ran("NVIDIA GB10, 570.1"),
        proc=read(("/proc/meminfo", "MemTotal: 1048576 kB\n")),
        df=ran(rc=1),
        logind=[],
        date=ran("990"),
        listeners=ran('users:(("nginx",pid=1,fd=6))'),
        netdev={},
        ibdev=ran(),
        memory_problem="node-0: 12.0 GiB available, the engine takes 110.0 GiB",
    )["problems"]
    assert [problem.split(" (")[0].split(",")[0] for problem in problems] == [
        "node-0: architecture x86_64",
        "node-0: driver 570.1 is not on branch 580",
        "node-0: memory 1.0 GiB",
        "node-0: free disk for /var/lib/spark-serve/huggingface could not be measured",
        "node-0: logind RemoveIPC=yes",
        "node-0: clock is 10.0 s behind the controller",
        "node-0: port 8000 is already in use by nginx pid 1",
        "node-0: RoCE netdev enp1s0f1np1 is missing",
        "node-0: no RDMA device is mapped to enp1s0f1np1",
        "node-0: 12.0 GiB available",
    ]


def test_a_check_switched_off_judges_nothing():
    off = {"check_gpu": False, "min_memory_gib": 0, "min_free_disk_gib": 0, "check_remove_ipc": False}
    off |= {"check_clock": False, "check_port": False, "check_nic": False}
    result = judge(off, smi=NOT_FOUND, df=ran(rc=1), logind=[], date={"skipped": True}, ibdev={"skipped": True})
    result |= judge(off, listeners=ran("LISTEN 0 5 0.0.0.0:8000 0.0.0.0:*"), netdev={"skipped": True})
    assert result["problems"] == []
    assert result["facts"]["clock_offset_s"] == 0


def facts(kernel="6.11.0-1016-nvidia", driver="580.95.05", layout=("rocep1s0f1 port 1 ==> enp1s0f1np1",), **changes):
    found = judge(**changes)["facts"]
    return dict(found, kernel=kernel, driver_version=driver, nic_layout=list(layout))


def report(hosts, found, problems=None, compare=True):
    args = {"stage": "report", "hosts": hosts, "facts": found, "problems": problems or {node: [] for node in found}}
    result = run_module(spark_preflight_check, dict(args, compare_nodes=compare))
    assert not result["failed"], result
    return result


def test_the_report_lists_every_nodes_problems_then_what_differs_between_them():
    found = {
        "node-0": facts(),
        "node-1": facts(driver="580.82.07", layout=()),
        "node-2": facts(kernel="6.11.0-1016-NVIDIA"),
    }
    problems = {"node-0": [], "node-1": ["node-1: memory 64.0 GiB, ..."], "node-2": ["node-2: clock ..."]}
    result = report(["node-0", "node-9", "node-1", "node-2"], found, problems)
    assert result["problems"] == [
        "node-9: not checked (unreachable or failed before the preflight ran)",
        "node-1: memory 64.0 GiB, ...",
        "node-2: clock ...",
        "node-0, node-1, node-2: driver version differs between the nodes: node-0 580.95.05, node-1 580.82.07, "
        "node-2 580.95.05 (nvidia-smi)",
        "node-0, node-1, node-2: NIC layout differs between the nodes: node-0 rocep1s0f1 port 1 ==> enp1s0f1np1, "
        "node-1 (none), node-2 rocep1s0f1 port 1 ==> enp1s0f1np1 (ibdev2netdev)",
    ]
    assert result["summary"] == [
        f"{node}: aarch64, kernel {found[node]['kernel']}, NVIDIA GB10 driver {found[node]['driver_version']}, "
        "121.6 GiB, 1024.0 GiB free, clock 0 s"
        for node in ("node-0", "node-1", "node-2")
    ]


@pytest.mark.parametrize(
    ("hosts", "compare"), [(["node-0", "node-1"], False), (["node-0"], True), (["node-0", "node-1"], True)]
)
def test_the_nodes_are_compared_only_when_asked_and_when_two_were_checked(hosts, compare):
    found = {"node-0": facts(), "node-1": facts(kernel="6.8.0-1030-nvidia")}
    found = {host: found[host] for host in hosts}
    differs = compare and len(hosts) > 1
    assert report(hosts, found, compare=compare)["problems"] == differs * [
        "node-0, node-1: kernel differs between the nodes: node-0 6.11.0-1016-nvidia, node-1 6.8.0-1030-nvidia "
        "(/proc/sys/kernel/osrelease)"
    ]


def test_a_node_without_a_gpu_or_a_clock_is_summarised_as_such():
    found = {"node-0": judge(smi=NOT_FOUND, date=NOT_FOUND)["facts"]}
    assert report(["node-0"], found)["summary"] == [
        "node-0: aarch64, kernel 6.11.0-1016-nvidia, no GPU driver -, 121.6 GiB, 1024.0 GiB free, clock None s"
    ]


@pytest.mark.parametrize(
    ("found", "order"),
    [
        ([], ["/etc/systemd/logind.conf"]),
        (
            [
                "/run/systemd/logind.conf.d/b.conf",
                "/etc/systemd/logind.conf.d/a.conf",
                "/etc/systemd/logind.conf.d/C.conf",
            ],
            [
                "/etc/systemd/logind.conf",
                "/etc/systemd/logind.conf.d/a.conf",
                "/run/systemd/logind.conf.d/b.conf",
                "/etc/systemd/logind.conf.d/C.conf",
            ],
        ),
        (
            ["/run/systemd/logind.conf.d/a.conf", "/etc/systemd/logind.conf.d/a.conf", "/srv/elsewhere/z.conf"],
            ["/etc/systemd/logind.conf", "/etc/systemd/logind.conf.d/a.conf"],
        ),
    ],
)
def test_logind_files_count_in_systemds_order_and_an_earlier_directory_shadows_a_later_one(found, order):
    assert logind_order(found, SETTINGS["logind_conf"], SETTINGS["logind_dropin_dirs"]) == order


def test_a_shadowed_drop_in_says_nothing_about_remove_ipc():
    shadowed = read(
        (DROPIN, "[Login]\nRemoveIPC=no\n"), ("/run/systemd/logind.conf.d/spark-serve.conf", "RemoveIPC=yes\n")
    )
    assert judge(logind=shadowed)["facts"]["remove_ipc_source"] == DROPIN
