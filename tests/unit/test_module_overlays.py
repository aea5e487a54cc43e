"""library/vllm_overlays.py run as Ansible runs it, against a fake `docker` (AnsibleModule.run_command patched):
the file each overlay replaces comes from a dict standing for the image, so every verdict is checked without a
container engine."""

import io
import tarfile

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.modules import vllm_overlays

from tests.module_harness import run_module

IMAGE = "registry.local:5000/vllm@sha256:" + "ab" * 32
DEST = "/usr/lib/python3/vllm/platforms/interface.py"
IMAGE_FILE = "class Platform:\n    def validate_environ(self):\n        pass\n\n    def name(self):\n        pass\n"


@pytest.fixture()
def docker(monkeypatch):
    """A fake docker CLI over an image whose only file is DEST; records every command run."""
    calls, image = [], {DEST: IMAGE_FILE}

    def run_command(module, argv, **kwargs):
        calls.append(argv)
        if argv[:2] == ["docker", "create"]:
            return (1, "", "Error: No such image") if argv[-1] != IMAGE else (0, "c0ffee\n", "")
        if argv[:2] == ["docker", "cp"]:
            path = argv[2].split(":", 1)[1]
            if path not in image:
                return 1, b"", b"Could not find the file"
            data = image[path].encode()
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w") as archive:
                member = tarfile.TarInfo(path.rsplit("/", 1)[-1])
                member.size = len(data)
                archive.addfile(member, io.BytesIO(data))
            return 0, buffer.getvalue(), b""
        if argv[:2] == ["docker", "rm"]:
            return 0, argv[-1], ""
        raise AssertionError(f"unexpected command {argv}")

    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    return calls


def overlay(content, dest=DEST, src="overlays/interface.py"):
    return {"src": src, "dest": dest, "content": content}


def test_an_overlay_that_keeps_every_name_passes_and_the_container_is_removed(docker):
    kept = IMAGE_FILE + "\n\ndef patched():\n    pass\n"
    result = run_module(vllm_overlays, {"image": IMAGE, "overlays": [overlay(kept)]}, check_mode=True)
    assert result["changed"] is False and result["checked"] == 1 and result["obsolete"] == []
    (described,) = result["overlays"]
    assert described["name"] == "0-interface.py" and "content" not in described and len(described["sha256"]) == 64
    assert docker[0][:4] == ["docker", "create", "--network", "none"], "the image is created, never run"
    assert docker[-1] == ["docker", "rm", "-f", "c0ffee"]


def test_every_violation_is_reported_at_once_and_documented_as_errors(docker):
    stale = "class Platform:\n    def name(self):\n        pass\n"
    result = run_module(
        vllm_overlays,
        {"image": IMAGE, "overlays": [overlay(stale), overlay("x = 1\n", dest="/no/such/file.py", src="b.py")]},
    )
    assert result["failed"] and result["checked"] == 2
    first, second = result["errors"]
    assert first.startswith("overlays[0] (overlays/interface.py -> " + DEST + "): lacks 1 name(s)")
    assert "Platform.validate_environ" in first
    assert second.startswith("overlays[1] (b.py -> /no/such/file.py): the image has no file at /no/such/file.py")
    assert result["msg"].startswith(f"2 overlay problem(s) against {IMAGE}; nothing was started: ")
    assert docker[-1][:3] == ["docker", "rm", "-f"], "the created container is removed after a failure too"


def test_an_overlay_equal_to_the_image_file_is_obsolete_a_warning_not_a_failure(docker):
    result = run_module(vllm_overlays, {"image": IMAGE, "overlays": [overlay(IMAGE_FILE)]})
    assert result["failed"] is False
    assert result["obsolete"] == [
        f"overlays[0] (overlays/interface.py -> {DEST}): obsolete, the image already ships this code; "
        "remove it from the profile"
    ]
    assert result["warnings"] == result["obsolete"]


def test_no_overlays_touches_no_container(docker):
    result = run_module(vllm_overlays, {"image": IMAGE, "overlays": []})
    assert (result["checked"], result["overlays"], docker) == (0, [], [])


def test_without_an_image_the_overlays_are_described_as_the_node_describes_them(docker):
    overlays = [overlay("class Platform:\n    pass\n"), overlay(IMAGE_FILE, src="b/interface.py")]
    described = run_module(vllm_overlays, {"overlays": overlays})
    checked = run_module(vllm_overlays, {"image": IMAGE, "overlays": overlays[1:]})
    assert described["checked"] == 0 and not described.get("failed"), described
    assert [o["name"] for o in described["overlays"]] == ["0-interface.py", "1-interface.py"]
    assert described["overlays"][1] | {"name": "0-interface.py"} == checked["overlays"][0]
    assert [argv[:2] for argv in docker] == [["docker", "create"], ["docker", "cp"], ["docker", "rm"]]


def test_an_image_that_cannot_be_read_fails_naming_it(docker):
    result = run_module(vllm_overlays, {"image": "other@sha256:00", "overlays": [overlay(IMAGE_FILE)]})
    assert result["failed"]
    assert result["msg"] == "cannot read files from image other@sha256:00: Error: No such image"


def test_an_overlay_without_content_is_refused_by_the_argument_spec(docker):
    result = run_module(vllm_overlays, {"image": IMAGE, "overlays": [{"src": "a.py", "dest": DEST}]})
    assert result["failed"] and "content" in result["msg"] and docker == []
