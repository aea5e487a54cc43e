"""The hybrid test bed (profile testbed-hybrid): a tiny qwen3_next (Gated DeltaNet + full attention + MoE) that the
real vLLM CPU build serves with TP2 across the two test nodes, prefix caching in align mode. The seeds' cache path,
end to end: the engine's logged block equals the prediction, a request shorter than one block never hits while one
of two blocks or more does (seed 001), diagnose.yml names it from the engine's own metrics, the gate passes, and a
retention interval that is not a multiple of the block is refused before any host changes.

Runs after test_service.py and before test_service_single.py, which replaces the pair anyway: one restart."""

import json
import re
import time
import uuid

import pytest

from tests.testbed import service_faults as sf
from tests.testbed.helpers import ROOT, playbook

pytestmark = pytest.mark.testbed
HYBRID = ("-e", "spark_serve_profile=testbed-hybrid")
MODEL = "tiny-qwen3-next"
RECORDS = ROOT / ".testbed" / sf.INSTANCE / "spark-serve" / "records"


def latest_record():
    found = [json.loads(path.read_text()) for path in sorted(RECORDS.glob("*.json"))]
    pair = [r for r in found if r["inventory"] == "testbed-pair"]
    assert pair, "no record of the pair"
    return pair[-1]


@pytest.fixture(scope="module")
def hybrid(served_pair):
    """The pair switched to testbed-hybrid by site.yml (prepare fetches the model once and copies it to the worker,
    then the staged start, warm-up, gate and record)."""
    started = time.monotonic()
    rc, out = playbook("site.yml", sf.PAIR, *HYBRID, timeout=3600)
    print(f"\n[site.yml testbed-hybrid] {time.monotonic() - started:.0f} s")
    assert rc == 0, out[-6000:]
    record = latest_record()
    assert record["profile_name"] == "testbed-hybrid", record["profile_name"]
    return record


def ask(prompt):
    body = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": prompt}]}
    with sf.post("/v1/chat/completions", body) as response:
        usage = json.load(response)["usage"]
    return usage["prompt_tokens"], (usage.get("prompt_tokens_details") or {}).get("cached_tokens")


def words(count):
    """A prompt of `count` words that nothing before shares (the nonce comes first)."""
    return uuid.uuid4().hex + " " + " ".join(f"item{index % 97}" for index in range(count))


def test_the_logged_block_equals_the_prediction_and_the_gate_passes(hybrid):
    readback = hybrid["acceptance"]["readback"]
    print(f"\n[hybrid block] predicted {hybrid['effective_block']}, logged {readback['attention_block']}; {readback}")
    assert hybrid["status"] == "passed", hybrid.get("reason")
    assert hybrid["effective_block"] == readback["attention_block"] == 640
    assert readback["kv_cache_tokens"] > 0 and readback["max_concurrency"] > 0
    assert hybrid["acceptance"]["failures"] == []


def test_a_prompt_shorter_than_one_block_never_hits_while_two_blocks_do(hybrid):
    block = hybrid["effective_block"]
    short, long = words(60), words(700)
    short_runs = [ask(short) for _ in range(3)]
    long_runs = [ask(long) for _ in range(3)]
    print(f"\n[hybrid cache, block {block}] short (prompt, cached): {short_runs}; long: {long_runs}")
    assert all(prompt < block for prompt, _ in short_runs), short_runs
    assert [cached for _, cached in short_runs] == [0, 0, 0], short_runs
    assert all(prompt >= 2 * block for prompt, _ in long_runs), long_runs
    assert long_runs[0][1] == 0, "the first sighting of a new prompt cannot hit"
    for _, cached in long_runs[1:]:
        assert cached >= block and cached % block == 0, long_runs


def test_diagnose_names_the_block_from_the_engine_metrics(hybrid):
    rc, out = playbook("playbooks/diagnose.yml", sf.PAIR, *HYBRID, "-e", "spark_serve_diagnose_words=60")
    assert rc == 0, out[-4000:]
    verdicts = re.findall(r"VERDICT ([\w-]+)", out)
    print(f"\n[diagnose, hybrid, 60 words] {verdicts}")
    assert verdicts[0] == "block-larger-than-request", out[-3000:]
    assert "effective cache block 640 tokens (engine /metrics cache_config_info) > the whole request" in out


def test_a_retention_that_is_not_a_multiple_of_the_block_is_refused_before_any_host_changes(hybrid):
    before = [sf.container_identity(i) for i in range(2)]
    overrides = {"spark_serve_profile_overrides": {"engine": {"prefix_cache_retention_interval": 1000}}}
    rc, out = playbook("site.yml", sf.PAIR, *HYBRID, "-e", json.dumps(overrides))
    assert rc != 0, out[-3000:]
    assert "engine.prefix_cache_retention_interval=1000: must be a multiple of the scheduler block" in out
    assert "compute as 640 tokens" in out and "nearest valid values: 640, 1280" in out
    assert not {"node-0", "node-1"} & set(sf.recap(out)), "a node play ran"
    assert [sf.container_identity(i) for i in range(2)] == before


def test_status_finds_every_rank_running_the_spec_the_deploy_rendered(hybrid):
    rc, out = playbook("playbooks/status.yml", sf.PAIR, *HYBRID)
    assert rc == 0, out[-3000:]
    compared = re.search(r"every rank runs the spec the deploy rendered \(([^)]*)\)", out)
    assert compared and "all 2 rank(s) alive" in out, out[-3000:]
    print(f"\n[hybrid spec vs docker inspect] equal on both ranks: {compared.group(1)}")
    for field in ("command", "env", "mounts", "restart", "image"):
        assert field in compared.group(1), compared.group(1)
