"""Acceptance gate, deployment records and rollback on the served test-bed pair (real vLLM CPU engine)."""

import base64
import json
import os
import signal
import subprocess
import threading
import time

import pytest
from ansible.module_utils.deploy_record import (
    last_passed,
    read_key,
    read_records,
    rollback_target,
    sign,
    signature_problem,
)

from tests.runner import ansible_playbook_argv
from tests.testbed import service_faults as sf
from tests.testbed.helpers import ENV_BASE, ROOT, local_patch, node_exec, playbook

pytestmark = pytest.mark.testbed
RECORDS = ROOT / ".testbed" / sf.INSTANCE / "spark-serve" / "records"
# The controller's record key (the test bed's controller dir): every record is signed with it.
RECORD_KEY = ROOT / ".testbed" / sf.INSTANCE / "spark-serve" / "record-key"
HEAD_RECORDS = "/var/lib/spark-serve/records"
# A change of the shipped profile that the gate passes: what the Ctrl-C'd deploy brings, and what serves afterwards.
CHANGE = ["-e", json.dumps({"spark_serve_profile_overrides": {"engine": {"max_num_seqs": 3}}})]


def records():
    """Every record of the pair, oldest first."""
    found = [json.loads(path.read_text()) for path in sorted(RECORDS.glob("*.json"))]
    return [r for r in found if r["inventory"] == "testbed-pair"]


def new_records(before):
    known = {r["id"] for r in before}
    return [r for r in records() if r["id"] not in known]


def serving_argv():
    rc, cmd = node_exec(0, "docker inspect -f '{{json .Config.Cmd}}' spark-serve-rank0")
    assert rc == 0, cmd
    return json.loads(cmd)


def answers():
    with sf.post("/v1/chat/completions", sf.chat("still there?")) as response:
        return json.load(response)["usage"]["completion_tokens"] > 0


def interrupt_the_deploy_once_the_head_started(*extra, timeout_s=900):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) while the staged start watches the ranks:
    the containers were started and keep loading. A user presses it again when the run has not ended 10 s later
    (ansible-core sometimes waits for the interrupted worker). Returns the run's output."""
    proc = subprocess.Popen(
        ansible_playbook_argv("-i", sf.PAIR, "site.yml", "--tags", "deploy", *extra),
        cwd=ROOT,
        env=ENV_BASE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )

    def press_ctrl_c_until_it_ends():
        for signum, wait_s in ((signal.SIGINT, 10), (signal.SIGINT, 60), (signal.SIGKILL, 30)):
            os.killpg(proc.pid, signum)
            try:
                proc.wait(timeout=wait_s)
                return
            except subprocess.TimeoutExpired:
                continue

    lines, presser = [], threading.Thread(target=press_ctrl_c_until_it_ends)
    killer = threading.Timer(timeout_s, lambda: os.killpg(proc.pid, signal.SIGKILL))
    killer.start()
    for line in proc.stdout:
        lines.append(line)
        if presser.ident is None and "[vllm]" in line and "rank 0 (node-0):" in line:
            presser.start()
    killer.cancel()
    proc.wait(timeout=120)
    return "".join(lines)


@pytest.fixture(scope="module")
def released(served_pair):
    """(7b) A deploy of a changed profile cut short by Ctrl-C once the ranks started: they keep loading and serve a
    configuration that never met the gate. The same command run again restarts nothing, but the head's running.json
    names no passed record for what runs, so the rerun runs the gate on the running service and records it."""
    before = records()
    interrupted = interrupt_the_deploy_once_the_head_started(*CHANGE)
    assert "acceptance PASSED" not in interrupted and "acceptance FAILED" not in interrupted, interrupted[-3000:]
    assert new_records(before) == [], "the run was cut short before the gate and the record"
    for _ in range(300):  # bounded: the ranks load without the playbook
        if sf.health() == 200:
            break
        time.sleep(1)
    assert sf.health() == 200 and len(sf.engine_containers(0) + sf.engine_containers(1)) == 2, interrupted[-3000:]
    rerun = sf.noop_rerun(*CHANGE)
    print(f"\n[rerun after Ctrl-C] {rerun['seconds']:.0f} s, restarts={rerun['restarts']}, the gate ran")
    assert rerun["rc"] == 0 and rerun["restarts"] == 0, rerun["out"][-6000:]
    created = new_records(before)
    assert len(created) == 1, created
    return {"out": rerun["out"], "record": created[0]}


