"""The Hugging Face token of roles/hf_model: a controller file, refused-without for a gated model, never shown.

Both tests run the role's download tasks on the controller (connection local) against the test bed's hub stand-in
on loopback, serving a two-file repository that the stand-in's control file marks gated ("manual").
"""

import json
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

from tests.runner import ROOT, ansible_playbook

pytestmark = pytest.mark.playbook

REPO = "spark-serve/gated-tiny"
COMMIT = "7e57bed05eed1a4c2f0b9d8e6a3c1f2e4d5b6a79"  # the stand-in's default commit
SENTINEL = "hf_SENTINEL7f3c9a2e41d8b6057c1e9f2a4b3d5c6e"
DOWNLOAD_TASK = "TASK [hf_model : Download the pinned revision with the engine image's hf client]"


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def gated_hub(tmp_path):
    """The hub stand-in on loopback with REPO gated; yields (endpoint, request log path)."""
    repo = tmp_path / "hub" / REPO
    repo.mkdir(parents=True)
    (repo / "config.json").write_text('{"model_type": "llama"}\n')
    (repo / "model.safetensors").write_bytes(b"\0" * 64)
    control, log = tmp_path / "hub-control.json", tmp_path / "hub-log.jsonl"
    control.write_text(json.dumps({"gated": {REPO: "manual"}}))
    port = free_port()
    args = ["--root", str(tmp_path / "hub"), "--bind", "127.0.0.1", "--port", str(port)]
    args += ["--log", str(log), "--control", str(control)]
    hub = subprocess.Popen([sys.executable, str(ROOT / "tests/testbed/hub_standin.py"), *args])
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{endpoint}/_standin", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline and hub.poll() is None, "the hub stand-in did not start"
                time.sleep(0.1)
        yield endpoint, log
    finally:
        hub.terminate()
        hub.wait(timeout=10)


def run_download(tmp_path, endpoint, token_file, *extra):
    """The role's download.yml on localhost; the image is one no registry has (a loopback port nobody serves), so a
    run that gets past the checks fails in the download container's pull."""
    book = tmp_path / "download.yml"
    role_vars = {
        "hf_model_repo": REPO,
        "hf_model_revision": COMMIT[:8],
        "hf_model_endpoint": endpoint,
        "hf_model_cache_dir": str(tmp_path / "cache"),
        "hf_model_manifest_dir": str(tmp_path / "cache/manifests"),
        "hf_model_pin_file": str(tmp_path / "model-pins.json"),
        "hf_model_image": "127.0.0.1:9/spark-serve/none@sha256:" + "0" * 64,
        "hf_model_download_attempts": 1,
        "hf_model_download_timeout": 120,
        "hf_model_token_file": str(token_file),
        "hf_model_token_dir": str(tmp_path / "run-token"),
    }
    include = {"name": "hf_model", "tasks_from": "download"}
    play = {"name": "download", "hosts": "localhost", "gather_facts": False, "vars": role_vars}
    play["tasks"] = [{"name": "download", "ansible.builtin.include_role": include}]
    book.write_text(yaml.safe_dump([play], sort_keys=False))
    inventory = tmp_path / "hosts.yml"
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": local}}}))
    return ansible_playbook("-i", str(inventory), str(book), *extra, timeout=300)


def hub_requests(log):
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_a_gated_model_without_a_token_is_refused_before_the_download(tmp_path, gated_hub):
    """Alone proves: a repository whose model info says gated, with no token file on the controller, is refused by
    name (repo, gated, the variable to set) before any file is requested and before the download container."""
    endpoint, log = gated_hub
    rc, out = run_download(tmp_path, endpoint, tmp_path / "no-such-hf-token")
    assert rc != 0, out[-3000:]
    assert f"{REPO} is gated on the Hub (gated: manual)" in out, out[-3000:]
    assert "spark_serve_hf_token_file" in out and "no such file" in out and "nothing was downloaded" in out
    assert DOWNLOAD_TASK not in out, out[-3000:]
    assert [r["path"] for r in hub_requests(log) if "/resolve/" in r["path"]] == []


def test_the_token_reaches_the_hub_and_never_the_output_at_vvv(tmp_path, gated_hub):
    """Alone proves: a controller token file is used (the Hub API request carried a bearer header, so the gated
    model passes the check and reaches the download), its value appears nowhere in -vvv output (task args,
    module invocations, diffs), and the node-side copy is gone after the (here failing) download."""
    endpoint, log = gated_hub
    token = tmp_path / "hf-token"
    token.write_text(SENTINEL + "\n")
    token.chmod(0o600)
    rc, out = run_download(tmp_path, endpoint, token, "-vvv", "--diff")
    assert DOWNLOAD_TASK in out, out[-3000:]
    assert "TASK [hf_model : Put the Hub token in it for the download (root only)]" in out, out[-3000:]
    assert "TASK [hf_model : Remove the Hub token from the download host]" in out, out[-3000:]
    assert rc != 0, "the download of an image nobody serves must fail"
    assert SENTINEL not in out
    assert SENTINEL[3:15] not in out  # nor a part of it
    api = [r for r in hub_requests(log) if r["path"].startswith(f"/api/models/{REPO}")]
    assert api and all(r["auth"] for r in api), api
    assert not (tmp_path / "run-token").exists()
    assert "TASK [hf_model : Forget the Hub token" in out, out[-3000:]
