"""The test bed's tiny models (tiny_model.py) are deterministic. That the real vLLM CPU build serves it is proven by
the engine tier's gate test (tests/engine/test_acceptance_engine.py) and by every served test-bed test."""

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
from tests.engine.engine_proc import engine_available, engine_python

pytestmark = pytest.mark.engine


def make(out, *args):
    done = subprocess.run(
        [str(engine_python()), str(HERE / "tiny_model.py"), str(out), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(out).iterdir())}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    assert engine_available(), "no engine venv that imports vllm (make engine)"
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


def test_the_hybrid_is_deterministic_and_named_as_vllms_qwen3_next_loader_reads_it(tmp_path):
    assert engine_available(), "no engine venv that imports vllm (make engine)"
    digests = make(tmp_path / "one", "--model", "tiny-qwen3-next")
    assert make(tmp_path / "two", "--model", "tiny-qwen3-next") == digests
    header = (tmp_path / "one" / "model.safetensors").read_bytes()
    names = json.loads(header[8 : 8 + int.from_bytes(header[:8], "little")])
    config = json.loads((tmp_path / "one" / "config.json").read_text())
    for i, kind in enumerate(config["layer_types"]):
        mixer = "linear_attn.in_proj_qkvz" if kind == "linear_attention" else "self_attn.q_proj"
        assert f"model.layers.{i}.{mixer}.weight" in names
        assert f"model.layers.{i}.mlp.experts.{config['num_experts'] - 1}.down_proj.weight" in names
        assert f"model.layers.{i}.mlp.shared_expert_gate.weight" in names
    assert not [name for name in names if name.startswith("mtp.")], "no MTP weights: the profile serves without MTP"