def test_a_good_deploy_passes_the_gate_and_is_recorded(released):
    out, record = released["out"], released["record"]
    assert "acceptance PASSED" in out
    assert (record["restarted"], record["timings"]) == (False, []), "gated without a restart, no start to time"
    _, running = node_exec(0, "cat /var/lib/spark-serve/records/running.json")
    running = json.loads(running)
    assert (running["record"], running["status"]) == (record["id"], "passed"), running
    assert running["config_hashes"] == [r["config_hash"] for r in record["ranks"]], running
    image = json.loads((ROOT / ".testbed" / sf.INSTANCE / "engine-image.json").read_text())
    assert (record["kind"], record["status"], record["profile_name"]) == ("deploy", "passed", "testbed")
    # Built on the head from images/testbed on the pushed image, loaded on node-1: one image id on both nodes.
    assert record["image"]["build"]["base"] == f"{image['name']}@{image['digest']}"
    assert record["image"]["ref"].startswith("spark-serve/testbed:") and record["image"]["build"]["patches"]
    _, node1_id = node_exec(1, f"docker image inspect -f '{{{{.Id}}}}' {record['image']['ref']}")
    assert record["image"]["id"].startswith("sha256:") and record["image"]["id"] == node1_id.strip()
    assert record["model"]["commit"].startswith(record["model"]["revision"])
    assert len(record["model"]["files_sha256"]) == 64
    assert [r["host"] for r in record["ranks"]] == ["node-0", "node-1"]
    assert "--headless" in record["ranks"][1]["argv"]
    summary = record["acceptance"]["summary"]
    assert record["acceptance"]["passed"] and summary["hot_hit_ratio"] >= 0.5, summary
    assert record["versions"]["ansible-core"]
    assert (RECORDS / f"{record['id']}.md").read_text().startswith(f"# Deployment {record['id']}")
    rc, _ = node_exec(0, f"test -s /var/lib/spark-serve/records/{record['id']}.json")
    assert rc == 0, "the head keeps a copy of the record"


@pytest.mark.extended
def test_a_rejected_deploy_is_rolled_back_and_both_records_stay(released, tmp_path):
    """Alone proves the automatic rollback after the gate rejects a started change, to the good record's arguments
    and its image id on every rank (the rejected deploy ran another image), both records kept."""
    good = records()[-1]
    assert good["status"] == "passed"
    before = records()
    started = time.monotonic()
    # The rejected deploy also runs another image: images/testbed with a patch of the user's (built by the prepare
    # play's image step): the rollback must bring back the good record's image id, not only its arguments.
    with local_patch(tmp_path) as images:
        rc, out = playbook("molecule/engine_image/build.yml", "inventories/testbed-pair", *images, timeout=1800)
        assert rc == 0, out[-4000:]
        rc, out = sf.deploy(
            "-e", json.dumps({"spark_serve_profile_overrides": {"engine": {"enable_prefix_caching": False}}}), *images
        )
    print(f"\n[rejected deploy of a changed image + automatic rollback] {time.monotonic() - started:.0f} s")
    assert rc != 0, "a rejected deploy must fail the run even after a successful rollback"
    assert "acceptance FAILED" in out and "hit ratio" in out, out[-4000:]
    assert f"Rolled back to {good['id']}" in out and "it passed the gate again and serves now" in out, out[-4000:]
    rejected, rollback = new_records(before)
    assert (rejected["kind"], rejected["status"], rejected["restarted"]) == ("deploy", "failed", True)
    assert any("/health 200" in t["event"] for t in rejected["timings"]), rejected["timings"]
    assert rejected["profile"]["engine"]["enable_prefix_caching"] is False
    assert "hit ratio" in rejected["reason"]
    assert (rollback["kind"], rollback["status"], rollback["restores"]) == ("rollback", "passed", good["id"])
    assert {r["id"] for r in before} <= {r["id"] for r in records()}, "a record was deleted"
    assert "--no-enable-prefix-caching" not in serving_argv()
    assert rejected["image"]["ref"] != good["image"]["ref"] and rejected["image"]["id"] != good["image"]["id"]
    assert [p["series"] for p in rejected["image"]["build"]["patches"]] == ["patches", "patches.local"]
    assert rollback["image"]["id"] == good["image"]["id"]
    for index in (0, 1):  # every rank runs the good record's image again
        _, running_id = node_exec(index, f"docker inspect -f '{{{{.Image}}}}' spark-serve-rank{index}")
        assert running_id.strip() == good["image"]["id"], index
    assert answers()


