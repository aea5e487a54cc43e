"""The engine image as code (docs/images.md): an `images/<name>/` folder (a Dockerfile and an ordered patch series
with its sha256 manifest, plus the user's own series in `patches.local/`) on a base pinned by digest makes one
recipe, named by the hash of every input. Pure: no Ansible API; action_plugins/spark_profile.py resolves a
profile's `image: {build: <name>, base: <repo>@sha256:...}` here, roles/engine_image builds what it returns.
"""

import hashlib
import json
import os
import re

from ansible.module_utils.hash_patterns import DIGEST, SHA256_HEX

PINNED_BASE = re.compile(f"^[a-z0-9.:/_-]+@{DIGEST}$")
ZERO_DIGEST = "sha256:" + "0" * 64
IMAGE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,40}$")
PATCH_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\.patch$")
SERIES_DIRS = ("patches", "patches.local")  # the project's series, then the user's own (never committed)
SERIES_FILE, MANIFEST_FILE = "series", "SHA256SUMS"
APPLIER = "apply_series.py"  # images/apply_series.py: applies every series inside the build, checked again there
REPOSITORY = "spark-serve/{name}"  # built images live on the nodes under this name, tagged by the inputs' hash
TAG_LENGTH = 16


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def problem(field, value, rule, message):
    return f"{field}={value!r}: {message} [rule: {rule}]"


def base_problems(name, base):
    """The base must be pinned by a real digest: a tag moves, the all-zero digest is the shipped placeholder."""
    field = "image.base"
    hint = f"pin the base of image.build '{name}' as <repository>@sha256:<64 hex> (spark_serve_image_base)"
    if not base:
        return [problem(field, base, "image-base-pinned", f"missing: {hint}")]
    if base.endswith("@" + ZERO_DIGEST):
        return [problem(field, base, "image-base-pinned", f"the all-zero placeholder digest: {hint}")]
    if not PINNED_BASE.match(base):
        return [problem(field, base, "image-base-pinned", f"not pinned by digest: {hint}")]
    return []


def read_lines(path):
    """Meaningful lines of a series or manifest file (blank lines and # comments skipped); None when absent."""
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return [line.strip() for line in handle if line.strip() and not line.lstrip().startswith("#")]


def manifest(folder):
    """{patch file: sha256} as `sha256sum` writes it, and the malformed lines."""
    sums, bad = {}, []
    for line in read_lines(os.path.join(folder, MANIFEST_FILE)) or []:
        parts = line.split()
        if len(parts) == 2 and re.fullmatch(SHA256_HEX, parts[0]):
            sums[parts[1].lstrip("*")] = parts[0]
        else:
            bad.append(line)
    return sums, bad


def series_patches(image_dir, series_dir):
    """Each patch of one series in order as {series, name, sha256}, and every problem with it."""
    folder = os.path.join(image_dir, series_dir)
    names = read_lines(os.path.join(folder, SERIES_FILE))
    if names is None:
        if series_dir == SERIES_DIRS[0] or os.path.isdir(folder):
            return [], [problem(f"{series_dir}/{SERIES_FILE}", folder, "image-series", "missing: list its patches")]
        return [], []  # no local series: nothing of the user's to apply
    sums, bad = manifest(folder)
    problems = [
        problem(f"{series_dir}/{MANIFEST_FILE}", line, "image-manifest", "not '<sha256>  <file>'") for line in bad
    ]
    patches = []
    for name in names:
        path = os.path.join(folder, name)
        field = f"{series_dir}/{name}"
        if not PATCH_NAME.match(name) or os.sep in name:
            problems.append(problem(field, name, "image-series", "a patch is a plain file name ending in .patch"))
        elif not os.path.isfile(path):
            problems.append(problem(field, path, "image-series", f"listed in {SERIES_FILE} but missing"))
        elif name not in sums:
            problems.append(problem(field, name, "image-manifest", f"has no sha256 in {MANIFEST_FILE}"))
        elif file_sha256(path) != sums[name]:
            problems.append(
                problem(
                    field,
                    file_sha256(path),
                    "image-manifest",
                    f"its sha256 differs from {MANIFEST_FILE} ({sums[name]}): a changed patch "
                    "is a new recipe, update the manifest with it",
                )
            )
        else:
            patches.append({"series": series_dir, "name": name, "sha256": sums[name]})
    listed = set(names)
    on_disk = sorted(f for f in os.listdir(folder) if f.endswith(".patch")) if os.path.isdir(folder) else []
    problems += [
        problem(
            f"{series_dir}/{name}",
            name,
            "image-series",
            f"not listed in {SERIES_FILE}: list it or remove it (an unlisted patch would silently not apply)",
        )
        for name in on_disk
        if name not in listed
    ]
    return patches, problems


def recipe(images_dir, name, base):
    """What the image `name` is built from and the local reference it gets, with every problem at once."""
    if not IMAGE_NAME.match(str(name)):
        return {
            "problems": [
                problem(
                    "image.build",
                    name,
                    "image-name",
                    "a folder name under images/ (lowercase letters, digits, - and _)",
                )
            ]
        }
    image_dir = os.path.join(images_dir, name)
    dockerfile = os.path.join(image_dir, "Dockerfile")
    if not os.path.isfile(dockerfile):
        known = sorted(d for d in os.listdir(images_dir) if os.path.isfile(os.path.join(images_dir, d, "Dockerfile")))
        return {
            "problems": [
                problem(
                    "image.build", name, "image-name", f"no {dockerfile}; images here: {', '.join(known) or 'none'}"
                )
            ]
        }
    problems = base_problems(name, base)
    patches = []
    for series_dir in SERIES_DIRS:
        found, wrong = series_patches(image_dir, series_dir)
        patches += found
        problems += wrong
    inputs = {
        "base": base,
        "dockerfile_sha256": file_sha256(dockerfile),
        "applier_sha256": file_sha256(os.path.join(images_dir, APPLIER)),
        "patches": patches,
    }
    inputs_sha256 = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    repository = REPOSITORY.format(name=name)
    return dict(
        inputs,
        build=name,
        dir=image_dir,
        repository=repository,
        ref=f"{repository}:{inputs_sha256[:TAG_LENGTH]}",
        inputs_sha256=inputs_sha256,
        problems=problems,
    )


def differences(wanted, found):
    """Each input of `wanted` (a recorded recipe) that the folder (`found`) no longer gives, one line each."""
    lines = [
        f"{key} is {found.get(key)} in the folder, {wanted.get(key)} in the recipe"
        for key in ("base", "dockerfile_sha256", "applier_sha256")
        if wanted.get(key) != found.get(key)
    ]
    have = {(p["series"], p["name"]): p["sha256"] for p in found.get("patches", [])}
    want = {(p["series"], p["name"]): p["sha256"] for p in wanted.get("patches", [])}
    for key in sorted(set(have) | set(want)):
        name = "/".join(key)
        if key not in have:
            lines.append(f"{name} (sha256 {want[key]}) is missing from the folder")
        elif key not in want:
            lines.append(f"{name} is in the folder but not in the recipe")
        elif have[key] != want[key]:
            lines.append(f"{name} has sha256 {have[key]} in the folder, {want[key]} in the recipe")
    return lines
