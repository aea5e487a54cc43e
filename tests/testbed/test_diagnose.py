"""diagnose.yml on the served test-bed pair: three staged situations on the real engine, each with its verdict."""

import re
import time

import pytest

from tests.testbed import service_faults as sf
from tests.testbed.helpers import node_exec, playbook

pytestmark = pytest.mark.testbed
COMPOSE = "docker compose -p spark-serve --project-directory /etc/spark-serve"


def diagnose(words):
    rc, out = playbook(
        "playbooks/diagnose.yml", "inventories/testbed-pair", "-e", f"spark_serve_diagnose_words={words}"
    )
    assert rc == 0, out[-4000:]
    return re.findall(r"VERDICT ([\w-]+)", out), out


def test_a_prompt_shorter_than_one_cache_block_never_hits(served_pair):
    verdicts, out = diagnose(20)
    print(f"\n[diagnose, 20-word prompt] {verdicts}")
    assert verdicts[0] == "block-larger-than-request", out[-3000:]
    assert "effective cache block 128 tokens (engine /metrics cache_config_info) > the whole request" in out


def restart_by_hand():
    """Restart the pair by hand (as after a reboot or an edit), bypassing site.yml's warm-up and gate: worker first,
    then the head; returns once the head's /health says 200."""
    for index in (1, 0):
        rc, out = node_exec(index, f"{COMPOSE} down --timeout 10 && {COMPOSE} up -d")
        assert rc == 0, out
    deadline = time.monotonic() + 300
    while sf.health() != 200 and time.monotonic() < deadline:
        time.sleep(2)
    assert sf.health() == 200


def test_prefix_caching_off_explains_a_slow_repeat(served_pair):
    """Alone proves the diagnosis reads what runs, not what was rendered: a pair restarted by hand with prefix
    caching off in its compose files is named for it."""
    # Someone turned prefix caching off by hand in both ranks' compose files and restarted the pair.
    for index in (0, 1):
        rc, out = node_exec(
            index,
            "cp /etc/spark-serve/compose.yaml /tmp/compose.yaml.orig && "
            "sed -i 's/\\(^ *command: \\[.*\\)\\]$/\\1, \"--no-enable-prefix-caching\"]/' "
            "/etc/spark-serve/compose.yaml && grep -q -- --no-enable-prefix-caching /etc/spark-serve/compose.yaml",
        )
        assert rc == 0, out
    try:
        restart_by_hand()
        with sf.post("/v1/chat/completions", sf.chat("warm up")) as response:  # the slowness is not the JIT's
            assert response.status == 200
        verdicts, out = diagnose(400)
    finally:
        for index in (0, 1):
            node_exec(
                index, "test -f /tmp/compose.yaml.orig && mv /tmp/compose.yaml.orig /etc/spark-serve/compose.yaml"
            )
    print(f"\n[diagnose with prefix caching off] {verdicts}")
    assert verdicts[0] == "prefix-caching-off", out[-3000:]


def test_first_request_after_a_manual_restart_pays_the_warm_up(served_pair):
    """Alone proves the no-warm-up verdict: a restart by hand skips the requests a staged start sends before ready,
    so the first request pays the warm-up, and the diagnosis says so."""
    # The restart by hand also brings back the shipped compose files of the test above.
    restart_by_hand()
    verdicts, out = diagnose(400)
    print(f"\n[diagnose after a manual restart] {verdicts}")
    assert verdicts[0] == "no-warmup", out[-3000:]
    assert "vllm:request_success_total was 0" in out
    _, cmd = node_exec(0, "docker inspect -f '{{json .Config.Cmd}}' spark-serve-rank0")
    assert "--no-enable-prefix-caching" not in cmd, "the shipped compose files serve again"
