"""The test bed's tiny model (tiny_model.py) is deterministic. That the real vLLM CPU build serves it is proven by
the engine tier's gate test (tests/engine/test_acceptance_engine.py) and by every served test-bed test."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "engine"))
from engine_proc import engine_available, engine_python

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
