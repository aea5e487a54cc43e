"""The engine image as code: a recipe's problems by name (module_utils/image_recipe.py), its name by the hash of
every input, and the series applier (images/apply_series.py) on a tree of files."""

import hashlib
import shutil
import subprocess
import sys

import pytest
from ansible.module_utils.image_recipe import recipe
from ansible.modules import engine_image_recipe

from tests.module_harness import run_module
from tests.profiles import ROOT

PINNED = "nvcr.example/vllm/vllm-openai@sha256:" + "ab" * 32
PATCH = """--- a/vllm/mod.py
+++ b/vllm/mod.py
@@ -1,3 +1,3 @@
 first = 1
-method = "spawn"
+method = "fork"
 last = 3
"""
SOURCE = 'first = 1\nmethod = "spawn"\nlast = 3\n'


def image_tree(tmp_path, patches=None, sums=None, series=None):
    """images/ with apply_series.py and one image `demo` whose series holds `patches` ({name: text})."""
    images = tmp_path / "images"
    folder = images / "demo" / "patches"
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "images" / "apply_series.py", images / "apply_series.py")
    (images / "demo" / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n")
    patches = {"0001-fix.patch": PATCH} if patches is None else patches
    for name, text in patches.items():
        (folder / name).write_text(text)
    digest = {name: hashlib.sha256(text.encode()).hexdigest() for name, text in patches.items()}
    digest.update(sums or {})
    (folder / "SHA256SUMS").write_text("".join(f"{d}  {n}\n" for n, d in digest.items()))
    (folder / "series").write_text("\n".join(series if series is not None else list(patches)) + "\n")
    return images


@pytest.mark.parametrize(
    ("case", "base", "change", "expected"),
    [
        ("missing base", "", None, "image.base='': missing: pin the base of image.build 'demo'"),
        ("placeholder base", "repo@sha256:" + "0" * 64, None, "the all-zero placeholder digest"),
        ("tag base", "nvcr.example/vllm:25.11", None, "not pinned by digest"),
        ("patch changed", PINNED, {"sums": {"0001-fix.patch": "0" * 64}}, "its sha256 differs from SHA256SUMS"),
        ("listed, missing", PINNED, {"series": ["0001-fix.patch", "0002-gone.patch"]}, "listed in series but missing"),
        ("unlisted patch", PINNED, {"series": []}, "not listed in series"),
        ("not a patch name", PINNED, {"series": ["../escape.patch"]}, "a plain file name ending in .patch"),
    ],
)
def test_a_bad_recipe_is_refused_naming_the_field_value_and_rule(tmp_path, case, base, change, expected):
    images = image_tree(tmp_path, **(change or {}))
    problems = recipe(str(images), "demo", base)["problems"]
    assert any(expected in line and "[rule: image-" in line for line in problems), (case, problems)


def test_every_problem_is_listed_at_once(tmp_path):
    images = image_tree(tmp_path, sums={"0001-fix.patch": "0" * 64})
    problems = recipe(str(images), "demo", "")["problems"]
    assert [p.split("[rule: ")[1] for p in problems] == ["image-base-pinned]", "image-manifest]"]


def test_an_unknown_image_names_the_images_there(tmp_path):
    images = image_tree(tmp_path)
    assert "images here: demo" in recipe(str(images), "gb11", PINNED)["problems"][0]


def test_the_name_is_the_hash_of_every_input(tmp_path):
    images = image_tree(tmp_path)
    first = recipe(str(images), "demo", PINNED)
    assert first["problems"] == [] and first["ref"].startswith("spark-serve/demo:")
    assert recipe(str(images), "demo", PINNED)["ref"] == first["ref"]  # same inputs, same name
    assert recipe(str(images), "demo", PINNED.replace("ab", "cd"))["ref"] != first["ref"]  # another base
    changed = image_tree(tmp_path / "b", patches={"0001-fix.patch": PATCH.replace('"fork"', '"forkserver"')})
    assert recipe(str(changed), "demo", PINNED)["ref"] != first["ref"]  # a changed patch
    assert [p["name"] for p in first["patches"]] == ["0001-fix.patch"]


def test_the_shipped_images_are_well_formed():
    for name in ("gb10", "testbed"):
        assert recipe(str(ROOT / "images"), name, PINNED)["problems"] == [], name


def apply(images, root):
    return subprocess.run(
        [sys.executable, str(images / "apply_series.py"), str(images / "demo"), "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_the_applier_patches_the_tree_and_writes_the_provenance(tmp_path):
    images = image_tree(tmp_path)
    (tmp_path / "site" / "vllm").mkdir(parents=True)
    (tmp_path / "site" / "vllm" / "mod.py").write_text("# a line the patch does not know\n" + SOURCE)
    proc = apply(images, tmp_path / "site")
    assert proc.returncode == 0, proc.stderr
    assert 'method = "fork"' in (tmp_path / "site" / "vllm" / "mod.py").read_text()  # found one line below
    assert '"name": "patches/0001-fix.patch"' in (images / "demo" / "provenance.json").read_text()


def test_the_applier_fails_naming_the_patch_when_the_base_moved(tmp_path):
    images = image_tree(tmp_path)
    (tmp_path / "site" / "vllm").mkdir(parents=True)
    (tmp_path / "site" / "vllm" / "mod.py").write_text(SOURCE.replace("spawn", "thread"))
    proc = apply(images, tmp_path / "site")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "patch patches/0001-fix.patch: vllm/mod.py: hunk 1 (@@ -1) does not match" in proc.stderr
    assert "thread" in (tmp_path / "site" / "vllm" / "mod.py").read_text()  # nothing half applied


def test_the_applier_refuses_a_patch_that_is_not_in_the_manifest(tmp_path):
    images = image_tree(tmp_path, sums={"0001-fix.patch": "0" * 64})
    (tmp_path / "site" / "vllm").mkdir(parents=True)
    (tmp_path / "site" / "vllm" / "mod.py").write_text(SOURCE)
    proc = apply(images, tmp_path / "site")
    assert proc.returncode != 0 and "is not its SHA256SUMS line" in proc.stderr


def test_a_recorded_recipe_is_built_again_only_from_its_own_inputs(tmp_path):
    """roles/engine_image/library/engine_image_recipe.py: the folder must still give every recorded input."""
    images = image_tree(tmp_path)
    recorded = recipe(str(images), "demo", PINNED)
    assert run_module(engine_image_recipe, {"images_dir": str(images), "recipe": recorded})["differences"] == []
    changed = PATCH.replace('"fork"', '"forkserver"')
    (images / "demo" / "patches" / "0001-fix.patch").write_text(changed)
    sums = images / "demo" / "patches" / "SHA256SUMS"
    sums.write_text(f"{hashlib.sha256(changed.encode()).hexdigest()}  0001-fix.patch\n")
    result = run_module(engine_image_recipe, {"images_dir": str(images), "recipe": recorded})
    assert result["failed"] and f"images/demo no longer gives {recorded['ref']}" in result["msg"]
    assert result["differences"] == [
        f"patches/0001-fix.patch has sha256 {hashlib.sha256(changed.encode()).hexdigest()} in the folder, "
        f"{recorded['patches'][0]['sha256']} in the recipe"
    ]
    (images / "demo" / "patches" / "series").write_text("\n")
    (images / "demo" / "patches" / "0001-fix.patch").unlink()
    sums.write_text("")
    gone = run_module(engine_image_recipe, {"images_dir": str(images), "recipe": recorded})["differences"]
    assert gone == [f"patches/0001-fix.patch (sha256 {recorded['patches'][0]['sha256']}) is missing from the folder"]
