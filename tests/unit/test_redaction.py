"""One definition of a secret (module_utils/redaction.py): every layer that shows a value — records, refusals,
schema errors, drift reports — hides the same names and the same smuggled texts, and shows the same counts."""

import json

import pytest
from ansible.module_utils.engine_refusals import violation
from ansible.module_utils.redaction import REDACTED, is_secret_name, redact, redact_text
from ansible.modules import vllm_drift
from ansible.plugins.action.spark_profile import schema_problems

KEY = "sk-LAYERS-0123456789"
SECRET_NAMES = [
    "VLLM_API_KEY",
    "HF_TOKEN",
    "HFTOKEN",
    "OPENAI_APIKEY",
    "DB_PASSWORD",
    "AWS_SECRET_ACCESS",
    "MY_CREDS_KEY",
]
PLAIN_NAMES = ["NCCL_IB_HCA", "max_num_batched_tokens", "VLLM_HOST_IP", "tokenizer_mode"]
SMUGGLED = [f"INFO\nVLLM_API_KEY={KEY}", f"Authorization: Bearer {KEY}", f"4 --api-key {KEY}", f"x --hf-token={KEY}"]


def record_layer(name, value):
    return json.dumps(redact({"env": {name: value}}))


def refusal_layer(name, value):
    return json.dumps(violation(f"env.{name}", value, "rule", "message"))


def schema_layer(name, value):
    return json.dumps(schema_problems({"env": {name: value}}, {"properties": {"env": {"type": "string"}}}))


def drift_layer(name, value):
    return json.dumps(vllm_drift.shown(name, value))


LAYERS = [record_layer, refusal_layer, schema_layer, drift_layer]


@pytest.mark.parametrize("layer", LAYERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("name", SECRET_NAMES)
def test_a_secret_named_value_is_hidden_by_every_layer(layer, name):
    assert is_secret_name(name)
    assert KEY not in layer(name, KEY)


@pytest.mark.parametrize("layer", [record_layer, refusal_layer], ids=lambda f: f.__name__)
@pytest.mark.parametrize("text", SMUGGLED, ids=range(len(SMUGGLED)))
def test_a_key_smuggled_into_a_plain_value_is_hidden_by_every_layer_that_shows_texts(layer, text):
    assert KEY not in layer("NCCL_DEBUG", text)


@pytest.mark.parametrize("layer", [record_layer, refusal_layer, drift_layer], ids=lambda f: f.__name__)
@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_plain_names_stay_readable_in_every_layer(layer, name):
    assert not is_secret_name(name)
    assert "rocep1s0f1:1" in layer(name, "rocep1s0f1:1")


def test_counts_under_secret_looking_names_are_no_secrets_and_argv_keys_are():
    assert redact({"last_token_s": 1.5, "api_key_file": ""}) == {"last_token_s": 1.5, "api_key_file": ""}
    assert redact(["vllm", "serve", "--api-key", KEY, "--port", "8000"]) == [
        "vllm",
        "serve",
        "--api-key",
        REDACTED,
        "--port",
        "8000",
    ]
    assert redact_text(f"a known {KEY} anywhere", [KEY]) == f"a known {REDACTED} anywhere"
