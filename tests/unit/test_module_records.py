"""library/vllm_record.py and library/vllm_record_info.py run as Ansible runs them, on a temporary records
directory: what is written, what check mode leaves alone, redaction, refusals, and finding the last good record."""

import json

import pytest
from ansible.modules import vllm_record, vllm_record_info

from tests.module_harness import run_module

RECORD = {
    "kind": "deploy",
    "status": "passed",
    "inventory": "spark-pair",
    "profile_name": "pair",
    "engine_version": "0.32.0",
    "image": {"ref": "r/vllm@sha256:ab", "digest": "sha256:ab"},
    "model": {"id": "org/m", "revision": "fc694b54"},
}
READY = "head /health 200, every rank running"
OVERLAY = {"src": "overlays/interface.py", "dest": "/vllm/platforms/interface.py", "content": "def f():\n    pass\n"}


@pytest.fixture()
def key_file(tmp_path):
    path = tmp_path / "api-key"
    path.write_text("sk-secret-123\n")
    return path


def write(records_dir, record=RECORD, **args):
    return run_module(vllm_record, dict(dir=str(records_dir), record=record, **args))


def test_record_writes_json_markdown_and_the_overlay_text_by_hash(tmp_path):
    records = tmp_path / "records"
    result = write(records, overlays=[OVERLAY])
    assert result["changed"] is True
    assert result["id"].endswith("-spark-pair-deploy")
    saved = json.loads((records / f"{result['id']}.json").read_text())
    assert result["path"] == str(records / f"{result['id']}.json")
    assert result["markdown"] == str(records / f"{result['id']}.md")
    assert (records / f"{result['id']}.md").read_text().startswith(f"# Deployment {result['id']}")
    (overlay,) = saved["overlays"]
    assert set(overlay) == {"src", "dest", "sha256"}, "the record keeps the overlay's hash, not its text"
    assert (records / "overlays" / overlay["sha256"]).read_text() == OVERLAY["content"]


def test_record_check_mode_writes_nothing_but_names_the_id(tmp_path):
    records = tmp_path / "records"
    result = run_module(vllm_record, dict(dir=str(records), record=RECORD), check_mode=True)
    assert result["changed"] is True and result["id"].endswith("-spark-pair-deploy")
    assert not records.exists()


def test_record_redacts_the_api_key_everywhere_and_masks_it_in_the_result(tmp_path, key_file):
    records = tmp_path / "records"
    record = dict(
        RECORD,
        ranks=[{"rank": 0, "host": "a", "argv": ["vllm", "serve", "--api-key", "sk-secret-123"]}],
        reason="sk-secret-123",
    )
    result = write(records, record=record, api_key_file=str(key_file))
    text = (records / f"{result['id']}.json").read_text()
    assert "sk-secret-123" not in text and "<redacted>" in text
    assert "sk-secret-123" not in (records / f"{result['id']}.md").read_text()
    assert "sk-secret-123" not in json.dumps(result)


def test_record_refuses_a_key_it_cannot_redact_and_writes_nothing(tmp_path, key_file):
    records = tmp_path / "records"
    result = write(records, record=dict(RECORD, env={"sk-secret-123": "x"}), api_key_file=str(key_file))
    assert result["failed"] and result["msg"] == "the API key would appear in the record; nothing was written"
    assert not records.exists()


def test_record_names_every_missing_required_key(tmp_path):
    incomplete = {key: value for key, value in RECORD.items() if key not in ("image", "model")}
    result = write(tmp_path, record=incomplete)
    assert result["failed"]
    assert result["msg"].startswith("record lacks image, model; rule:")


def test_record_info_finds_the_last_passed_and_the_latest_of_the_inventory(tmp_path):
    records = tmp_path / "records"
    passed = write(records, overlays=[OVERLAY])["id"]
    for name, record in (
        ("20990101T000000Z-spark-pair-deploy", dict(RECORD, status="failed")),
        ("20990101T000001Z-other-deploy", dict(RECORD, inventory="other")),
    ):
        (records / f"{name}.json").write_text(json.dumps(dict(record, id=name)))
    result = run_module(vllm_record_info, {"dir": str(records), "inventory": "spark-pair"}, check_mode=True)
    assert result["changed"] is False
    assert result["last_passed"]["id"] == passed
    sha = result["last_passed"]["overlays"][0]["sha256"]
    assert result["last_passed"]["restore_overlays"] == [
        {"src": str(records / "overlays" / sha), "dest": OVERLAY["dest"]}
    ]
    assert result["latest"]["id"] == "20990101T000000Z-spark-pair-deploy"
    assert [r["id"] for r in result["records"]] == [
        passed,
        "20990101T000000Z-spark-pair-deploy",
        "20990101T000001Z-other-deploy",
    ]
    everything = run_module(vllm_record_info, {"dir": str(records)})
    assert everything["latest"]["id"] == "20990101T000001Z-other-deploy"


def test_record_without_a_readable_key_file_writes_nothing(tmp_path):
    records = tmp_path / "records"
    result = write(records, api_key_file=str(tmp_path / "missing"))
    assert result["failed"]
    assert result["msg"] == f"api_key_file {tmp_path / 'missing'}: No such file or directory; nothing was written"
    assert not records.exists()


def test_record_info_names_an_unreadable_record(tmp_path):
    (tmp_path / "20261201T000000Z-x-deploy.json").write_text("{ cut short")
    result = run_module(vllm_record_info, {"dir": str(tmp_path)})
    assert result["failed"]
    assert result["msg"].startswith(f"record {tmp_path / '20261201T000000Z-x-deploy.json'} is unreadable: ")


def test_record_info_on_an_empty_directory_returns_nulls(tmp_path):
    result = run_module(vllm_record_info, {"dir": str(tmp_path)})
    assert (result["last_passed"], result["latest"], result["records"]) == (None, None, [])
    assert result["last_timed_start"] is None


def test_record_info_finds_the_last_passing_start_that_reached_ready(tmp_path):
    timed = [{"seconds": 1.0, "event": "rank 1 (b) started"}, {"seconds": 40.0, "event": READY}]
    for name, record in (
        ("20990101T000000Z-spark-pair-deploy", dict(RECORD, timings=timed)),
        ("20990101T000001Z-spark-pair-deploy", dict(RECORD, timings=[])),  # a rerun that restarted nothing
        ("20990101T000002Z-spark-pair-deploy", dict(RECORD, status="failed", timings=timed)),
    ):
        (tmp_path / f"{name}.json").write_text(json.dumps(dict(record, id=name)))
    result = run_module(vllm_record_info, {"dir": str(tmp_path), "inventory": "spark-pair"})
    assert result["last_passed"]["id"] == "20990101T000001Z-spark-pair-deploy"
    assert result["last_timed_start"] == {"record": "20990101T000000Z-spark-pair-deploy", "timings": timed}
    same_image = run_module(vllm_record_info, {"dir": str(tmp_path), "image_digest": RECORD["image"]["digest"]})
    assert same_image["last_timed_start"]["record"] == "20990101T000000Z-spark-pair-deploy"
    new_image = run_module(vllm_record_info, {"dir": str(tmp_path), "image_digest": "sha256:" + "f" * 64})
    assert new_image["last_timed_start"] is None, "another image may need longer in a stage: no budgets"


def test_record_info_refuses_an_option_it_no_longer_has(tmp_path):
    result = run_module(vllm_record_info, {"dir": str(tmp_path), "before": "x"})
    assert result["failed"] and "Unsupported parameters" in result["msg"] and "before" in result["msg"]
