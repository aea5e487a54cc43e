"""The diagnostics bundle's modules run as Ansible runs them: library/vllm_evidence.py on a node (docker, dmesg and
the fabric's commands faked through AnsibleModule.run_command) and library/spark_bundle.py on the controller, with
module_utils/evidence.py's kernel filter and leak check. The API key is planted in every place a node shows it (the
rank's env in `docker inspect`, a log line, a bearer header, a kept file) and must be in no member."""

import json
import tarfile

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.evidence import env_file_secrets, kernel_lines, leaks
from ansible.modules import spark_bundle, vllm_evidence

from tests.module_harness import run_module

KEY = "sk-spark-0123456789abcdef"
TOKEN = "hf_abcdefghijklmnopqrstuvwx"
DMESG = (
    "[Sun Dec  6 10:00:00 2026] NVRM: Xid (PCI:000f:01:00): 79, pid=1234, GPU has fallen off the bus.\n"
    "[Sun Dec  6 10:00:01 2026] usb 1-1: new high-speed USB device\n"
    "[Sun Dec  6 10:00:02 2026] pcieport 0000:00:01.0: AER: Corrected error received\n"
    "[Sun Dec  6 10:00:03 2026] mlx5_core 0000:01:00.1 enp1s0f1np1: Link down\n"
    "[Sun Dec  6 10:00:04 2026] Out of memory: Killed process 4321 (python3)\n"
)


def fake_node(monkeypatch, running=True, exists=True):
    """A node whose rank container leaks the key everywhere it can (or has no rank container); returns the argv of
    every command run."""
    calls = []
    inspect = [{"State": {"Running": running}, "Image": "sha256:abc", "Config": {"Env": [f"VLLM_API_KEY={KEY}"]}}]
    answers = {
        "logs": f"INFO Started server\nDEBUG headers Authorization: Bearer {KEY}\nWARN key {KEY} in a line\n",
        "inspect": json.dumps(inspect),
        "image": '[{"Id": "sha256:abc", "RepoDigests": ["reg/vllm@sha256:def"]}]',
        "dmesg": DMESG,
    }

    def run_command(module, argv, **kwargs):
        calls.append(argv)
        if isinstance(argv, str):  # the stacks and the fabric's shell lines
            return 0, "=== pid 7: python3 -m vllm\nThread 7 (idle): MainThread\n" if "py-spy" in argv else "up\n", ""
        verb = "image" if argv[1:3] == ["image", "inspect"] else argv[1] if argv[0] == "docker" else argv[0]
        if verb in ("logs", "inspect") and not exists:
            return 1, "", "Error: No such container: spark-serve-rank0\n"
        return 0, answers[verb], ""

    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(vllm_evidence.shutil, "which", lambda name: None if name == "nvidia-smi" else f"/bin/{name}")
    return calls


def evidence_args(tmp_path):
    (tmp_path / "secrets.env").write_text(f"VLLM_API_KEY={KEY}\n")
    (tmp_path / "py-spy").write_text("")
    records = tmp_path / "records"
    records.mkdir()
    (records / "watchdog-events.jsonl").write_text(json.dumps({"event": "service unhealthy", "note": KEY}) + "\n")
    return {
        "container": "spark-serve-rank0",
        "dest": str(tmp_path / "part.tar.gz"),
        "label": "spark-a",
        "py_spy": str(tmp_path / "py-spy"),
        "fast_netdev": "enp1s0f1np1",
        "files": [str(records), str(tmp_path / "absent.log")],
        "secret_files": [str(tmp_path / "secrets.env")],
    }


def members(path):
    with tarfile.open(path, "r:gz") as tar:
        return {info.name: tar.extractfile(info).read() for info in tar.getmembers()}


def test_a_running_rank_gives_its_log_stacks_inspect_and_the_nodes_faults_with_the_key_hidden(tmp_path, monkeypatch):
    fake_node(monkeypatch)
    result = run_module(vllm_evidence, evidence_args(tmp_path))
    found = members(result["tarball"])
    assert set(found) == {
        f"spark-a/{name}"
        for name in (
            "rank.log",
            "rank.stacks.txt",
            "rank.inspect.json",
            "image.json",
            "kernel.txt",
            "fabric.txt",
            "files/watchdog-events.jsonl",
        )
    }
    assert leaks(found, [KEY]) == [] and b"<redacted>" in found["spark-a/rank.inspect.json"]
    kernel = found["spark-a/kernel.txt"].decode()
    assert kernel.startswith("# 4 of 5 kernel lines") and "USB" not in kernel
    assert {"spark-a/rank.log", "spark-a/rank.inspect.json"} <= set(result["scrubbed"])
    assert "gpu.txt: nvidia-smi not found" in result["missing"]
    assert any(m.startswith("files/absent.log: ") for m in result["missing"]), result["missing"]


