"""Faults for roles/engine_image and roles/hf_model on the two-node test bed.

(a) An interrupted model download resumes: the download container is killed mid-file, then the network
    cuts the same file again; the hub stand-in's request log proves that finished files are never
    requested again and that the cut file is continued with a Range request.
(b) A node given another engine image digest fails the play with one message naming node and digests,
    before either node pulls anything.
(c) A tag without a digest (and the other malformed pins) is refused before anything changes.
(d) The image built on the head is loaded on the other node, printing its progress.
(e) The copy to the other node prints progress lines; a stalled copy fails naming the node and the step, leaves
    nothing running, and a rerun completes it.
(f) A gated model downloads with the controller's token file, which no output shows and the head does not keep.
(g) A pull by digest prints its layers' bytes and ends with what it moved; a rerun pulls nothing.

Set-up is molecule/hf_model/prepare.yml (engine image pushed and pulled, fast link addressed); the model
caches are cleared with `rm` (test set-up only: the role never deletes a cache) and left complete.
"""

import hashlib
import json
import re
import shlex
import subprocess
import sys
import time

import pytest
from ansible.module_utils.image_recipe import recipe

from tests.runner import ansible_playbook_argv, command_env
from tests.testbed.helpers import INSTANCE, ROOT, assert_never_ran, local_patch, node_exec, run

# Extended (CI's rotation, slice node-roles): the gate's prepare stage builds the image on the head, loads it on the
# other node, downloads and copies the model on the pair it serves; these are the faults and second paths around it.
pytestmark = [pytest.mark.testbed, pytest.mark.extended]

STATE = ROOT / ".testbed" / INSTANCE
HUB_STATE = STATE / "services" / "hub-state"
HUB_REPO_DIR = STATE / "services" / "hub" / "spark-serve" / "tiny-llama"
CACHE = "/var/lib/spark-serve/huggingface"
COMMIT = "7e57bed05eed1a4c2f0b9d8e6a3c1f2e4d5b6a79"
SNAPSHOT = f"{CACHE}/hub/models--spark-serve--tiny-llama/snapshots/{COMMIT}"
BIG = "original/consolidated.bin"  # 24 MiB: larger than huggingface_hub's 10 MiB download chunk
CHUNK = 10 * 1024 * 1024
NODE_IPS = [f"10.253.{16 * int(INSTANCE)}.10", f"10.253.{16 * int(INSTANCE)}.11"]
IMAGES = "docker images --digests --format '{{.Repository}}@{{.Digest}} {{.ID}}' | sort"
ENV = {"MOLECULE_PROJECT_DIRECTORY": str(ROOT)}


def ansible(playbook, *extra, inventories=("inventories/testbed-pair",), timeout=1200):
    args = ansible_playbook_argv()
    for inventory in inventories:
        args += ["-i", inventory]
    return run([*args, playbook, *extra], timeout=timeout, env=ENV)


def sh(index, command, timeout=300):
    rc, out = node_exec(index, command, timeout=timeout)
    assert rc == 0, f"node-{index}: {command}\n{out}"
    return out


def hub_control(data):
    (HUB_STATE / "control.json").write_text(json.dumps(data) + "\n")


def hub_log(since=0):
    path = HUB_STATE / "requests.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines[since:]]


def file_gets(entries, event="end"):
    return [e for e in entries if e.get("file") and e["method"] == "GET" and e["event"] == event]


@pytest.fixture(scope="module")
def prepared(testbed):
    """Engine image in the registry and on both nodes, fast link addressed, hub answering."""
    rc, out = ansible("molecule/hf_model/prepare.yml", timeout=2400)
    assert rc == 0, out[-4000:]
    yield out
    hub_control({})


