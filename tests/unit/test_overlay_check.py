"""Overlay files checked against the image's file they replace (seed 000's missing `validate_environ`)."""

import pytest
from ansible.module_utils.overlay_check import check_overlay, defined_names, same_code

IMAGE_FILE = '''
"""Platform interface (image copy)."""
import enum
from typing import TYPE_CHECKING
import torch.distributed as dist

if TYPE_CHECKING:
    from vllm.config import VllmConfig

try:
    import fastsafetensors
except ImportError:
    fastsafetensors = None

DEVICE_TYPES = ("cuda", "cpu")
logger: object = None


class PlatformEnum(enum.Enum):
    CUDA = enum.auto()
    CPU = enum.auto()


class Platform:
    device_name: str

    @classmethod
    def validate_environ(cls):
        return True

    def is_cuda(self):
        return True


def current_platform():
    return Platform()
'''


def test_defined_names_cover_top_level_and_class_members():
    names = defined_names(IMAGE_FILE)
    assert {
        "enum",
        "TYPE_CHECKING",
        "dist",
        "VllmConfig",
        "fastsafetensors",
        "DEVICE_TYPES",
        "logger",
        "PlatformEnum",
        "PlatformEnum.CUDA",
        "Platform",
        "Platform.device_name",
        "Platform.validate_environ",
        "Platform.is_cuda",
        "current_platform",
    } <= names
    assert "self" not in names and "cls" not in names


def test_the_seed_case_a_stale_overlay_without_validate_environ_is_refused():
    stale = IMAGE_FILE.replace("    @classmethod\n    def validate_environ(cls):\n        return True\n", "")
    errors, notes = check_overlay(
        0, "overlays/platforms_interface.py", "/opt/vllm/platforms/interface.py", stale, IMAGE_FILE
    )
    assert len(errors) == 1 and notes == []
    assert "overlays[0]" in errors[0] and "Platform.validate_environ" in errors[0]
    assert "overlays/platforms_interface.py -> /opt/vllm/platforms/interface.py" in errors[0]
    assert "rule:" in errors[0]


def test_every_missing_name_is_listed_at_once():
    stale = IMAGE_FILE.replace("def current_platform", "def other_platform").replace("DEVICE_TYPES", "TYPES")
    errors, _ = check_overlay(2, "a.py", "/x/a.py", stale, IMAGE_FILE)
    assert "2 name(s)" in errors[0] and "DEVICE_TYPES" in errors[0] and "current_platform" in errors[0]


def test_a_patch_that_keeps_every_name_passes_and_is_not_obsolete():
    patched = IMAGE_FILE.replace("return True\n\n    def is_cuda", "return False\n\n    def is_cuda")
    patched += "\n\ndef extra_helper():\n    return 1\n"
    assert check_overlay(0, "a.py", "/x/a.py", patched, IMAGE_FILE) == ([], [])


def test_an_overlay_equal_to_the_image_code_is_obsolete_even_with_other_comments():
    reformatted = IMAGE_FILE.replace(
        '"""Platform interface (image copy)."""',
        '"""Platform interface (image copy)."""\n# patched for GB10 -- upstreamed since',
    ).replace("\n\n\n", "\n\n")
    assert same_code(reformatted, IMAGE_FILE)
    errors, notes = check_overlay(1, "b.py", "/x/b.py", reformatted, IMAGE_FILE)
    assert errors == [] and len(notes) == 1 and "overlays[1]" in notes[0] and "obsolete" in notes[0]


def test_an_overlay_for_a_file_the_image_lacks_is_refused():
    errors, _ = check_overlay(0, "c.py", "/x/gone.py", IMAGE_FILE, None)
    assert "the image has no file at /x/gone.py" in errors[0]


def test_an_overlay_that_does_not_parse_is_refused():
    errors, _ = check_overlay(0, "d.py", "/x/d.py", "def broken(:\n", IMAGE_FILE)
    assert "does not parse" in errors[0] and "line 1" in errors[0]


@pytest.mark.parametrize("image", ["not python at all: [", '{"json": true}'])
def test_non_python_image_files_only_get_the_obsolete_check(image):
    errors, notes = check_overlay(0, "e.json", "/x/e.json", "x = 1\n", image)
    assert errors == [] and notes == []
