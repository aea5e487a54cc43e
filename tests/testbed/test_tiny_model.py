"""The test bed's tiny model (tiny_model.py) is deterministic and the real vLLM CPU build serves it."""

import hashlib
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "engine"))
from engine_proc import EngineProc, engine_available, engine_python

pytestmark = pytest.mark.engine


def make(out):
    done = subprocess.run(
        [str(engine_python()), str(HERE / "tiny_model.py"), str(out)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(out).iterdir())}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    if not engine_available():
        pytest.skip("no engine venv (make engine)")
    out = tmp_path_factory.mktemp("tiny-llama")
    return out, make(out)


def test_files_are_deterministic(model, tmp_path):
    out, digests = model
    assert make(tmp_path / "again") == digests
    assert set(digests) == {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    }
    assert "<|im_start|>" in json.loads((out / "tokenizer_config.json").read_text())["chat_template"]


def http(url, body=None, timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, json.loads(resp.read() or b"null")


def test_vllm_serves_it(model):
    out, _ = model
    with EngineProc(out, ["--served-model-name", "tiny-llama", "--max-model-len", "512", "--max-num-seqs", "2"]) as eng:
        base = f"http://127.0.0.1:{eng.port}"
        eng.wait_for(r"Application startup complete", timeout=240)
        deadline = time.monotonic() + 60
        while True:
            try:
                if http(f"{base}/health")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, eng.tail()
            time.sleep(1)
        status, reply = http(
            f"{base}/v1/chat/completions",
            {
                "model": "tiny-llama",
                "max_tokens": 8,
                "temperature": 0,
                "messages": [{"role": "user", "content": "Hello! How can I help you today?"}],
            },
            timeout=120,
        )
        assert status == 200, reply
        assert reply["choices"][0]["message"]["role"] == "assistant"
        assert reply["usage"]["completion_tokens"] >= 1
        print(f"/health 200 after {eng.elapsed():.0f} s; reply {reply['choices'][0]['message']['content']!r}")