def test_a_failed_start_names_the_record_to_restore_and_rollback_yml_restores_it(released, tmp_path):
    """Alone proves, with the profile's rollback off: a failed start names the record rollback.yml would restore and
    keeps its failed record; rollback.yml restores it from nothing serving; restoring what serves is a no-op; the
    restored record's profile restarts nothing. (The automatic rollback after a failed start is test_service.py's
    (k).)"""
    good = [r for r in records() if r["status"] == "passed"][-1]
    broken = tmp_path / "interface_raises.py"
    broken.write_text(sf.image_source("platforms/interface.py") + "\nraise ImportError('spark-serve: broken')\n")
    overlays = [{"src": str(broken), "dest": f"{sf.IMAGE_VLLM}/platforms/interface.py"}]
    before = records()
    # The profile's rollback off: the automatic rollback after a failed start is test_service.py's (k).
    no_rollback = {"overlays": overlays, "acceptance": {"rollback": False}}
    rc, out = sf.deploy("-e", json.dumps({"spark_serve_profile_overrides": no_rollback}))
    assert rc != 0
    assert "Nothing serves now: every rank was stopped" in out, out[-4000:]
    assert f"`ansible-playbook playbooks/rollback.yml` restores {good['id']}" in out, out[-4000:]
    assert sf.engine_containers(0) == [] and sf.engine_containers(1) == []
    (failed,) = new_records(before)
    assert failed["status"] == "failed" and failed["overlays"][0]["dest"] == overlays[0]["dest"]

    started = time.monotonic()
    rc, out = playbook("playbooks/rollback.yml", timeout=1800)
    print(f"\n[rollback.yml after a failed start] {time.monotonic() - started:.0f} s")
    assert rc == 0, out[-6000:]
    (restored,) = new_records(before + [failed])
    # good is the automatic rollback's record: restoring it restores the deployment that one restored.
    deployment = good.get("restores") or good["id"]
    assert (restored["kind"], restored["status"], restored["restores"]) == ("rollback", "passed", deployment)
    assert restored["overlays"] == good["overlays"]
    assert answers()

    # Restoring what already serves is a no-op: nothing restarts, nothing is recorded, the run succeeds.
    rc, out = playbook("playbooks/rollback.yml", sf.PAIR, "-e", f"spark_serve_rollback_to={deployment}", timeout=1800)
    assert rc == 0 and sf.changed_count(out) == 0, out[-6000:]
    assert new_records(before + [failed, restored]) == []

    # (7a) The restored record and the profile it came from are one spec in one canonical form: site.yml with that
    # profile restarts nothing (the record's JSON keeps its keys sorted; the argv and the config hash do not care).
    rerun = sf.noop_rerun(*CHANGE)
    print(f"\n[site.yml after rollback.yml] changed={rerun['changed']}, restarts={rerun['restarts']}")
    # (The controller's rendered rank files change back to this profile's: the nodes change nothing.)
    recap = sf.recap(rerun["out"])
    assert rerun["rc"] == 0 and rerun["restarts"] == 0, rerun["out"][-6000:]
    assert recap["node-0"]["changed"] == recap["node-1"]["changed"] == 0, recap
    assert new_records(before + [failed, restored]) == [], "what runs already has its passed record"


def head_records():
    """The passed records of the pair whose copies the head keeps, by id."""
    pattern = "/var/lib/spark-serve/records/*-testbed-pair-*.json"
    rc, out = node_exec(
        0, f"python3 -c 'import glob, json; print(json.dumps([json.load(open(p)) for p in glob.glob(\"{pattern}\")]))'"
    )
    assert rc == 0, out
    return {r["id"]: r for r in json.loads(out) if r["status"] == "passed"}


def max_num_seqs(argv):
    return argv[argv.index("--max-num-seqs") + 1]


