"""library/vllm_record.py signs every record with the controller's key; library/vllm_record_import.py takes the
head's copies back only when they verify, and vllm_record_info never sees the others: a planted "passed" record with
an impossible baseline is neither the gate's baseline nor the rollback's target (issue 39, item 2)."""

import base64
import hashlib
import json
import os
import shutil

import pytest
from ansible.module_utils.deploy_record import COPY_RULE, key_id, sign
from ansible.modules import vllm_record, vllm_record_import, vllm_record_info

from tests.module_harness import run_module
from tests.records import DEPLOY_RECORD

RECORD = {**DEPLOY_RECORD, "acceptance": {"passed": True, "summary": {"hot_ttft_s": 0.4, "decode_tps": 31.5}}}
OVERLAY = {"src": "overlays/interface.py", "dest": "/vllm/platforms/interface.py", "content": "def f():\n    pass\n"}
OVERLAY_SHA = hashlib.sha256(OVERLAY["content"].encode()).hexdigest()
# What a planted record claims: the newest passed deployment, with a baseline no real engine meets.
IMPOSSIBLE = {"passed": True, "summary": {"hot_ttft_s": 0.000001, "decode_tps": 1e9, "hot_hit_ratio": 1.0}}
FORGED_ID = "29990101T000000.000000Z-spark-pair-deploy"


@pytest.fixture()
def head(tmp_path):
    """A controller that wrote two signed records (one with an overlay) and kept their copies on its head, then lost
    its records folder; its .spark-serve (the record key) is kept. Yields (key file, records, the head's folder)."""
    key_file, records, head_dir = tmp_path / "spark-serve" / "record-key", tmp_path / "records", tmp_path / "head"
    for overlays in ([OVERLAY], []):
        run_module(vllm_record, dict(dir=str(records), record=RECORD, overlays=overlays, key_file=str(key_file)))
    shutil.copytree(records, head_dir, ignore=shutil.ignore_patterns("*.md"))
    shutil.rmtree(records)
    return key_file, records, head_dir


def listing(head_dir):
    """What the head's find reports: every file under its records folder."""
    return [
        {"path": str(path), "islnk": path.is_symlink(), "isreg": path.is_file() and not path.is_symlink()}
        for path in sorted(head_dir.rglob("*"))
        if not path.is_dir()
    ]


def choose(records, head_dir, reported, check_mode=False):
    args = dict(reported=reported, head="node-0", head_dir=str(head_dir), dir=str(records))
    return run_module(vllm_record_import, args, check_mode=check_mode)


def take_back(key_file, records, head_dir, check_mode=False):
    """history.yml's three steps: choose by name, read the chosen files as slurp does, import what verifies."""
    chosen = choose(records, head_dir, listing(head_dir), check_mode)
    assert chosen["refused"] == [], chosen["refused"]
    copies = {name: base64.b64encode((head_dir / name).read_bytes()).decode() for name in chosen["fetch"]}
    return import_copies(key_file, records, head_dir, copies, check_mode)


def import_copies(key_file, records, head_dir, copies, check_mode=False):
    args = dict(copies=copies, head="node-0", head_dir=str(head_dir), dir=str(records), key_file=str(key_file))
    return run_module(vllm_record_import, args, check_mode=check_mode)


def info(records):
    return run_module(vllm_record_info, {"dir": str(records), "inventory": "spark-pair"}, check_mode=True)


def plant(head_dir, name, record):
    (head_dir / f"{name}.json").write_text(json.dumps(dict(record, id=name), indent=2, sort_keys=True))


def test_record_signs_what_it_writes_with_a_key_it_creates_0600_and_never_shows(tmp_path):
    key_file, records = tmp_path / "record-key", tmp_path / "records"
    result = run_module(vllm_record, dict(dir=str(records), record=RECORD, key_file=str(key_file)))
    key = bytes.fromhex(key_file.read_text().strip())
    assert os.stat(key_file).st_mode & 0o777 == 0o600
    saved = json.loads((records / f"{result['id']}.json").read_text())
    assert saved["signature"] == sign({k: v for k, v in saved.items() if k != "signature"}, key)["signature"]
    assert saved["signature"]["key_id"] == key_id(key)
    assert key.hex() not in json.dumps(result) and key.hex() not in (records / f"{result['id']}.json").read_text()
    again = run_module(vllm_record, dict(dir=str(records), record=RECORD, key_file=str(key_file)))
    assert json.loads((records / f"{again['id']}.json").read_text())["signature"]["key_id"] == key_id(key)


