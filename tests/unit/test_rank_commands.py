"""Every shell command the staged start sends to a node (module_utils/rank_commands.py) parses as the node runs it,
inside `timeout N sh -c '<command>'` (Rank.run), with names that need quoting quoted."""

import shlex
import subprocess

import pytest
from ansible.module_utils import rank_commands as commands

COMPOSE = commands.compose("spark-serve", "/etc/spark serve")  # a folder with a space must stay one word
COMMANDS = {
    "down": commands.down(COMPOSE, 5),
    "up": commands.up(COMPOSE),
    "remove_container": commands.remove_container("spark-serve-rank0"),
    "listeners": commands.listeners([8000, 29501]),
    "container_pids": commands.container_pids(),
    "meminfo": commands.meminfo(),
    "wipe_cache": commands.wipe_cache("/var/lib/spark-serve/vllm cache/0123456789abcdef"),
    "df_pings": commands.df_pings(["10.0.0.1", "10.0.0.2"], 8972),
    "tcp_connect": commands.tcp_connect("10.0.0.1", 29501),
    "observe_head": commands.observe("spark-serve-rank0", 8000, "enp1s0f1np1", 400),
    "observe_worker": commands.observe("spark-serve-rank1", None, None, 400),
    "evidence": commands.evidence("spark-serve-rank0", "/usr/local/bin/py-spy", "=== it's the log ===", 200),
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_parses_as_the_node_runs_it(name):
    command = COMMANDS[name]
    for text in (command, f"timeout 60 sh -c {shlex.quote(command)}"):
        check = subprocess.run(["sh", "-n", "-c", text], capture_output=True, text=True, timeout=10)
        assert check.returncode == 0, (name, text, check.stderr)


def test_names_that_need_quoting_stay_one_word():
    assert "'/etc/spark serve'" in COMMANDS["down"] and "'/etc/spark serve'" in COMMANDS["up"]
    assert "'/var/lib/spark-serve/vllm cache/0123456789abcdef' -mindepth 1 -delete" in COMMANDS["wipe_cache"]
    assert "/sys/class/net/enp1s0f1np1/mtu" in COMMANDS["observe_head"] and "echo -;" in COMMANDS["observe_worker"]
    assert "http://127.0.0.1:8000/health" in COMMANDS["observe_head"]
    assert "printf -" in COMMANDS["observe_worker"]