def test_a_fresh_controller_with_a_truncated_record_rolls_back_to_the_good_deployment_before_the_running_one(
    released, tmp_path
):
    """(20.3) A controller with no records but one truncated file (a fresh clone, a crash) that kept its record key
    (.spark-serve/record-key): rollback.yml takes back the head's copies that key signed (overlay texts included),
    names every other copy (one written before records were signed) and never uses it, names the truncated record
    and skips it, and restores the newest passed deployment other than the one running; a record id that cannot be
    restored is refused before anything changes."""
    _, running = node_exec(0, f"cat {HEAD_RECORDS}/running.json")
    passed = head_records()
    running = passed[json.loads(running)["record"]]
    image = running["image"]["ref"]
    now = running.get("restores") or running["id"]
    key = read_key(str(RECORD_KEY))  # kept by the "fresh" controller: only what it signed comes back
    signed = {name: r for name, r in passed.items() if signature_problem(r, key) is None}
    earlier = [r for r in signed.values() if (r.get("restores") or r["id"]) != now and r["image"]["ref"] == image]
    assert earlier, f"the test bed's records hold no signed passed deployment before {now} to roll back to"
    target = max(earlier, key=lambda r: r["id"])
    assert max_num_seqs(target["ranks"][0]["argv"]) != max_num_seqs(serving_argv()), "the target must differ"

    fresh = tmp_path / "records"
    fresh.mkdir()
    truncated = fresh / "29990101T000000.000000Z-testbed-pair-deploy.json"
    truncated.write_text('{"id": "29990101T000000.000000Z-testbed-pair-deploy", "status": "pas')
    on_fresh = ["-e", f"vllm_release_records_dir={fresh}"]
    rc, out = playbook("playbooks/rollback.yml", sf.PAIR, *on_fresh, "-e", "spark_serve_rollback_to=20000101T0Z-x")
    assert rc != 0 and "spark_serve_rollback_to=20000101T0Z-x: no such record" in out, out[-4000:]
    assert "nothing was changed" in out and sf.health() == 200
    flat = " ".join(out.split())
    for unsigned in set(passed) - set(signed):  # records of an earlier test-bed session, before records were signed
        assert f"head copy node-0:{HEAD_RECORDS}/{unsigned}.json is not used: " in flat, out[-4000:]
        assert not (fresh / f"{unsigned}.json").exists()

    started = time.monotonic()
    rc, out = playbook("playbooks/rollback.yml", sf.PAIR, *on_fresh, timeout=1800)
    print(f"\n[rollback.yml on a fresh controller to {target['id']}] {time.monotonic() - started:.0f} s")
    assert rc == 0, out[-6000:]
    assert f"record {truncated} is unreadable and was skipped" in " ".join(out.split()), out[-6000:]
    assert (fresh / f"{target['id']}.json").is_file(), "the head's copy was fetched"
    restored = [json.loads(p.read_text()) for p in fresh.glob("*-testbed-pair-rollback.json")]
    restored = [r for r in restored if r["id"] not in passed]
    assert [(r["status"], r["restores"]) for r in restored] == [("passed", target.get("restores") or target["id"])]
    assert max_num_seqs(serving_argv()) == max_num_seqs(target["ranks"][0]["argv"])
    assert answers()


# A baseline no engine meets: a gate compared with it would reject every deploy and roll back to the planted record.
IMPOSSIBLE = {"passed": True, "failures": [], "summary": {"hot_ttft_s": 1e-06, "decode_tps": 1e9, "hot_hit_ratio": 1.0}}


def test_a_passed_record_planted_on_the_head_is_named_and_is_neither_the_gate_baseline_nor_the_rollback_target(
    released,
):
    """(39.2) Two "passed" records planted in the head's records folder under the newest ids, with a baseline no
    engine meets: one unsigned, one signed with a key that is not the controller's. rollback.yml asked for the first
    runs only its history step (the lock, the head's copies, the records; the id is not found, nothing starts): it
    names each planted copy and why it is not used, and the controller's records never hold them, so the baseline the
    next deploy's gate compares with (the newest passed record) and the rollback target are the controller's own."""
    base = {k: v for k, v in released["record"].items() if k != "signature"}
    forged = {
        "29990101T000001.000000Z-testbed-pair-deploy": ("it carries no signature", None),
        "29990101T000002.000000Z-testbed-pair-deploy": ("signed with another key", b"guessed-record-key-0123456789abc"),
    }
    try:
        for name, (_, guessed) in forged.items():
            record = dict(base, id=name, acceptance=IMPOSSIBLE)
            text = json.dumps(sign(record, guessed) if guessed else record, indent=2, sort_keys=True)
            encoded = base64.b64encode(text.encode()).decode()
            rc, out = node_exec(0, f"echo {encoded} | base64 -d > {HEAD_RECORDS}/{name}.json")
            assert rc == 0, out
        wanted = next(iter(forged))
        started = time.monotonic()
        rc, out = playbook("playbooks/rollback.yml", sf.PAIR, "-e", f"spark_serve_rollback_to={wanted}")
        print(f"\n[rollback.yml to a planted record: history only] {time.monotonic() - started:.0f} s")
        flat = " ".join(out.split())
        assert rc != 0 and f"spark_serve_rollback_to={wanted}: no such record" in flat, out[-4000:]
        assert "nothing was changed" in flat and sf.health() == 200
        for name, (why, _) in forged.items():
            assert f"head copy node-0:{HEAD_RECORDS}/{name}.json is not used: {why}" in flat, out[-4000:]
            assert not (RECORDS / f"{name}.json").exists(), "a planted copy joined the controller's records"
    finally:
        node_exec(0, "rm -f " + " ".join(f"{HEAD_RECORDS}/{name}.json" for name in forged))
    records, _ = read_records(sorted(str(path) for path in RECORDS.glob("*.json")))
    baseline = last_passed(records, "testbed-pair")
    assert baseline["id"] not in forged and baseline["acceptance"]["summary"] != IMPOSSIBLE["summary"], baseline["id"]
    _, running = node_exec(0, f"cat {HEAD_RECORDS}/running.json")
    target, _ = rollback_target(records, "testbed-pair", "", json.loads(running)["record"])
    assert target is None or target["id"] not in forged, target["id"]
