"""Overlay files: patched engine source files mounted over the pinned image's own copy.

Seed 000 met a stale overlay: the new image's `platforms/interface.py` defined `validate_environ`, the old
overlay mounted over it did not, the worker exited at once, and the head waited out the 601 s collective timeout,
then the outer timeout, before the weights were loaded again (docs/glossary.md#seed-000). The check
here compares each overlay with the file it replaces inside the image, before anything starts:

- every name the image's file defines at the top level (and every class member) must still exist in the
  overlay, else the engine's other modules import or call something that is gone;
- an overlay whose code equals the image's file (ignoring comments and formatting) is obsolete: the image
  already ships the fix, so the overlay only hides future upstream changes;
- an overlay for a path the image does not have targets another engine version.

Pure Python (no Ansible) so plain pytest can test it; library/vllm_overlays.py reads the image's files.
"""

import ast


def defined_names(source, filename="<overlay>"):
    """Names a Python module defines: top-level functions, classes, assignments and imports, plus
    `Class.member` for each class's methods and attributes. Raises SyntaxError for unparsable source."""
    names = set()
    _collect(ast.parse(source, filename).body, names, prefix="")
    return names


def _collect(body, names, prefix):
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(prefix + node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(prefix + node.name)
            if not prefix:  # members of top-level classes; nested classes are implementation detail
                _collect(node.body, names, prefix=node.name + ".")
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(prefix + name.id for name in ast.walk(target) if isinstance(name, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and not prefix:
            names.update(alias.asname or alias.name.split(".")[0] for alias in node.names if alias.name != "*")
        elif isinstance(node, (ast.If, ast.Try, ast.With)):  # `if TYPE_CHECKING:`, try/except imports
            for block in (
                node.body,
                getattr(node, "orelse", []),
                getattr(node, "finalbody", []),
                *[handler.body for handler in getattr(node, "handlers", [])],
            ):
                _collect(block, names, prefix)


def same_code(first, second):
    """True when two sources parse to the same syntax tree (comments, blank lines and formatting ignored)."""
    try:
        return ast.dump(ast.parse(first)) == ast.dump(ast.parse(second))
    except SyntaxError:
        return first == second


def check_overlay(index, src, dest, overlay_source, image_source):
    """(errors, notes) for one overlay. `image_source` is None when the image has no file at `dest`."""
    field = f"overlays[{index}]"
    where = f"{src} -> {dest}"
    if image_source is None:
        return [
            f"{field} ({where}): the image has no file at {dest}; rule: an overlay must replace a file the "
            f"pinned image ships (this one targets another engine version or a mistyped path)"
        ], []
    try:
        overlay_names = defined_names(overlay_source, src)
    except SyntaxError as error:
        return [
            f"{field} ({where}): does not parse: {error.msg} at line {error.lineno}; rule: an overlay must "
            f"be valid Python"
        ], []
    try:
        image_names = defined_names(image_source, dest)
    except SyntaxError:
        image_names = set()  # not Python (or another Python): only the obsolete check applies
    errors, notes = [], []
    missing = sorted(image_names - overlay_names)
    if missing:
        errors.append(
            f"{field} ({where}): lacks {len(missing)} name(s) the image's file defines: "
            f"{', '.join(missing)}; rule: an overlay must keep every top-level name and class member "
            f"of the file it replaces (the engine's other modules still use them) -- rebase the "
            f"overlay on the image's file"
        )
    if same_code(overlay_source, image_source):
        notes.append(f"{field} ({where}): obsolete, the image already ships this code; remove it from the profile")
    return errors, notes