def test_record_refuses_a_key_file_others_can_read_and_writes_nothing(tmp_path):
    key_file, records = tmp_path / "record-key", tmp_path / "records"
    key_file.write_text("ab" * 32 + "\n")
    key_file.chmod(0o644)
    result = run_module(vllm_record, dict(dir=str(records), record=RECORD, key_file=str(key_file)))
    assert result["failed"] and result["msg"].startswith(f"record key file {key_file}: mode 0644; rule: ")
    assert result["msg"].endswith("; nothing was written") and "ab" * 32 not in result["msg"]
    assert not records.exists()


def test_a_fresh_controller_with_its_key_takes_back_every_signed_copy_and_its_overlay_text(head):
    key_file, records, head_dir = head
    result = take_back(key_file, records, head_dir)
    assert result["changed"] and result["refused"] == [] and result["warnings"] == []
    assert sorted(result["imported"]) == sorted([p.name for p in head_dir.glob("*.json")] + [f"overlays/{OVERLAY_SHA}"])
    found = info(records)
    assert found["unreadable"] == [] and found["last_passed"]["overlay_problems"] == []
    assert len(found["records"]) == 2
    assert take_back(key_file, records, head_dir)["imported"] == [], "a second run has nothing to take back"


def signed_elsewhere():
    return sign(dict(RECORD, id="29990101T000000.000000Z-spark-pair-deploy", acceptance=IMPOSSIBLE), b"k" * 32)


@pytest.mark.parametrize(
    ("forge", "why"),
    [
        (lambda head_dir: plant(head_dir, FORGED_ID, dict(RECORD, acceptance=IMPOSSIBLE)), "it carries no signature"),
        (
            lambda head_dir: (head_dir / f"{FORGED_ID}.json").write_text(json.dumps(signed_elsewhere())),
            "signed with another key",
        ),
        (
            # A signed copy of the controller's own record, its baseline raised and moved to the newest id.
            lambda head_dir: plant(
                head_dir, FORGED_ID, dict(json.loads(next(head_dir.glob("*.json")).read_text()), acceptance=IMPOSSIBLE)
            ),
            "its content does not match its signature (changed after it was signed)",
        ),
    ],
    ids=["unsigned", "another key", "a signed record changed"],
)
def test_a_planted_passed_record_is_named_and_is_neither_the_baseline_nor_the_rollback_target(head, forge, why):
    key_file, records, head_dir = head
    forge(head_dir)
    result = take_back(key_file, records, head_dir)
    (refused,) = result["refused"]
    assert refused["path"] == f"node-0:{head_dir}/{FORGED_ID}.json" and why in refused["error"], refused
    (warning,) = result["warnings"]
    assert warning.startswith(f"head copy node-0:{head_dir}/{FORGED_ID}.json is not used: ") and why in warning
    assert not (records / f"{FORGED_ID}.json").exists()
    found = info(records)
    assert found["last_passed"]["id"] != FORGED_ID and found["last_passed"]["acceptance"] == RECORD["acceptance"]
    assert found["rollback_target"]["id"] != FORGED_ID
    assert FORGED_ID not in [r["id"] for r in found["records"]]


def test_a_head_copy_never_replaces_a_record_the_controller_has_and_an_unsigned_own_record_stays_trusted(head):
    """A record written before records were signed is the controller's own: it stays the baseline. The head's
    (forged) copy under its name is not even read."""
    key_file, records, head_dir = head
    records.mkdir()
    own = dict(RECORD, id="20980101T000000.000000Z-spark-pair-deploy")
    (records / f"{own['id']}.json").write_text(json.dumps(own))
    plant(head_dir, own["id"], dict(RECORD, status="failed"))
    result = take_back(key_file, records, head_dir)
    assert own["id"] + ".json" not in result["imported"] and result["refused"] == []
    assert json.loads((records / f"{own['id']}.json").read_text()) == own
    assert {r["id"] for r in info(records)["records"]} >= {own["id"]}


def test_an_overlay_text_that_does_not_rehash_to_its_name_is_named_and_not_stored(head):
    key_file, records, head_dir = head
    (head_dir / "overlays" / OVERLAY_SHA).write_text("import os; os.system('planted')\n")
    result = take_back(key_file, records, head_dir)
    (refused,) = result["refused"]
    assert refused["path"] == f"node-0:{head_dir}/overlays/{OVERLAY_SHA}", refused
    assert refused["error"].startswith("its text hashes to ") and refused["error"].endswith("not to its name")
    assert not (records / "overlays" / OVERLAY_SHA).exists()
    (with_overlay,) = [p.stem for p in head_dir.glob("*.json") if json.loads(p.read_text())["overlays"]]
    args = {"dir": str(records), "inventory": "spark-pair", "restore": with_overlay}
    (problem,) = run_module(vllm_record_info, args)["rollback_target"]["overlay_problems"]
    assert problem.endswith("No such file or directory"), "the restore refuses a record whose text is missing"


