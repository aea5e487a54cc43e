"""The vllm_service role's own modules, their pure parts: which container paths the engine is told about
(vllm_container_paths) and how a running container differs from its compose spec (vllm_drift)."""

import importlib.util
import subprocess

import pytest

from tests.profiles import ROOT

pytestmark = pytest.mark.playbook
LIBRARY = ROOT / "roles/vllm_service/library"


def load(name):
    spec = importlib.util.spec_from_file_location(name, LIBRARY / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


paths = load("vllm_container_paths")
drift = load("vllm_drift")


def checked(argv, env=None, overlays=(), tables=(), revision="abc123"):
    params = {"argv": argv, "env": env or {}, "overlays": list(overlays), "tuned_tables": list(tables)}
    return {c["path"]: c for c in paths.checks(dict(params, revision=revision))}


def holds(check):
    """Whether a check's shell condition holds on this machine (the tests build the paths under tmp_path)."""
    return subprocess.run(["sh", "-c", check["test"]], capture_output=True).returncode == 0


def test_every_path_the_engine_is_told_about_is_checked():
    found = checked(
        ["vllm", "serve", "org/model", "--chat-template=/t/chat.jinja", "--download-dir", "/weights"],
        env={"VLLM_TUNED_CONFIG_FOLDER": "/opt/t", "HF_HOME": "/hf", "SPARK_SERVE_API_KEY_FILE": "/controller/key"},
        overlays=["/vllm/x.py"],
        tables=["E=512,N=320,device_name=NVIDIA_GB10.json"],
    )
    assert found["/opt/t"]["consequence"] == "the engine would silently fall back to its default MoE kernels"
    assert "/opt/t/E=512,N=320,device_name=NVIDIA_GB10.json" in found
    assert {"/vllm/x.py", "/t/chat.jinja", "/weights"} <= found.keys()
    # The hub snapshot is looked up under --download-dir when it is given, through refs/<revision>.
    model = next(c for c in found.values() if c["what"] == "model org/model@abc123")
    assert "/weights/models--org--model/refs/abc123" in model["test"]
    # A controller-side reference is not a container path.
    assert "/controller/key" not in found


def test_without_a_named_table_the_folder_must_hold_one():
    found = checked(["vllm", "serve", "/models/m"], env={"VLLM_TUNED_CONFIG_FOLDER": "/opt/t"})
    assert "/opt/t/E=*.json" in found and "ls " in found["/opt/t/E=*.json"]["test"]
    assert "/models/m/config.json" in found  # an absolute model directory


def test_the_shell_conditions_hold_exactly_when_the_paths_exist(tmp_path):
    hub = tmp_path / "hf" / "hub" / "models--org--m"
    (hub / "refs").mkdir(parents=True)
    (hub / "refs" / "abc123").write_text("f" * 40)
    (hub / "snapshots" / ("f" * 40)).mkdir(parents=True)
    (hub / "snapshots" / ("f" * 40) / "config.json").write_text("{}")
    tables = tmp_path / "tables"
    tables.mkdir()
    found = checked(
        ["vllm", "serve", "org/m"], env={"HF_HOME": str(tmp_path / "hf"), "VLLM_TUNED_CONFIG_FOLDER": str(tables)}
    )
    results = {c["what"]: holds(c) for c in found.values()}
    assert results == {
        "env VLLM_TUNED_CONFIG_FOLDER": True,
        "a tuned MoE table in VLLM_TUNED_CONFIG_FOLDER": False,  # the folder is empty
        "model org/m@abc123": True,
    }
    (tables / "E=8,N=64,device_name=testbed.json").write_text("{}")
    assert all(holds(c) for c in found.values())
    wrong = checked(["vllm", "serve", "org/m", "--revision", "0000"], env={"HF_HOME": str(tmp_path / "hf")})
    assert [holds(c) for c in wrong.values()] == [False]


SPEC = {
    "image": "reg/vllm@sha256:aa",
    "command": ["vllm", "serve", "m"],
    "environment": {"A": "1", "VLLM_API_KEY": "s3cret"},
    "volumes": [
        {"type": "bind", "source": "/hf", "target": "/hf"},
        {"type": "bind", "source": "/etc/t", "target": "/opt/t", "read_only": True},
    ],
    "restart": "no",
    "labels": {"org.spark-serve.config-hash": "h1", "com.docker.compose.project": "x"},
}
IMAGE = {"Id": "sha256:id1", "Config": {"Env": ["PATH=/usr/bin"], "Entrypoint": None, "Cmd": ["bash"]}}


def running(**changes):
    container = {
        "Image": "sha256:id1",
        "Config": {
            "Image": "reg/vllm@sha256:aa",
            "Cmd": ["vllm", "serve", "m"],
            "Entrypoint": None,
            "Env": ["PATH=/usr/bin", "A=1", "VLLM_API_KEY=s3cret"],
            "Labels": {"org.spark-serve.config-hash": "h1"},
        },
        "Mounts": [
            {"Type": "bind", "Source": "/hf", "Destination": "/hf", "RW": True},
            {"Type": "bind", "Source": "/etc/t", "Destination": "/opt/t", "RW": False},
        ],
        "HostConfig": {"RestartPolicy": {"Name": "no"}},
    }
    for key, value in changes.items():
        container["Config"][key] = value
    return container


def test_a_container_equal_to_its_spec_has_no_drift():
    assert drift.compare(SPEC, running(), IMAGE) == []


def test_drift_is_reported_field_by_field_and_never_shows_a_secret():
    container = running(
        Env=["PATH=/usr/bin", "A=2", "VLLM_API_KEY=other", "B=added"], Cmd=["vllm", "serve", "m", "--x"]
    )
    container["Mounts"][1]["RW"] = True
    container["HostConfig"]["RestartPolicy"]["Name"] = "always"
    found = {d["field"]: d for d in drift.compare(SPEC, container, IMAGE)}
    assert found["env.A"] == {"field": "env.A", "spec": "1", "running": "2"}
    assert found["env.B"]["spec"] is None and found["env.B"]["running"] == "added"
    assert found["env.VLLM_API_KEY"] == {"field": "env.VLLM_API_KEY", "spec": "<redacted>", "running": "<redacted>"}
    assert found["command"]["running"][-1] == "--x"
    assert found["restart"] == {"field": "restart", "spec": "no", "running": "always"}
    assert found["mounts./opt/t"] == {
        "field": "mounts./opt/t",
        "spec": ["/etc/t", "/opt/t", True],
        "running": ["/etc/t", "/opt/t", False],
    }
    assert "s3cret" not in repr(found) and "other" not in repr(found)
