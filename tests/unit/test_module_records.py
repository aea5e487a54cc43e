"""library/vllm_record.py and library/vllm_record_info.py run as Ansible runs them, on a temporary records
directory: what is written, what check mode leaves alone, redaction, refusals, and finding the last good record."""

import json
from pathlib import Path

import pytest
from ansible.module_utils.deploy_record import write_once
from ansible.modules import vllm_record, vllm_record_info

from tests.module_harness import run_module
from tests.records import DEPLOY_RECORD as RECORD

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


@pytest.mark.parametrize(
    "planted",
    ["../../../etc/shadow", "A" * 64, "0" * 63, None],
    ids=["a path", "upper case", "63 hex", "no hash"],
)
def test_a_record_whose_overlay_hash_is_no_hash_is_skipped_by_name(tmp_path, planted):
    """A record copied from a head is trusted only as far as it checks: an overlay `sha256` names a stored file, so
    anything but 64 lowercase hex makes the record unreadable (named, skipped), never a path that is opened."""
    records = tmp_path / "records"
    good = write(records, overlays=[OVERLAY])["id"]
    name = "20990101T000000Z-spark-pair-deploy"
    bad = dict(RECORD, id=name, overlays=[{"src": "o.py", "dest": "/x.py", "sha256": planted}])
    (records / f"{name}.json").write_text(json.dumps(bad))
    result = run_module(vllm_record_info, {"dir": str(records), "inventory": "spark-pair"}, check_mode=True)
    assert result["last_passed"]["id"] == good, "the planted record is neither the baseline nor a rollback target"
    assert [r["id"] for r in result["records"]] == [good]
    (warning,) = result["warnings"]
    assert f"{name}.json is unreadable" in warning and "overlays[0].sha256" in warning, warning
    assert "is not 64 lowercase hex" in warning


def test_a_stored_overlay_text_that_does_not_hash_to_its_name_is_named_for_the_restore(tmp_path):
    records = tmp_path / "records"
    write(records, overlays=[OVERLAY])
    result = run_module(vllm_record_info, {"dir": str(records), "inventory": "spark-pair"}, check_mode=True)
    assert result["last_passed"]["overlay_problems"] == []
    stored = result["last_passed"]["restore_overlays"][0]["src"]
    Path(stored).write_text("import os; os.system('planted')\n")
    result = run_module(vllm_record_info, {"dir": str(records), "inventory": "spark-pair"}, check_mode=True)
    (problem,) = result["last_passed"]["overlay_problems"]
    assert problem.startswith(f"{stored}: its text hashes to "), problem
    assert problem.endswith(f"the record says {Path(stored).name}"), problem
    Path(stored).unlink()
    result = run_module(vllm_record_info, {"dir": str(records), "inventory": "spark-pair"}, check_mode=True)
    assert result["last_passed"]["overlay_problems"] == [f"{stored}: No such file or directory"]


def test_record_without_a_readable_key_file_writes_nothing(tmp_path):
    records = tmp_path / "records"
    result = write(records, api_key_file=str(tmp_path / "missing"))
    assert result["failed"]
    assert result["msg"] == f"api_key_file {tmp_path / 'missing'}: No such file or directory; nothing was written"
    assert not records.exists()


def test_record_info_names_an_unreadable_record_and_skips_it(tmp_path):
    good = write(tmp_path)["id"]
    cut = tmp_path / "20991201T000000Z-spark-pair-deploy.json"
    cut.write_text('{"id": "20991201T000000Z-spark-pair-deploy", "status": "pass')
    result = run_module(vllm_record_info, {"dir": str(tmp_path), "inventory": "spark-pair"})
    assert not result.get("failed") and result["last_passed"]["id"] == good
    assert [u["path"] for u in result["unreadable"]] == [str(cut)]
    assert any(w.startswith(f"record {cut} is unreadable and was skipped: ") for w in result["warnings"])


def test_two_records_in_one_second_get_two_ids_and_no_file_is_overwritten_or_left_half_written(tmp_path):
    ids = {write(tmp_path)["id"] for _ in range(3)}
    assert len(ids) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{i}{ext}" for i in ids for ext in (".json", ".md"))
    existing = tmp_path / f"{min(ids)}.json"
    before = existing.read_text()
    with pytest.raises(FileExistsError):
        write_once(str(existing), "{}")
    assert existing.read_text() == before and not list(tmp_path.glob(".writing-*"))


