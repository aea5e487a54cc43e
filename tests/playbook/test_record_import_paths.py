"""A compromised head's listing never chooses where the controller reads or writes (issue 50, item 2): the role's
history.yml runs on localhost against a "head" whose Python is compromised (it adds forged files to find's answer
and logs every module it runs). Every forged path is refused, naming the head and the path, before the head is
asked to read anything; the real signed copies still come back; nothing is written but those copies."""

import hashlib
import json
import sys

import pytest
import yaml
from ansible.module_utils.deploy_record import ensure_key, sign

from tests.records import DEPLOY_RECORD
from tests.runner import ansible_playbook

pytestmark = pytest.mark.playbook

RECORD_ID = "20261201T071500.123456Z-spark-pair-deploy"
FORGED_ID = "29990101T000000.000000Z-spark-pair-deploy"
OVERLAY = "def f():\n    pass\n"
OVERLAY_SHA = hashlib.sha256(OVERLAY.encode()).hexdigest()

# The head's Python, compromised: it runs each module as Python would, logs the module's arguments, and adds forged
# files to every find's answer (what root on the head can make its find report).
FORGING_PYTHON = """#!{python}
import json, subprocess, sys

done = subprocess.run([{python!r}, *sys.argv[1:]], stdin=sys.stdin, capture_output=True, text=True)
try:
    result = json.loads(done.stdout)
except ValueError:
    result = None
if isinstance(result, dict):
    with open({log!r}, "a") as log:
        log.write(json.dumps(result.get("invocation", {{}}).get("module_args", {{}})) + "\\n")
    if "examined" in result:
        result["files"] += json.loads({forged!r})
    done.stdout = json.dumps(result)
sys.stdout.write(done.stdout)
sys.stderr.write(done.stderr)
sys.exit(done.returncode)
"""


def head_keeps_a_signed_record(head_records, key_file):
    """The head's copies as a controller wrote them: one record, signed, and the overlay text it ran."""
    (head_records / "overlays").mkdir(parents=True)
    overlays = [{"src": "overlays/interface.py", "dest": "/vllm/platforms/interface.py", "sha256": OVERLAY_SHA}]
    record = dict(DEPLOY_RECORD, id=RECORD_ID, created_utc=RECORD_ID[:23], overlays=overlays)
    record = sign(json.loads(json.dumps(record)), ensure_key(str(key_file)))
    (head_records / f"{RECORD_ID}.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    (head_records / "overlays" / OVERLAY_SHA).write_text(OVERLAY)


def forged_listing(head_records, records, home):
    """(path, what its refusal says) of each file the compromised head adds to its find's answer."""
    up = "/.." * len(head_records.parts)
    return [
        (f"{head_records}{up}{records}/{FORGED_ID}.json", "has a '..' component"),  # a "passed" record, trusted
        (f"{head_records}{up}{home}/.bashrc", "has a '..' component"),  # code in the operator's home
        (f"{home}/.bashrc", "is not in"),
        (f"{head_records}/{FORGED_ID}.json\n", "holds a control character"),
        (f"{head_records}/{FORGED_ID}.json\x00.md", "holds a control character"),
        (f"{head_records}/overlays/../{FORGED_ID}.json", "has a '..' component"),
        (f"{head_records}/{FORGED_ID}.json", "is not a regular file (islnk True"),  # a link: a real find omits it
        (f"{head_records}/planted/{FORGED_ID}.json", "is neither <id>.json nor overlays/<64 lowercase hex>"),
    ]


def run_history(tmp_path, forged):
    """The role's history.yml on the compromised head; (rc, output, what it registered)."""
    head_records, records, key_file = tmp_path / "head" / "records", tmp_path / "records", tmp_path / "record-key"
    python = tmp_path / "head" / "python"
    entries = [{"path": path, "islnk": "islnk True" in why, "isreg": True, "size": 2} for path, why in forged]
    log = tmp_path / "head" / "modules.jsonl"
    python.write_text(FORGING_PYTHON.format(python=sys.executable, log=str(log), forged=json.dumps(entries)))
    python.chmod(0o755)
    local = {"ansible_connection": "local"}
    hosts = {
        "spark-a": dict(local, ansible_python_interpreter=str(python)),
        "localhost": dict(local, ansible_python_interpreter="{{ ansible_playbook_python }}"),
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    registered = tmp_path / "registered.json"
    play = {
        "name": "history",
        "hosts": "spark-a",
        "gather_facts": False,
        "vars": {
            "vllm_release_node_records_dir": str(head_records),
            "vllm_release_records_dir": str(records),
            "vllm_release_record_key_file": str(key_file),
            "vllm_release_inventory": "spark-pair",
        },
        "tasks": [
            {"name": "history", "ansible.builtin.include_role": {"name": "vllm_release", "tasks_from": "history"}},
            {
                "name": "keep what it registered",
                "ansible.builtin.copy": {
                    "content": "{{ {'chosen': vllm_release_head_copies, 'imported': vllm_release_imported,"
                    " 'history': vllm_release_history} | to_json }}",
                    "dest": str(registered),
                },
                "delegate_to": "localhost",
            },
        ],
    }
    (tmp_path / "history.yml").write_text(yaml.safe_dump([play], sort_keys=False))
    rc, out = ansible_playbook("-i", tmp_path / "hosts.yml", tmp_path / "history.yml", timeout=300)
    kept = json.loads(registered.read_text()) if registered.exists() else {}
    reads = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return rc, out, kept, reads


def files_under(folder):
    return {str(path.relative_to(folder)) for path in folder.rglob("*") if not path.is_dir()}


def test_a_forged_listing_is_refused_before_any_read_and_only_the_signed_copies_are_written(tmp_path):
    head_records, records, home = tmp_path / "head" / "records", tmp_path / "records", tmp_path / "home"
    head_keeps_a_signed_record(head_records, tmp_path / "record-key")
    forged = forged_listing(head_records, records, home)
    before = files_under(tmp_path)

    rc, out, kept, reads = run_history(tmp_path, forged)

    assert rc == 0, out[-4000:]
    chosen = kept["chosen"]
    assert chosen["fetch"] == [f"{RECORD_ID}.json", f"overlays/{OVERLAY_SHA}"], chosen
    assert [r["path"] for r in chosen["refused"]] == [f"spark-a:{path}" for path, _ in forged]
    for refused, (path, why) in zip(chosen["refused"], forged, strict=True):
        assert why in refused["error"] and repr(path) in refused["error"], refused
    assert "head spark-a reported a file that is not read: path " in out
    # The head was asked to read only the chosen names (and running.json): no forged path reached a read.
    slurped = sorted(args["src"] for args in reads if set(args) >= {"src"} and "paths" not in args)
    expected = [f"{head_records}/{name}" for name in (f"{RECORD_ID}.json", f"overlays/{OVERLAY_SHA}", "running.json")]
    assert slurped == sorted(expected), slurped
    assert sorted(kept["imported"]["imported"]) == sorted(chosen["fetch"]) and kept["imported"]["refused"] == []
    assert kept["history"]["last_passed"]["id"] == RECORD_ID
    # Nothing was written but the two copies in the controller's records (and the test's own files).
    written = files_under(tmp_path) - before
    assert written == {f"records/{RECORD_ID}.json", f"records/overlays/{OVERLAY_SHA}", "head/modules.jsonl"} | {
        "head/python",
        "hosts.yml",
        "history.yml",
        "registered.json",
    }
    assert not home.exists()
