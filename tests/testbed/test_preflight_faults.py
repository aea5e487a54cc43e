"""Preflight faults on the two-node test bed: a wrong driver branch on one node, and kernel/driver versions
that differ between the nodes, must stop the prepare play (spark_preflight -> nvidia_driver ->
container_toolkit) with ONE failure naming node and fact, before either node is changed.

The nodes are first made to look like DGX OS (molecule/shared/dgx_os.yml: driver 580, RDMA tools,
logind RemoveIPC=no); every fault is undone afterwards and the nodes are put back as they were found.
"""

import re
import textwrap

import pytest

from tests.runner import ansible_playbook_argv
from tests.testbed.helpers import INSTANCE, ROOT, assert_never_ran, node_exec, run

pytestmark = pytest.mark.testbed

APT = f"http://10.253.{16 * int(INSTANCE)}.3/apt"
DEB = {
    "580": "nvidia-driver-580-open_580.173.02-0ubuntu1_all.deb",
    "570": "nvidia-driver-570-open_570.195.03-0ubuntu1_all.deb",
}
DRIVER_PACKAGES = ["nvidia-driver-580-open", "nvidia-driver-570-open"]
BASELINE_PACKAGES = ["nvidia-driver-580-open", "spark-testbed-rdma"]
LOGIND_DROPIN = "/etc/systemd/logind.conf.d/spark-serve.conf"
TESTBED_SOURCE_ONLY = (
    "-o Dir::Etc::sourcelist=/tmp/testbed-apt.list -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0"
)
APT_INSTALL = "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades --allow-change-held-packages"

# The future prepare play of site.yml, in its order: preflight first, then the roles that change nodes.
PREPARE_PLAY = textwrap.dedent("""\
    - name: Prepare the Spark nodes
      hosts: spark_nodes
      gather_facts: false
      roles:
        - spark_preflight
        - nvidia_driver
        - container_toolkit
    """)

# Everything the node-changing roles would touch: if any of it moves, the preflight did not stop them.
NODE_STATE = (
    "cat /etc/docker/daemon.json; echo ---; "
    "cat /etc/apt/preferences.d/spark-serve-nvidia-driver.pref 2>&1; echo ---; "
    "ls /etc/apt/sources.list.d/; echo ---; "
    "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev} ${db:Status-Want}\\n' "
    "'nvidia-*' spark-testbed-rdma 2>&1"
)


def sh(index, command, timeout=300):
    rc, out = node_exec(index, command, timeout=timeout)
    assert rc == 0, f"node-{index}: {command}\n{out}"
    return out


def packages(index):
    """{package: (version, selection)} of the installed packages the tests touch."""
    _, out = node_exec(
        index,
        "dpkg-query -W -f '${Package} ${Version} ${db:Status-Status} ${db:Status-Want}\\n' "
        + " ".join(DRIVER_PACKAGES + BASELINE_PACKAGES),
    )
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] == "installed":
            found[parts[0]] = (parts[1], parts[3])
    return found


def install_deb(index, branch):
    """Install one driver branch's package in place of the other's. apt 3's solver keeps a held package it is not
    told to remove (the role holds the driver), so the other branch's removal is asked for by name (`pkg-`)."""
    other = next(b for b in DEB if b != branch)
    # apt fetches a package that its index also lists from the repository: refresh the index first, or a
    # repository rebuilt since the node's last update fails with "Hash Sum mismatch". Only the test bed's own
    # source, as the driver role does: the node's distribution source is unreachable (87 s of timeouts per update).
    sh(
        index,
        f"curl -fsS -o /tmp/{DEB[branch]} {APT}/{DEB[branch]} && "
        f"echo 'deb [trusted=yes] {APT} ./' > /tmp/testbed-apt.list && apt-get update -qq {TESTBED_SOURCE_ONLY} && "
        f"{APT_INSTALL} /tmp/{DEB[branch]} nvidia-driver-{other}-open-",
    )


def run_prepare_play(tmp_path, *extra):
    play = tmp_path / "prepare_nodes.yml"
    play.write_text(PREPARE_PLAY)
    return run(
        ansible_playbook_argv("-i", "inventories/testbed-pair", str(play), *extra),
        env={"ANSIBLE_ROLES_PATH": str(ROOT / "roles")},
        timeout=900,
    )


def assert_failed_once_before_any_change(rc, out, before):
    assert rc != 0, out
    # One failure (the run_once assert), fatal for the play: no node-changing role started.
    assert out.count("fatal: [") == 1, out
    assert_never_ran(out, "nvidia_driver")
    assert_never_ran(out, "container_toolkit")
    recap = dict(re.findall(r"^(node-\d)\s+:\s+ok=\d+\s+changed=(\d+)", out, re.M))
    assert recap == {"node-0": "0", "node-1": "0"}, out
    assert [node_exec(i, NODE_STATE)[1] for i in (0, 1)] == before