def test_a_stopped_rank_is_read_without_stacks_and_says_why(tmp_path, monkeypatch):
    calls = fake_node(monkeypatch, running=False)
    result = run_module(vllm_evidence, dict(evidence_args(tmp_path), fast_netdev=""))
    assert "rank.stacks.txt: the container does not run" in result["missing"]
    assert not [c for c in calls if isinstance(c, str)], "no py-spy and no fabric commands"
    assert "spark-a/rank.log" in members(result["tarball"])


def test_a_node_without_its_rank_container_says_so_and_still_gives_its_kernel_lines(tmp_path, monkeypatch):
    fake_node(monkeypatch, exists=False)
    result = run_module(vllm_evidence, evidence_args(tmp_path))
    assert "rank.log: exit 1: Error: No such container: spark-serve-rank0" in result["missing"], result["missing"]
    assert "rank.stacks.txt: the container does not run" in result["missing"]
    assert "spark-a/kernel.txt" in members(result["tarball"])
    assert not {"spark-a/rank.log", "spark-a/image.json"} & set(result["members"]), "no member for an error"


def test_the_bundle_holds_every_node_and_the_controller_records_and_no_secret(tmp_path, monkeypatch):
    fake_node(monkeypatch)
    part = run_module(vllm_evidence, evidence_args(tmp_path))["tarball"]
    specs = tmp_path / "pair"
    specs.mkdir()
    (specs / "rank0.spec.json").write_text(json.dumps({"argv": ["vllm", "serve"], "hf": TOKEN}))
    (tmp_path / "api-key").write_text(KEY + "\n")
    (tmp_path / "hf-token").write_text(TOKEN + "\n")
    dest = tmp_path / "bundles" / "bundle-1.tar.gz"
    args = {
        "dest": str(dest),
        "parts": [part],
        "include": [str(specs), str(tmp_path / "no-records")],
        "failed_starts": [str(specs)],
        "secret_files": [str(tmp_path / "api-key"), str(tmp_path / "hf-token"), str(tmp_path / "absent")],
        "missing": {"spark-a": ["gpu.txt: nvidia-smi not found"]},
    }
    result = run_module(spark_bundle, args)
    found = members(dest)
    assert "bundle-1/nodes/spark-a/rank.stacks.txt" in found and "bundle-1/controller/pair/rank0.spec.json" in found
    assert "bundle-1/controller/failed-starts/pair/rank0.spec.json" in found
    assert result["members"] == len(found) and leaks(found, [KEY, TOKEN]) == []
    manifest = found["bundle-1/MANIFEST.txt"].decode()
    assert "spark-a: gpu.txt: nvidia-smi not found" in manifest and "no-records: not found" in manifest
    spec = "pair/rank0.spec.json"  # the token in the spec; the nodes had scrubbed their parts already
    assert sorted(result["scrubbed"]) == [f"controller/failed-starts/{spec}", f"controller/{spec}"]
    assert oct(dest.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(
    "text, secrets",
    [
        ("VLLM_API_KEY=sk-0123456789\n# comment=ignored-value\nSHORT=abc\n", ["sk-0123456789"]),
        ("HF_TOKEN='hf_0123456789'\n\nNO_EQUALS\n", ["hf_0123456789"]),
        ("", []),
    ],
)
def test_env_file_values_are_the_secrets_to_hide(text, secrets):
    assert env_file_secrets(text) == secrets


def test_kernel_lines_keep_the_faults_and_the_last_ones():
    assert [line.split("] ")[1][:5] for line in kernel_lines(DMESG)] == ["NVRM:", "pciep", "mlx5_", "Out o"]
    assert kernel_lines(DMESG, limit=1) == [DMESG.splitlines()[-1]]


def test_a_member_still_holding_a_secret_is_named():
    assert leaks({"a": b"x sk-1 y", "b": b"clean", "c": b"hf-2"}, ["sk-1", "hf-2", ""]) == ["a", "c"]