# ------------------------------------------------------------------------------------------------ (a)
def test_interrupted_download_resumes_without_refetching_finished_files(prepared):
    for index in (0, 1):
        sh(index, f"docker rm -f spark-serve-hf-download >/dev/null 2>&1; rm -rf {CACHE}")
    hub_control({"throttle_bps": {BIG: 1_000_000}})  # ~25 s for the big file: time to interrupt it
    mark = len(hub_log())

    # Phase 1: the download container is killed while the big file is in flight.
    args = ansible_playbook_argv(
        "-i", "inventories/testbed-pair", "molecule/hf_model/converge.yml", "-e", "hf_model_download_attempts=1"
    )
    proc = subprocess.Popen(
        args, cwd=ROOT, env=command_env(ENV), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 240
        while not file_gets(hub_log(mark), "start") or not any(
            e["file"] == BIG for e in file_gets(hub_log(mark), "start")
        ):
            assert time.monotonic() < deadline and proc.poll() is None, "the big file's transfer never started"
            time.sleep(0.5)
        time.sleep(4)  # a few MB into the big file
        sh(0, "docker kill spark-serve-hf-download")
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out[-3000:]
    assert "fatal: [node-0]" in out, out[-3000:]
    phase1 = hub_log(mark)
    finished = {e["file"] for e in file_gets(phase1) if e["complete"]}
    assert BIG not in finished and finished, phase1
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= finished, finished
    cut = [e for e in file_gets(phase1) if e["file"] == BIG]
    assert cut and not cut[-1]["complete"] and 0 < cut[-1]["bytes"] < 24 * 1024 * 1024, cut

    # Phase 2: run again; the network cuts the big file once more past the client's first 10 MiB chunk.
    hub_control({"drop_after": {BIG: CHUNK + 2 * 1024 * 1024}})
    mark2 = len(hub_log())
    start = time.monotonic()
    rc, out = ansible("molecule/hf_model/converge.yml")
    seconds = time.monotonic() - start
    assert rc == 0, out[-4000:]
    phase2 = hub_log(mark2)
    again = [e for e in phase2 if e.get("file") in finished and e["event"] == "end"]
    assert not again, f"finished files were requested again: {again}"
    big = [e for e in file_gets(phase2) if e["file"] == BIG]
    # The killed process's partial file is not reused (huggingface_hub >= 1.x writes to a per-process temp
    # file); the in-process cut is continued from the last full chunk with a Range request.
    assert [(e["range"], e["status"], e["dropped"], e["complete"]) for e in big] == [
        (None, 200, True, False),
        (f"bytes={CHUNK}-", 206, False, True),
    ], big
    assert big[1]["bytes"] == 24 * 1024 * 1024 - CHUNK
    assert {e["client"] for e in phase1 + phase2} == {NODE_IPS[0]}, "node-1 must not download"
    assert "Copy the snapshot from the head over the fast link" in out
    assert "Withdraw the head's copy key" in out
    assert "hf_model copy" not in sh(1, "cat /root/.ssh/authorized_keys"), "the copy key outlived the copy"
    print(f"\n[hf_model] resumed download + copy to node-1: {seconds:.0f} s")

    # Both nodes hold the hub's exact bytes.
    want = {
        p.relative_to(HUB_REPO_DIR).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in HUB_REPO_DIR.rglob("*")
        if p.is_file()
    }
    for index in (0, 1):
        listing = sh(index, f"cd {SNAPSHOT} && find -L . -type f -exec sha256sum {{}} +")
        have = {line.split()[1][2:]: line.split()[0] for line in listing.splitlines() if line.strip()}
        assert have == want, f"node-{index}: {have}"
        # The manifest keeps the hub's hash of each file, checked against the bytes after the download / the copy.
        manifest = json.loads(
            sh(index, f"cat {CACHE}/spark-serve-manifests/models--spark-serve--tiny-llama@{COMMIT}.json")
        )
        lfs = {rel for rel in want if rel.endswith((".bin", ".safetensors"))}
        assert {rel: manifest["hashes"][rel] for rel in lfs} == {rel: f"sha256:{want[rel]}" for rel in lfs}
        assert set(manifest["hashes"]) == set(want), manifest["hashes"]
    rc, out = ansible("molecule/hf_model/converge.yml")
    assert rc == 0 and "changed=0" in out and out.count("changed=0") == 2, out[-3000:]
    hub_control({})


# ------------------------------------------------------------------------------------------------ (e)
PROGRESS = re.compile(r"\[spark-serve\] node-1: model copy from node-0 ([\d.]+) of ([\d.]+ MB) \(")


def copy_converge(*extra):
    """The converge args with node-1's copy slowed to ~4 MB/s (rsync --bwlimit) and a progress line every second."""
    return ansible_playbook_argv(
        "-i",
        "inventories/testbed-pair",
        "molecule/hf_model/converge.yml",
        "-e",
        "hf_model_copy_bwlimit=4000",
        "-e",
        "hf_model_progress_interval=1",
        *extra,
    )


def test_the_copy_prints_progress_and_a_stalled_copy_fails_and_resumes(prepared):
    """Reuses (a)'s bed: node-0 holds the snapshot; node-1's is removed, so only the copy runs."""
    started = time.monotonic()
    sh(1, f"rm -rf {CACHE}")
    total = sum(p.stat().st_size for p in HUB_REPO_DIR.rglob("*") if p.is_file())
    blobs = f"{CACHE}/hub/models--spark-serve--tiny-llama/blobs"

    # Stall: the head's rsync is stopped (SIGSTOP) a few MB into the copy; 3 s without a byte fail the copy.
    proc = subprocess.Popen(
        copy_converge("-e", "hf_model_stall_timeout=3"),
        cwd=ROOT,
        env=command_env(ENV),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while int(node_exec(1, f"du -sb {blobs} 2>/dev/null | cut -f1 || echo 0")[1].strip() or 0) < 4_000_000:
            assert time.monotonic() < deadline and proc.poll() is None, "the copy never started"
            time.sleep(0.3)
        pids = sh(0, "pgrep -x rsync").split()
        sh(0, f"kill -STOP {' '.join(pids)}")
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out[-3000:]
    assert "fatal: [node-1]" in out, out[-3000:]
    stalled = r"node-1: model copy from node-0 stalled: no byte moved for [3-9] s at [\d.]+ MB of"
    assert re.search(stalled, out), out[-3000:]
    assert "A rerun resumes the copy" in out, out[-3000:]
    assert "hf_model copy" not in sh(1, "cat /root/.ssh/authorized_keys"), "the copy key outlived the failed copy"
    assert node_exec(0, "pgrep -x rsync")[0] == 1, "the stopped rsync outlived the failed copy on node-0"
    assert node_exec(0, "ls -d /tmp/spark-transfer.* 2>/dev/null")[1].strip() == ""
    deadline = time.monotonic() + 30  # the receiver on node-1 ends once its sender's connection closes
    while node_exec(1, "pgrep -x rsync")[0] == 0:
        assert time.monotonic() < deadline, "rsync still runs on node-1 after the failed copy"
        time.sleep(0.5)

    # The rerun completes, printing a line a second with the bytes present on node-1 and the snapshot's total.
    rc, out = run(copy_converge(), timeout=1200, env=ENV)
    assert rc == 0, out[-4000:]
    lines = PROGRESS.findall(out)
    assert len(lines) >= 2, out[-3000:]
    assert {shown_total for _, shown_total in lines} == {f"{total / 1e6:.1f} MB"}, lines
    done = [float(shown) for shown, _ in lines]
    assert done == sorted(done) and done[-1] > done[0], lines
    assert "node-1: model copy from node-0 done" in out
    manifest = json.loads(sh(1, f"cat {CACHE}/spark-serve-manifests/models--spark-serve--tiny-llama@{COMMIT}.json"))
    assert manifest["copy"]["source"] == "node-0", manifest
    print(f"\n[hf_model] stalled copy, then the copy with {len(lines)} lines: {time.monotonic() - started:.0f} s")


# ------------------------------------------------------------------------------------------------ (b)
def test_node_with_another_digest_fails_before_any_pull(prepared, tmp_path):
    rc, out = run(
        [sys.executable, str(ROOT / "tests/testbed/engine_image.py"), "push", "--variant", "decoy"], timeout=1800
    )
    assert rc == 0, out
    pinned = json.loads((STATE / "engine-image.json").read_text())
    decoy = json.loads((STATE / "engine-image-decoy.json").read_text())
    assert decoy["digest"] != pinned["digest"]
    override = tmp_path / "node-1-decoy.yml"
    override.write_text(f'all:\n  hosts:\n    node-1:\n      spark_serve_image_digest: "{decoy["digest"]}"\n')
    before = [sh(i, IMAGES) for i in (0, 1)]

    rc, out = ansible("molecule/engine_image/converge.yml", inventories=("inventories/testbed-pair", str(override)))
    assert rc != 0, out[-3000:]
    assert (
        f"node-1: engine image {pinned['name']}@{decoy['digest']} differs from "
        f"{pinned['name']}@{pinned['digest']} on node-0"
    ) in out, out[-3000:]
    assert f"expected digest {pinned['digest']}, actual {decoy['digest']}" in out
    assert_never_ran(out, "engine_image", "Pull the engine image by digest")
    assert [sh(i, IMAGES) for i in (0, 1)] == before
    assert decoy["digest"] not in before[1]


# ------------------------------------------------------------------------------------------------ (c)
@pytest.mark.parametrize(
    "name_suffix, digest, message",
    [
        (":latest", "", "is a tag without a digest: tags are mutable"),
        ("", "", "engine_image_digest is empty: the engine image is deployed by digest only"),
        ("", "sha256:" + "0" * 64, "engine_image_digest is the all-zero placeholder"),
        (":v1", "sha256:" + "a" * 64, "carries a tag: give the repository only"),
        ("", "latest", "engine_image_digest 'latest' is not sha256:<64 lowercase hex>"),
    ],
)
def test_reference_without_digest_is_refused(prepared, name_suffix, digest, message):
    pinned = json.loads((STATE / "engine-image.json").read_text())
    before = [sh(i, IMAGES) for i in (0, 1)]
    rc, out = ansible(
        "molecule/engine_image/converge.yml",
        "-e",
        f"engine_image_name={pinned['name']}{name_suffix}",
        "-e",
        f"engine_image_digest={digest}",
    )
    assert rc != 0, out[-3000:]
    for node in ("node-0", "node-1"):
        assert f"{node}: " in out and message in out, out[-3000:]
    assert_never_ran(out, "engine_image", "Pull the engine image by digest")
    assert [sh(i, IMAGES) for i in (0, 1)] == before


def test_model_pinned_to_a_branch_is_refused(prepared):
    rc, out = ansible("molecule/hf_model/converge.yml", "-e", "hf_model_revision=main")
    assert rc != 0, out[-3000:]
    assert "node-0: hf_model_revision 'main' is not a commit" in out
    assert "node-1: hf_model_revision 'main' is not a commit" in out
    assert_never_ran(out, "hf_model", "Create the model cache directories")


def test_a_prefix_revision_is_pinned_to_its_full_commit_and_another_commit_is_refused(prepared, tmp_path):
    pins = tmp_path / "model-pins.json"
    rc, out = ansible("molecule/hf_model/converge.yml", "-e", f"hf_model_pin_file={pins}")
    assert rc == 0, out[-3000:]
    [(key, commit)] = json.loads(pins.read_text()).items()
    repo, prefix = key.split("@")
    assert (repo, commit) == ("spark-serve/tiny-llama", COMMIT) and len(prefix) < 40 and COMMIT.startswith(prefix)

    # The same prefix pinned to another commit (e.g. a branch named like it moved the Hub's answer): refused.
    other = hashlib.sha1(b"another commit").hexdigest()
    pins.write_text(json.dumps({key: other}))
    rc, out = ansible("molecule/hf_model/converge.yml", "-e", f"hf_model_pin_file={pins}")
    assert rc != 0, out[-3000:]
    assert f"{key} resolves to commit {COMMIT}, but it is pinned to {other} in {pins}" in out, out[-3000:]
    assert "the engine was not started on it" in out
    assert json.loads(pins.read_text()) == {key: other}, "a refused run must leave the pin as it was"


def test_a_gated_model_downloads_with_the_controllers_token_which_never_shows(prepared, tmp_path):
    """Alone proves, with the real hf client: the controller's token file reaches the download container (the
    stand-in answers a gated repository's files 401 without a bearer, and every file request of the run carried
    one), it never appears in -vvv output, and the head keeps no copy after the download."""
    sentinel = "hf_TESTBED" + hashlib.sha256(b"gated").hexdigest()[:24]
    token = tmp_path / "hf-token"
    token.write_text(sentinel + "\n")
    token.chmod(0o600)
    cache = "/var/lib/spark-serve/hf-gated"
    sh(0, f"rm -rf {cache}")
    hub_control({"gated": {"spark-serve/tiny-llama": "manual"}})
    mark = len(hub_log())
    try:
        extra = ["-e", f"hf_model_token_file={token}", "-e", f"hf_model_cache_dir={cache}", "--limit", "node-0"]
        rc, out = ansible("molecule/hf_model/converge.yml", *extra, "-vvv")
        assert rc == 0, out[-4000:]
        assert sentinel not in out and sentinel[3:20] not in out
        gets = file_gets(hub_log(mark))
        assert gets and all(e["auth"] and e["status"] in (200, 206) for e in gets), gets
        sh(0, "test ! -e /run/spark-serve-hf")
    finally:
        hub_control({})
        sh(0, f"rm -rf {cache}")


# ------------------------------------------------------------------------------------------------ (g)
PULL_DONE = re.compile(
    r"\[spark-serve\] node-0: image pull done: ([\d.]+ k?B) in \d+ s \((\d+) of (\d+) layers, (\d+) already here\)"
)


def test_a_pull_prints_its_layers_bytes_and_a_rerun_pulls_nothing(prepared):
    """The decoy (the pinned image plus one small layer) pulled by the role on node-0, which holds the pinned image:
    every layer but one already here, that one's bytes counted from the Engine API's stream. The prune test below
    uses this pull instead of one of its own (CI time). A fresh test bed's prepare pulls the whole image; its
    progress lines are printed for the record."""
    for line in re.findall(r"\[spark-serve\] node-\d: (?:base )?image pull .*", prepared)[-6:]:
        print(f"\n[engine_image] prepare: {line}")
    rc, out = run(
        [sys.executable, str(ROOT / "tests/testbed/engine_image.py"), "push", "--variant", "decoy"], timeout=1800
    )
    assert rc == 0, out
    decoy = json.loads((STATE / "engine-image-decoy.json").read_text())
    ref = f"{decoy['name']}@{decoy['digest']}"
    node_exec(0, f"docker rmi {ref} >/dev/null 2>&1")  # test set-up: an earlier run's pull
    pull = (
        "-e",
        f"engine_image_digest={decoy['digest']}",
        "-e",
        "engine_image_progress_interval=1",
        "--limit",
        "node-0",
    )

    rc, out = ansible("molecule/engine_image/converge.yml", *pull)
    assert rc == 0, out[-4000:]
    assert "[spark-serve] node-0: image pull: a line every 1 s, stopped after 10 min without progress" in out, out
    done = PULL_DONE.search(out)
    assert done, out[-4000:]
    moved, finished, layers, present = done.group(1), *map(int, done.groups()[1:])
    assert finished == layers and present == layers - 1 and present >= 2, done.group(0)
    assert moved != "0 B", done.group(0)  # the decoy's own layer came over the wire
    assert decoy["digest"] in sh(0, IMAGES)
    print(f"\n[engine_image] decoy pull on node-0: {done.group(0)}")

    rc, rerun = ansible("molecule/engine_image/converge.yml", *pull)
    assert rc == 0 and "changed=0" in rerun and "[spark-serve] node-0: image pull" not in rerun, rerun[-3000:]


# ------------------------------------------------------------------------------------------------ pruning
def test_prune_never_removes_pinned_kept_or_used_images(prepared):
    rc, out = run(
        [sys.executable, str(ROOT / "tests/testbed/engine_image.py"), "push", "--variant", "decoy"], timeout=1800
    )
    assert rc == 0, out
    pinned = json.loads((STATE / "engine-image.json").read_text())
    decoy = json.loads((STATE / "engine-image-decoy.json").read_text())
    decoy_ref = f"{decoy['name']}@{decoy['digest']}"
    sh(0, f"docker pull -q {decoy_ref} && docker create --name prune-probe {decoy_ref} true")  # (g) pulled it

    def converge(keep):
        rc, out = ansible(
            "molecule/engine_image/converge.yml",
            "-e",
            json.dumps({"engine_image_prune": True, "engine_image_keep_digests": keep}),
        )
        assert rc == 0, out[-3000:]
        return sh(0, IMAGES)

    try:
        # Kept by the deployment record, then in use by a (stopped) container: both stay.
        assert decoy["digest"] in converge([decoy["digest"]])
        assert decoy["digest"] in converge([])
        sh(0, "docker rm prune-probe")
        # Neither kept nor used: removed; the pinned image always stays.
        images = converge([])
        assert decoy["digest"] not in images and pinned["digest"] in images, images
        assert pinned["digest"] in sh(1, IMAGES)
    finally:
        sh(0, "docker rm -f prune-probe >/dev/null 2>&1 || true")


# ------------------------------------------------------------------------------------------------ (d)
# The patched code path itself: the CPU platform's config hook, given a deployment that asked for fork, then the
# start method the engine's processes would use (a stand-in config: only the fields the hook reads).
START_METHOD_PROBE = """
import os
from unittest import mock
os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"
from vllm.platforms.cpu import CpuPlatform
config = mock.MagicMock()
config.device_config.device_type = "cpu"
config.lora_config = None
config.model_config.use_mla = False  # a mock is truthy: without AMX the MLA branch would compare two mocks
CpuPlatform.check_and_update_config(config)
print("start method:", os.environ["VLLM_WORKER_MULTIPROC_METHOD"])
"""
LOAD_KEY = "spark-serve engine_image load"


def build_image(base, *extra):
    return ansible("molecule/engine_image/build.yml", "-e", f"spark_serve_image_base={base}", *extra, timeout=1800)


def image_ids(ref):
    """The id of `ref` on each node ('' where absent); a loaded image carries no registry digest."""
    ids = []
    for index in (0, 1):
        rc, out = node_exec(index, f"docker image inspect -f '{{{{.Id}}}} {{{{json .RepoDigests}}}}' {ref}")
        image_id, _, digests = out.strip().partition(" ") if rc == 0 else ("", "", "[]")
        assert json.loads(digests or "[]") == [], f"node-{index} holds {ref} with a registry digest: {digests}"
        ids.append(image_id)
    return ids


def test_the_image_is_built_on_the_head_and_loaded_on_the_other_node_without_a_registry(prepared, tmp_path):
    """The only test of the registry-free path, on recipes of its own (a user's patch with this run's mark, so no
    earlier run or other test left the image): the head builds images/testbed on the pushed vllm-cpu image as its
    pinned base, node-1 loads it over the fast link, the patch's effect shows in the image; a rerun builds and
    moves nothing; another patch of the user's is another image id on both nodes. No engine starts."""
    pinned = json.loads((STATE / "engine-image.json").read_text())
    base = f"{pinned['name']}@{pinned['digest']}"
    mark = f"{time.time_ns()}"
    with local_patch(tmp_path / "a", mark) as images:
        wanted = recipe(images[1].split("=", 1)[1], "testbed", base)
        ref = wanted["ref"]
        assert image_ids(ref) == ["", ""], f"{ref} is already on a node"
        rc, out = build_image(base, *images, "-e", "engine_image_progress_interval=1")
        assert rc == 0, out[-4000:]
        loads = re.findall(r"\[spark-serve\] node-1: image load from node-0 ([\d.]+) of ([\d.]+ [kMG]B) \(", out)
        assert len(loads) >= 2 and float(loads[-1][0]) > 0, out[-4000:]  # the bytes sent to node-1, a line a second
        assert "[spark-serve] node-1: image load from node-0 done in" in out, out[-4000:]
        print(f"\n[engine_image] load to node-1: {len(loads)} progress lines, the last {' of '.join(loads[-1])}")
        # the build on the head: a line a second (its step, or "starting" before its first report: this build
        # takes about a second), then the step it ended at, the labels the task gives
        steps = re.findall(r"\[spark-serve\] node-0: image build (?:at .+|starting), \d+ s in", out)
        assert steps, out[-4000:]
        built = re.search(r"\[spark-serve\] node-0: image build done in \d+ s \((Step \d+/\d+ : LABEL .+)\)", out)
        assert built, out[-4000:]
        print(f"\n[engine_image] build on node-0: {len(steps)} progress lines; {built.group(1)}")
        first = image_ids(ref)
        assert first[0].startswith("sha256:") and first[0] == first[1], first  # the head's image on node-1 too
        rc, rerun = build_image(base, *images)
    provenance = json.loads(sh(1, f"docker run --rm --entrypoint cat {ref} /opt/spark-serve/image/provenance.json"))
    assert provenance["vllm_version"] == "0.32.0+cpu"
    labels = json.loads(sh(1, f"docker image inspect -f '{{{{json .Config.Labels}}}}' {ref}"))
    assert {key: labels.get(key) for key in ("org.spark-serve.image", "org.spark-serve.inputs-sha256")} == {
        "org.spark-serve.image": "testbed",
        "org.spark-serve.inputs-sha256": wanted["inputs_sha256"],
    }, labels
    assert labels.get("org.spark-serve.base") == base, labels
    assert [p["name"] for p in provenance["patches"]] == [
        "patches/0001-cpu-keep-the-chosen-worker-start-method.patch",
        "patches.local/0001-local.patch",
    ]
    probe = f"docker run --rm --network none --entrypoint python3 {{}} -c {shlex.quote(START_METHOD_PROBE)}"
    assert "start method: fork" in sh(1, probe.format(ref))  # the patch keeps the deployment's choice
    assert "start method: spawn" in sh(0, probe.format(base))  # the base forces spawn whatever was asked
    assert LOAD_KEY not in sh(1, "cat /root/.ssh/authorized_keys 2>/dev/null || true")

    assert rc == 0 and rerun.count("changed=0") == 3, rerun[-3000:]  # localhost and both nodes
    assert_never_ran(rerun, "engine_image", "Build the engine image from its pinned base")
    assert_never_ran(rerun, "engine_image", "Stream the head's image")

    with local_patch(tmp_path / "b", mark + "-changed") as images:
        other = recipe(images[1].split("=", 1)[1], "testbed", base)["ref"]
        rc, out = build_image(base, *images)
    assert rc == 0, out[-4000:]
    second = image_ids(other)
    assert other != ref and second[0] == second[1] and second[0] not in ("", first[0]), (first, second)
    for index in (0, 1):  # test set-up only: these two images are this test's own
        sh(index, f"docker rmi {ref} {other} >/dev/null")
