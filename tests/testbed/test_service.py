"""site.yml on the two-node test bed with the real vLLM CPU engine (TP2): serving, idempotence, liveness, faults.

Every fault test asserts the time to detection and the end state. Times are printed; they are measured, not
asserted against a stopwatch, except the issue's own bound (a dead rank found within 10 s).
"""

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.testbed.conftest import BIN, ENV_BASE, INSTANCE, ROOT, node_exec, playbook, run

pytestmark = pytest.mark.testbed
HEAD = f"http://10.253.{16 * int(INSTANCE)}.10:8000"


def post(path, body, timeout=120):
    request = urllib.request.Request(HEAD + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(request, timeout=timeout)


def health():
    try:
        with urllib.request.urlopen(HEAD + "/health", timeout=5) as response:
            return response.status
    except OSError:
        return None


def engine_containers(index):
    rc, out = node_exec(index, "docker ps -q --filter name=spark-serve-rank")
    return out.split() if rc == 0 else []


def container_identity(index):
    rc, out = node_exec(index, f"docker inspect -f '{{{{.Id}}}} {{{{.State.StartedAt}}}}' spark-serve-rank{index}")
    return out.strip() if rc == 0 else None


@pytest.fixture(scope="module")
def deployed(testbed):
    rc, out = run([sys.executable, str(ROOT / "tests/testbed/engine_image.py"), "push"], timeout=3600)
    assert rc == 0, out[-3000:]
    rc, out = playbook("molecule/shared/dgx_os.yml")
    assert rc == 0, out[-3000:]
    started = time.monotonic()
    rc, out = playbook("site.yml", timeout=3600)
    print(f"\n[site.yml] first run {time.monotonic() - started:.0f} s")
    assert rc == 0, out[-6000:]
    assert "ready: /health 200 and all 2 rank(s) running" in out
    return out


def redeploy():
    rc, out = playbook("site.yml", "inventories/testbed-pair", "--tags", "deploy", timeout=1800)
    assert rc == 0, out[-6000:]
    return out


def test_pair_serves_streaming_chat_and_prefix_cache_hits(deployed):
    with post("/v1/chat/completions", {"model": "tiny-llama", "stream": True, "max_tokens": 8,
                                       "messages": [{"role": "user", "content": "stream please"}]}) as response:
        events = [line for line in response.read().decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    deltas = [json.loads(e[6:])["choices"][0]["delta"] for e in events[:-1] if json.loads(e[6:])["choices"]]
    assert any(d.get("content") for d in deltas), events[:5]

    prompt = " ".join(f"token{i % 50}" for i in range(600))  # several 128-token CPU blocks
    usage = []
    for _ in range(2):
        with post("/v1/chat/completions", {"model": "tiny-llama", "max_tokens": 4,
                                           "messages": [{"role": "user", "content": prompt}]}) as response:
            usage.append(json.load(response)["usage"])
    cached = (usage[1].get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    print(f"\n[prefix cache] prompt {usage[1]['prompt_tokens']} tokens, repeat cached {cached}")
    assert cached > 0


def test_rerun_with_nothing_changed_restarts_nothing(deployed):
    before = [container_identity(i) for i in range(2)]
    started = time.monotonic()
    out = redeploy()
    seconds = time.monotonic() - started
    recap = [line for line in out.splitlines() if line.startswith("node-")]
    print(f"\n[no-op rerun] {seconds:.0f} s; {recap}")
    assert all("changed=0" in line for line in recap), recap
    assert [container_identity(i) for i in range(2)] == before


def test_status_reports_a_dead_worker_while_head_health_is_200(deployed):
    rc, out = playbook("playbooks/status.yml")
    assert rc == 0, out[-3000:]
    node_exec(1, "docker kill spark-serve-rank1")
    killed = time.monotonic()
    assert health() == 200, "vLLM's /health should still say 200 with a dead worker (that is the point)"
    rc, out = playbook("playbooks/status.yml")
    seconds = time.monotonic() - killed
    print(f"\n[dead worker after ready] status.yml reported it {seconds:.1f} s after the kill "
          f"(engine: never, /health stays 200)")
    assert rc != 0
    assert "node-1 (rank 1): exited" in out
    assert "site.yml --tags deploy" in out
    assert seconds < 10
    redeploy()
    assert health() == 200


def test_stale_containers_are_replaced(deployed):
    image = json.loads((ROOT / ".testbed" / INSTANCE / "engine-image.json").read_text())
    ref = f"{image['name']}@{image['digest']}"
    node_exec(1, "docker rm -f spark-serve-rank1 >/dev/null 2>&1; "
                 f"docker run -d --name spark-serve-rank1 --entrypoint sleep {ref} 600")
    out = redeploy()
    assert "ready: /health 200" in out
    rc, cmd = node_exec(1, "docker inspect -f '{{json .Config.Cmd}}' spark-serve-rank1")
    assert "--headless" in cmd, cmd


def test_worker_killed_during_start_is_found_in_seconds_and_everything_stops(deployed):
    overrides = json.dumps({"spark_serve_profile_overrides": {"engine": {"max_num_seqs": 3}}})
    proc = subprocess.Popen([str(BIN / "ansible-playbook"), "-i", "inventories/testbed-pair", "site.yml",
                             "--tags", "deploy", "-e", overrides], cwd=ROOT, env=ENV_BASE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed = detected = None
    lines = []
    deadline = time.monotonic() + 900
    for line in proc.stdout:
        lines.append(line)
        if killed is None and "[vllm]" in line and "rank 1 (node-1)" in line:
            node_exec(1, "docker kill spark-serve-rank1")
            killed = time.monotonic()
        if "DETECTED" in line and detected is None:
            detected = time.monotonic()
        if time.monotonic() > deadline:
            proc.kill()
            break
    proc.wait(timeout=120)
    out = "".join(lines)
    assert killed is not None, out[-3000:]
    assert proc.returncode != 0
    assert detected is not None, out[-3000:]
    seconds = detected - killed
    print(f"\n[worker killed during start] detected {seconds:.1f} s after the kill "
          f"(engine's own gloo timeout: 1801 s, ratio {seconds / 1801:.4f})")
    assert seconds < 10
    assert "rank 1 (node-1) failed first" in out
    assert engine_containers(0) == [] and engine_containers(1) == [], "a rank was left running"
    rc, snapshot = node_exec(0, "ls /var/lib/spark-serve/huggingface/hub/models--spark-serve--tiny-llama/snapshots")
    assert rc == 0 and snapshot.strip(), "the model cache must stay"
    logs = sorted((ROOT / ".spark-serve" / "logs").glob("*/rank1-node-1.log"))
    assert logs, "the failed ranks' logs must be collected on the controller"
    redeploy()
