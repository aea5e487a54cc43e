"""The client commands a deploy prints (module_utils/client_examples.py, library/vllm_clients.py): what they say, and
that they work as printed, run by bash against an OpenAI-style server on 127.0.0.1 that checks the key. The door's
CA (--cacert, SSL_CERT_FILE) is proven on the test bed (tests/testbed/test_service.py)."""

import json
import subprocess
import sys

import pytest
from ansible.module_utils.client_examples import client_lines
from ansible.modules import vllm_clients

from tests.fake_vllm import LoopbackServer
from tests.module_harness import run_module
from tests.runner import ROOT

KEY = "sk-client-example-7f3a"


@pytest.fixture()
def server():
    """Answers a non-streamed chat completion when the key is right; keeps every request."""
    requests = []

    def answer(request):
        requests.append(request)
        if request.headers.get("Authorization") != f"Bearer {KEY}":
            return 401, {"Content-Type": "application/json"}, [b'{"error": {"message": "bad key"}}']
        completion = {
            "id": "c1",
            "object": "chat.completion",
            "created": 0,
            "model": request.body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
        }
        return 200, {"Content-Type": "application/json"}, [json.dumps(completion).encode()]

    fake = LoopbackServer(answer)
    fake.requests = requests
    yield fake
    fake.close()


@pytest.mark.parametrize(
    ("args", "present", "absent"),
    [
        (
            ("https://spark-a.local:8443/", "qwen3.8-flash-next", "/srv/ca dir/ca.pem", "/srv/api-key"),
            [
                "endpoint https://spark-a.local:8443/v1, served model name qwen3.8-flash-next",
                "--cacert '/srv/ca dir/ca.pem'",
                "SSL_CERT_FILE='/srv/ca dir/ca.pem'",
                "$(cat /srv/api-key)",
                "update-ca-certificates",
                "update-ca-trust",
                "add-trusted-cert",
            ],
            ["OPENAI_API_KEY=none"],
        ),
        (
            ("http://10.0.0.5:8000", "tiny", "", ""),
            ["endpoint http://10.0.0.5:8000/v1, served model name tiny", "OPENAI_API_KEY=none"],
            ["--cacert", "SSL_CERT_FILE", "Authorization", "trust the CA"],
        ),
    ],
)
def test_the_lines_name_endpoint_model_and_only_the_files_that_exist(args, present, absent):
    text = "\n".join(client_lines(*args))
    assert [p for p in present if p not in text] == []
    assert [a for a in absent if a in text] == []


@pytest.mark.parametrize("which", ["curl", "sdk"])
def test_each_printed_command_works_as_printed_and_keeps_the_key_off_the_command_line(which, server, tmp_path):
    key_file = tmp_path / "api key"  # a space: the path is quoted
    key_file.write_text(KEY + "\n")
    result = run_module(vllm_clients, dict(url=server.url, model="tiny", api_key_file=str(key_file)))
    command = result[which]
    assert KEY not in command and KEY not in "\n".join(result["lines"])
    assert command in "\n".join(result["lines"])
    # The SDK example says python3; run it with this interpreter, where the openai package is installed.
    runnable = command.replace("python3 -c", f"{sys.executable} -c") if which == "sdk" else command
    proc = subprocess.run(["bash", "-c", runnable], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "Hello" in proc.stdout
    assert [(r.path, r.body["model"]) for r in server.requests] == [("/v1/chat/completions", "tiny")]
