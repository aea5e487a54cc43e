"""roles/hf_model/library/hf_snapshot.py run as Ansible runs it, on a Hugging Face cache laid out in a temporary
directory (refs/, blobs/, snapshots/ symlinks, the completion manifest hf_model writes)."""

import hashlib
import json

from ansible.modules import hf_snapshot

from tests.module_harness import run_module

REPO = "org/tiny"
COMMIT = "c0ffee" + "0" * 34
FILES = {"config.json": b"{}\n", "model.safetensors": b"weights!"}


def cache(tmp_path, files=FILES, manifest=True, ref="main"):
    """A hub cache holding REPO at COMMIT (blobs + snapshot symlinks); the manifest lists FILES."""
    folder = tmp_path / "hf" / "hub" / "models--org--tiny"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / ref).write_text(COMMIT)
    (folder / "blobs").mkdir()
    snapshot = folder / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    for index, (name, data) in enumerate(files.items()):
        blob = folder / "blobs" / f"blob{index}"
        blob.write_bytes(data)
        (snapshot / name).symlink_to(blob)
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    if manifest:
        listed = {name: len(data) for name, data in FILES.items()}
        (manifests / f"models--org--tiny@{COMMIT}.json").write_text(json.dumps({"commit": COMMIT, "files": listed}))
    return folder, {"cache_dir": str(tmp_path / "hf"), "repo": REPO, "manifest_dir": str(manifests)}


def test_a_complete_snapshot_resolved_through_refs(tmp_path):
    folder, args = cache(tmp_path)
    result = run_module(hf_snapshot, dict(args, revision="main"), check_mode=True)
    assert result["changed"] is False and result["complete"] is True and result["problems"] == []
    assert result["commit"] == COMMIT
    assert result["snapshot_path"] == str(folder / "snapshots" / COMMIT)
    assert result["sizes"] == {"config.json": 3, "model.safetensors": 8}
    assert result["files"]["model.safetensors"] == {"size": 8, "blob": "blobs/blob1"}


def test_a_missing_or_wrong_sized_file_is_a_problem(tmp_path):
    _, args = cache(tmp_path, files={"config.json": b"{ }\n"})
    result = run_module(hf_snapshot, dict(args, revision=COMMIT))
    assert result["complete"] is False
    assert result["problems"] == ["config.json: 4 bytes, expected 3", "model.safetensors: missing (expected 8 bytes)"]


def test_without_a_manifest_the_snapshot_is_not_complete(tmp_path):
    _, args = cache(tmp_path, manifest=False)
    result = run_module(hf_snapshot, dict(args, revision="main"))
    assert result["complete"] is False and result["manifest"] == {}
    assert result["problems"] == [f"no completion manifest {args['manifest_dir']}/models--org--tiny@{COMMIT}.json"]
    expected = run_module(hf_snapshot, dict(args, revision="main", expected={"config.json": 3}))
    assert expected["problems"] == [] and expected["complete"] is False, "complete needs the manifest"


def test_an_unknown_revision_and_partial_downloads_are_reported(tmp_path):
    folder, args = cache(tmp_path)
    (folder / "blobs" / "abc.incomplete").write_bytes(b"half")
    result = run_module(hf_snapshot, dict(args, revision="v2"))
    assert (result["commit"], result["snapshot_path"], result["complete"]) == ("", "", False)
    assert result["problems"] == ["revision v2 is not in the cache (no refs/v2)"]
    assert result["partial_downloads"] == ["abc.incomplete"]


def hub_cache(tmp_path):
    """A cache whose blobs are named as huggingface_hub names them: the LFS sha256 for the weights, the git blob
    sha1 for config.json."""
    folder, args = cache(tmp_path)
    for link in (folder / "snapshots" / COMMIT).iterdir():
        data = link.read_bytes()
        if link.name.endswith(".safetensors"):
            name = hashlib.sha256(data).hexdigest()
        else:
            name = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        blob = link.resolve()
        blob.rename(blob.with_name(name))
        link.unlink()
        link.symlink_to(blob.with_name(name))
    return folder, args


def test_verify_hashes_matches_every_blob_with_the_hubs_hash(tmp_path):
    _, args = hub_cache(tmp_path)
    result = run_module(hf_snapshot, dict(args, revision="main", verify_hashes=True))
    assert result["problems"] == [] and result["complete"] is True
    assert result["hashes"] == {
        "config.json": "git-sha1:" + hashlib.sha1(b"blob 3\0{}\n").hexdigest(),
        "model.safetensors": "sha256:" + hashlib.sha256(b"weights!").hexdigest(),
    }
    assert run_module(hf_snapshot, dict(args, revision="main"))["hashes"] == {}, "hashing only when asked"


def test_a_blob_altered_in_place_is_named_though_its_size_is_right(tmp_path):
    folder, args = hub_cache(tmp_path)
    weights = (folder / "snapshots" / COMMIT / "model.safetensors").resolve()
    weights.write_bytes(b"weights?")  # same size: a size check cannot see it
    result = run_module(hf_snapshot, dict(args, revision="main", verify_hashes=True))
    assert result["complete"] is False and list(result["hashes"]) == ["config.json"]
    (problem,) = result["problems"]
    assert problem == (
        f"model.safetensors: content hashes to {hashlib.sha256(b'weights?').hexdigest()}, the hub's hash is "
        f"{weights.name} (corrupt or altered)"
    )


def test_a_blob_not_named_by_a_hash_cannot_be_checked_and_says_so(tmp_path):
    _, args = cache(tmp_path)
    result = run_module(hf_snapshot, dict(args, revision="main", verify_hashes=True))
    assert result["problems"] == [
        "config.json: its blob blob0 is not named by a hub hash (sha256 or git sha1), so it cannot be checked",
        "model.safetensors: its blob blob1 is not named by a hub hash (sha256 or git sha1), so it cannot be checked",
    ]