def test_a_text_no_record_names_is_left_unused(head):
    key_file, records, head_dir = head
    stray = "x = 1\n"
    (head_dir / "overlays" / hashlib.sha256(stray.encode()).hexdigest()).write_text(stray)
    result = take_back(key_file, records, head_dir)
    assert not any(hashlib.sha256(stray.encode()).hexdigest() in name for name in result["imported"])
    assert result["refused"] == []


def test_without_the_record_key_no_head_copy_is_used_and_each_is_named(head, tmp_path):
    _, records, head_dir = head
    result = take_back(tmp_path / "lost" / "record-key", records, head_dir)
    assert result["imported"] == [] and not records.exists()
    assert len(result["refused"]) == len(list(head_dir.glob("*.json")))
    for refused in result["refused"]:
        assert refused["error"].startswith(f"no record key to verify it with (record key file {tmp_path}/lost/")


def test_check_mode_names_what_it_would_take_back_and_writes_nothing(head):
    key_file, records, head_dir = head
    result = take_back(key_file, records, head_dir, check_mode=True)
    assert result["changed"] and len(result["imported"]) == 3 and not records.exists()


def test_a_forged_listing_is_refused_by_path_before_anything_is_read_and_nothing_is_written(head, tmp_path):
    """(50.2) A compromised head's find reports paths into the controller's records and home, a link and a name no
    record has: each is named with the head and the path, and only the real copies are chosen to be read."""
    _, records, head_dir = head
    up = "/.." * len(head_dir.parts)
    forged = [
        {"path": f"{head_dir}{up}{records}/{FORGED_ID}.json", "islnk": False, "isreg": True},
        {"path": f"{head_dir}{up}{tmp_path}/home/.bashrc", "islnk": False, "isreg": True},
        {"path": f"{tmp_path}/home/.bashrc", "islnk": False, "isreg": True},
        {"path": f"{head_dir}/{FORGED_ID}.json\n", "islnk": False, "isreg": True},
        {"path": f"{head_dir}/{FORGED_ID}.json", "islnk": True, "isreg": False},
        {"path": f"{head_dir}/notes.json", "islnk": False, "isreg": True},
    ]
    result = choose(records, head_dir, listing(head_dir) + forged)
    real = sorted(str(path.relative_to(head_dir)) for path in head_dir.rglob("*") if path.is_file())
    assert (result["changed"], result["fetch"]) == (False, real)
    assert [r["path"] for r in result["refused"]] == [f"node-0:{entry['path']}" for entry in forged]
    whys = ["has a '..' component", "has a '..' component", "is not in", "control character", "not a regular file"]
    for refused, warning, why in zip(result["refused"], result["warnings"], [*whys, "is neither"], strict=True):
        assert why in refused["error"] and refused["error"].endswith(COPY_RULE), refused
        assert warning == f"head node-0 reported a file that is not read: {refused['error']}"
    assert not records.exists() and not (tmp_path / "home").exists()


def test_a_copy_under_a_name_no_record_has_is_never_written(head, tmp_path):
    """The import writes under the names it is given: one that is no record's or text's is named, never written."""
    key_file, records, head_dir = head
    text = base64.b64encode((next(head_dir.glob("*.json"))).read_bytes()).decode()
    names = ["../planted.json", f"{tmp_path}/planted.json", "overlays/../../planted.json", "sub/x.json"]
    result = import_copies(key_file, records, head_dir, dict.fromkeys(names, text))
    assert (result["changed"], result["imported"]) == (False, [])
    assert sorted(r["path"] for r in result["refused"]) == sorted(f"node-0:{head_dir}/{name}" for name in names)
    assert all(COPY_RULE in r["error"] for r in result["refused"])
    assert not records.exists() and not list(tmp_path.rglob("planted.json"))


def test_a_copy_that_is_not_base64_is_named_and_not_used(head):
    key_file, records, head_dir = head
    result = import_copies(key_file, records, head_dir, {f"{FORGED_ID}.json": "not base64!"})
    assert result["refused"] == [
        {"path": f"node-0:{head_dir}/{FORGED_ID}.json", "error": "its content is not base64 (as slurp returns it)"}
    ]
    assert not records.exists()


def test_a_file_the_controller_has_is_not_even_chosen(head):
    key_file, records, head_dir = head
    take_back(key_file, records, head_dir)
    assert choose(records, head_dir, listing(head_dir))["fetch"] == []