def history(tmp_path):
    """deploy A passed, deploy B passed, rollback to A passed (runs A), deploy C failed, and another inventory."""
    for name, record in (
        ("20990101T000001Z-spark-pair-deploy", dict(RECORD)),
        ("20990101T000002Z-spark-pair-deploy", dict(RECORD)),
        (
            "20990101T000003Z-spark-pair-rollback",
            dict(RECORD, kind="rollback", restores="20990101T000001Z-spark-pair-deploy"),
        ),
        ("20990101T000004Z-spark-pair-deploy", dict(RECORD, status="failed")),
        ("20990101T000005Z-other-deploy", dict(RECORD, inventory="other")),
    ):
        (tmp_path / f"{name}.json").write_text(json.dumps(dict(record, id=name)))


@pytest.mark.parametrize(
    ("restore", "running", "target"),
    [
        ("", "", "20990101T000003Z-spark-pair-rollback"),  # nothing runs: the newest passed
        ("", "20990101T000002Z-spark-pair-deploy", "20990101T000003Z-spark-pair-rollback"),
        ("", "20990101T000003Z-spark-pair-rollback", "20990101T000002Z-spark-pair-deploy"),  # runs A: not A again
        ("", "20990101T000001Z-spark-pair-deploy", "20990101T000002Z-spark-pair-deploy"),
        (
            "20990101T000001Z-spark-pair-deploy",
            "20990101T000003Z-spark-pair-rollback",
            "20990101T000001Z-spark-pair-deploy",
        ),
    ],
)
def test_rollback_target_is_the_record_named_or_the_newest_passed_other_deployment(tmp_path, restore, running, target):
    history(tmp_path)
    args = {"dir": str(tmp_path), "inventory": "spark-pair", "restore": restore, "running": running}
    result = run_module(vllm_record_info, args)
    assert result["rollback_target"]["id"] == target and result["rollback_problem"] == ""
    assert result["rollback_target"]["restore_overlays"] == []


@pytest.mark.parametrize(
    ("restore", "problem"),
    [
        ("20990101T000009Z-spark-pair-deploy", "no such record; the newest passed ones: 20990101T000001Z"),
        ("20990101T000004Z-spark-pair-deploy", "its status is failed; only a deployment that passed the gate"),
        ("20990101T000005Z-other-deploy", "a record of inventory other, not spark-pair"),
    ],
)
def test_a_rollback_to_a_record_that_cannot_be_restored_is_refused_naming_it(tmp_path, restore, problem):
    history(tmp_path)
    result = run_module(vllm_record_info, {"dir": str(tmp_path), "inventory": "spark-pair", "restore": restore})
    assert result["failed"] and result["msg"].startswith(f"spark_serve_rollback_to={restore}: ")
    assert problem in result["msg"] and result["msg"].endswith("; nothing was changed")


def test_no_rollback_target_when_only_the_running_deployment_passed(tmp_path):
    name = write(tmp_path)["id"]
    result = run_module(vllm_record_info, {"dir": str(tmp_path), "inventory": "spark-pair", "running": name})
    assert result["rollback_target"] is None
    assert (
        result["rollback_problem"]
        == f"no deployment of inventory spark-pair other than the running one ({name}) passed"
    )


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
    same_image = run_module(vllm_record_info, {"dir": str(tmp_path), "image_ref": RECORD["image"]["ref"]})
    assert same_image["last_timed_start"]["record"] == "20990101T000000Z-spark-pair-deploy"
    new_image = run_module(vllm_record_info, {"dir": str(tmp_path), "image_ref": "spark-serve/gb10:" + "f" * 16})
    assert new_image["last_timed_start"] is None, "another image may need longer in a stage: no budgets"


def test_record_info_refuses_an_option_it_no_longer_has(tmp_path):
    result = run_module(vllm_record_info, {"dir": str(tmp_path), "before": "x"})
    assert result["failed"] and "Unsupported parameters" in result["msg"] and "before" in result["msg"]
