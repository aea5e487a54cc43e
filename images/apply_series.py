"""Apply an image's patch series to the installed vLLM, inside the image build (docs/images.md).

    python3 apply_series.py <dir with patches/ and patches.local/> [--root <site-packages>]

Every series (`patches/`, then the user's `patches.local/` when present) is read in the order of its `series` file;
each patch's sha256 must equal its line in `SHA256SUMS`. A patch is a unified diff with paths relative to the
site-packages folder that holds `vllm/` (`a/vllm/...`, `b/vllm/...`). Each hunk must find its context exactly (at
its line or shifted, never fuzzy): a base whose code moved fails the build naming the patch, the file and the
hunk, never builds an image half patched. A failure's last lines are `spark-serve-series-failed {json}` on stdout
(series, patch, file, hunk, line, reason: module_utils/docker_progress.py makes it the build task's message) and the
same in words on stderr. Writes `<dir>/provenance.json` (vLLM's version as installed, every patch applied with its
sha256). Standard library only: it runs on whatever Python the base image ships.
"""

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import sys

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
MARKER = "spark-serve-series-failed "  # module_utils/docker_progress.py reads the line in the build's output


class PatchError(Exception):
    """Why a series does not apply; `where` names it (series, patch, file, hunk, line) as far as it is known."""

    def __init__(self, reason, **where):
        super().__init__(reason)
        self.where = where

    def __str__(self):
        patch = f"patch {self.where['series']}/{self.where['patch']}" if "patch" in self.where else ""
        hunk = f"hunk {self.where['hunk']} (@@ -{self.where['line']}) " if "hunk" in self.where else ""
        return ": ".join(filter(None, (patch, self.where.get("file"), hunk + self.args[0])))


def read_list(path):
    with open(path, encoding="utf-8") as handle:
        return [line.strip() for line in handle if line.strip() and not line.lstrip().startswith("#")]


def sha256(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def parse(text):
    """[(path, [(old_start, old_lines, new_lines)])] of a unified diff."""
    files, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        if lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            path = lines[i + 1][4:].split("\t")[0].strip()
            files.append((path.split("/", 1)[1] if path.startswith("b/") else path, []))
            i += 2
            continue
        match = HUNK.match(lines[i])
        if match and files:
            old, new, i = [], [], i + 1
            while i < len(lines) and lines[i][:1] in (" ", "-", "+", "\\") and not lines[i].startswith("--- "):
                tag, body = lines[i][:1], lines[i][1:]
                if tag in (" ", "-"):
                    old.append(body)
                if tag in (" ", "+"):
                    new.append(body)
                i += 1
            files[-1][1].append((int(match.group(1)), old, new))
            continue
        i += 1
    if not files:
        raise PatchError("no file in it (not a unified diff)")
    return files


def apply_hunks(source, hunks, path):
    """The source with every hunk applied; the context must match exactly, at its line or the nearest shift."""
    lines, shift = source.splitlines(), 0
    for number, (start, old, new) in enumerate(hunks, 1):
        expected = max(start - 1 + shift, 0)
        spots = [at for at in range(len(lines) - len(old) + 1) if lines[at : at + len(old)] == old]
        if not spots:
            raise PatchError("does not match: the base's code differs", file=path, hunk=number, line=start)
        at = min(spots, key=lambda spot: abs(spot - expected))
        lines[at : at + len(old)] = new
        shift += len(new) - len(old)
    return "\n".join(lines) + ("\n" if source.endswith("\n") else "")


def apply_patch(root, patch_path):
    with open(patch_path, encoding="utf-8") as handle:
        files = parse(handle.read())
    patched = {}
    for path, hunks in files:  # all files checked before any is written: a patch applies whole or not at all
        target = os.path.join(root, path)
        if not os.path.isfile(target):
            raise PatchError(f"no such file under {root}", file=path)
        with open(target, encoding="utf-8") as handle:
            patched[target] = apply_hunks(handle.read(), hunks, path)
    for target, text in patched.items():
        with open(target, "w", encoding="utf-8") as handle:
            handle.write(text)
    return [path for path, _ in files]


def series(context, series_dir):
    """(name, path) of each patch of one series, in order, each checked against the manifest."""
    folder = os.path.join(context, series_dir)
    if not os.path.isfile(os.path.join(folder, "series")):
        return []
    sums = {}
    if os.path.isfile(os.path.join(folder, "SHA256SUMS")):
        sums = {line.split()[1].lstrip("*"): line.split()[0] for line in read_list(os.path.join(folder, "SHA256SUMS"))}
    patches = []
    for name in read_list(os.path.join(folder, "series")):
        path = os.path.join(folder, name)
        if sums.get(name) != sha256(path):
            reason = f"sha256 {sha256(path)} is not its SHA256SUMS line {sums.get(name)}"
            raise PatchError(reason, series=series_dir, patch=name)
        patches.append((name, path))
    return patches


def vllm_root():
    spec = importlib.util.find_spec("vllm")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise PatchError("no vllm package in this image's Python")
    return os.path.dirname(next(iter(spec.submodule_search_locations)))


def main(argv):
    context = argv[0]
    root = argv[argv.index("--root") + 1] if "--root" in argv else vllm_root()
    applied = []
    for series_dir in ("patches", "patches.local"):
        for name, path in series(context, series_dir):
            try:
                files = apply_patch(root, path)
            except PatchError as err:
                err.where.update(series=series_dir, patch=name)
                raise
            applied.append({"name": f"{series_dir}/{name}", "sha256": sha256(path), "files": files})
            print(f"applied {series_dir}/{name}: {', '.join(files)}", flush=True)
    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        version = ""
    with open(os.path.join(context, "provenance.json"), "w", encoding="utf-8") as handle:
        json.dump({"vllm_version": version, "patches": applied}, handle, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except PatchError as err:
        print(MARKER + json.dumps({"reason": err.args[0], **err.where}, sort_keys=True), flush=True)
        sys.exit(f"apply_series: {err}; the image was not built")
