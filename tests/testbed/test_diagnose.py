"""diagnose.yml on the served test-bed pair: three staged situations on the real engine, each with its verdict."""

import json
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
    assert "effective cache block 128 tokens > the whole request" in out


def test_first_request_after_a_manual_restart_pays_the_warm_up(served_pair):
    # Restarted by hand (as after a reboot), bypassing site.yml's warm-up and gate: worker first, then the head.
    for index in (1, 0):
        rc, out = node_exec(index, f"{COMPOSE} down --timeout 10 && {COMPOSE} up -d")
        assert rc == 0, out
    deadline = time.monotonic() + 300
    while sf.health() != 200 and time.monotonic() < deadline:
        time.sleep(2)
    assert sf.health() == 200
    verdicts, out = diagnose(400)
    print(f"\n[diagnose after a manual restart] {verdicts}")
    assert verdicts[0] == "no-warmup", out[-3000:]
    assert "vllm:request_success_total was 0" in out


def test_prefix_caching_off_explains_a_slow_repeat(served_pair):
    overrides = {"engine": {"enable_prefix_caching": False}, "acceptance": {"hit_ratio_min": 0.0}}
    rc, out = sf.deploy("-e", json.dumps({"spark_serve_profile_overrides": overrides}))
    assert rc == 0, out[-6000:]
    verdicts, out = diagnose(400)
    print(f"\n[diagnose with prefix caching off] {verdicts}")
    assert verdicts[0] == "prefix-caching-off", out[-3000:]
    rc, out = sf.deploy()  # back to the shipped profile
    assert rc == 0, out[-6000:]