@pytest.fixture(scope="module")
def dgx_nodes(testbed):
    """Both nodes like DGX OS (driver 580, RDMA tools, RemoveIPC=no); afterwards as they were found."""
    found = {i: packages(i) for i in (0, 1)}
    dropin = {i: node_exec(i, f"test -e {LOGIND_DROPIN}")[0] == 0 for i in (0, 1)}
    dropin_dir = {i: node_exec(i, f"test -d {LOGIND_DROPIN.rsplit('/', 1)[0]}")[0] == 0 for i in (0, 1)}
    rc, out = run(ansible_playbook_argv("-i", "inventories/testbed-pair", "molecule/shared/dgx_os.yml"), timeout=900)
    assert rc == 0, out
    yield
    for i in (0, 1):
        now = packages(i)
        for package, (version, selection) in found[i].items():
            if now.get(package, (None,))[0] != version:
                sh(
                    i,
                    f"{APT_INSTALL} {package}={version} || "
                    f"{APT_INSTALL} /tmp/{DEB['580' if '580' in package else '570']}",
                )
            sh(i, f"echo '{package} {selection}' | dpkg --set-selections")
        added = [p for p in now if p not in found[i]]
        if added:
            sh(i, f"DEBIAN_FRONTEND=noninteractive apt-get purge -y -q --allow-change-held-packages {' '.join(added)}")
        if not dropin[i]:
            sh(i, f"rm -f {LOGIND_DROPIN}")
        if not dropin_dir[i]:
            sh(i, f"rmdir --ignore-fail-on-non-empty {LOGIND_DROPIN.rsplit('/', 1)[0]}")
        assert packages(i) == found[i]


def test_wrong_driver_branch_on_one_node_fails_before_any_change(dgx_nodes, tmp_path):
    install_deb(1, "570")  # replaces nvidia-driver-580-open (Conflicts/Replaces), like a wrong DGX OS image
    try:
        before = [node_exec(i, NODE_STATE)[1] for i in (0, 1)]
        rc, out = run_prepare_play(tmp_path)
        assert "node-1: driver 570.195.03 is not on branch 580 (nvidia-smi)" in out, out
        assert (
            "node-0, node-1: driver version differs between the nodes: node-0 580.173.02, "
            "node-1 570.195.03 (nvidia-smi)"
        ) in out, out
        assert "node-0: driver" not in out, out
        assert "spark_preflight: 2 problem(s), nothing was changed on any node" in out, out
        assert_failed_once_before_any_change(rc, out, before)
    finally:
        install_deb(1, "580")
    assert "580.173.02" in sh(1, "nvidia-smi --query-gpu=driver_version --format=csv,noheader")


def test_kernel_and_driver_mismatch_between_nodes_fails_before_any_change(dgx_nodes, tmp_path):
    # node-1 boots another kernel (what uname -r / osrelease say) and a different 580 driver build.
    sh(1, "echo 6.8.0-1030-nvidia > /tmp/osrelease && mount --bind /tmp/osrelease /proc/sys/kernel/osrelease")
    sh(1, "cp -p /usr/bin/nvidia-smi /tmp/nvidia-smi.orig && sed -i 's/580\\.173\\.02/580.95.05/g' /usr/bin/nvidia-smi")
    try:
        kernel = sh(0, "cat /proc/sys/kernel/osrelease").strip()
        before = [node_exec(i, NODE_STATE)[1] for i in (0, 1)]
        rc, out = run_prepare_play(tmp_path)
        assert (
            f"node-0, node-1: kernel differs between the nodes: node-0 {kernel}, node-1 6.8.0-1030-nvidia "
            "(/proc/sys/kernel/osrelease)"
        ) in out, out
        assert (
            "node-0, node-1: driver version differs between the nodes: node-0 580.173.02, node-1 580.95.05 (nvidia-smi)"
        ) in out, out
        assert "is not on branch" not in out, out  # both drivers are on 580: only the mismatch is wrong
        assert "spark_preflight: 2 problem(s), nothing was changed on any node" in out, out
        assert_failed_once_before_any_change(rc, out, before)
    finally:
        node_exec(1, "umount /proc/sys/kernel/osrelease")
        node_exec(1, "test -f /tmp/nvidia-smi.orig && cp -p /tmp/nvidia-smi.orig /usr/bin/nvidia-smi")
    assert sh(1, "cat /proc/sys/kernel/osrelease").strip() == kernel
    sh(1, "dpkg --verify nvidia-driver-580-open")  # the stand-in nvidia-smi is the packaged one again


def test_problems_on_both_nodes_are_listed_in_one_failure(dgx_nodes, tmp_path):
    # node-0: another process already serves on the API port, while our own engine may run on the node and listen
    # on its port (the served pair: that listener is ours and no problem); node-1: logind would remove IPC.
    port = 8011
    pid = sh(0, f"setsid python3 -m http.server {port} >/dev/null 2>&1 </dev/null & echo $!").strip()
    sh(1, f"mv {LOGIND_DROPIN} /tmp/spark-serve.conf")
    try:
        listening = f"ss -Hltnp 'sport = :{port}' | grep -q 'pid={pid},'"
        sh(0, f"for i in $(seq 50); do {listening} && exit 0; sleep 0.2; done; exit 1")
        before = [node_exec(i, NODE_STATE)[1] for i in (0, 1)]
        rc, out = run_prepare_play(tmp_path, "-e", f"spark_preflight_service_port={port}")
        assert re.search(
            rf"node-0: port {port} is already in use by python3 pid {pid}, not by the spark-serve engine "
            r"\(ss -ltnp\)",
            out,
        ), out
        assert (
            "node-1: logind RemoveIPC=yes (systemd default), expected no: set RemoveIPC=no under [Login] in a "
            ".conf file in /etc/systemd/logind.conf.d (logind.conf)"
        ) in out, out
        assert "spark_preflight: 2 problem(s), nothing was changed on any node" in out, out
        assert_failed_once_before_any_change(rc, out, before)
    finally:
        node_exec(0, f"kill {pid}")
        node_exec(1, f"mv /tmp/spark-serve.conf {LOGIND_DROPIN}")
    assert node_exec(0, f"ss -Hltn 'sport = :{port}' | grep -q .")[0] != 0
