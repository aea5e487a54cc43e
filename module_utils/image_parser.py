"""Every rank's argv parsed by the pinned image's own vLLM (docs/images.md): the script a throw-away container of
the image runs, and what its answer means. Pure: no Ansible imports; roles/vllm_service/library/vllm_image_parser.py
runs the container.

The script builds `vllm`'s CLI parser the way `vllm.entrypoints.cli.main` does (the serve subcommand's own
subparser_init) and parses each argv after `vllm`; argparse's own error line ("unrecognized arguments: --x",
"argument --max-num-seqs: invalid int value: 'many'") is what the user sees, with the image's vLLM version.
"""

import hashlib
import json

PARSE_SCRIPT = r"""
import contextlib, importlib.metadata, io, json, os, sys
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
try:
    version = importlib.metadata.version("vllm")
except importlib.metadata.PackageNotFoundError:
    version = "unknown"
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
import vllm.entrypoints.cli.serve as serve
top = FlexibleArgumentParser(prog="vllm")
commands = top.add_subparsers(required=False, dest="subparser")
for command in serve.cmd_init():
    command.subparser_init(commands)
answers = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            top.parse_args(argv[1:])
        answers.append({"ok": True})
    except SystemExit:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        answers.append({"ok": False, "error": lines[-1] if lines else "refused without a message"})
print("spark-serve-parser " + json.dumps({"version": version, "answers": answers}))
"""
MARKER = "spark-serve-parser "


def check_key(image_id, argvs):
    """What a passed check is remembered by on the node: the same image and the same argv need no second look."""
    return hashlib.sha256(json.dumps([image_id, argvs]).encode()).hexdigest()


def answer(stdout):
    """The script's answer in the container's output, or None (the image's Python or vLLM could not run it)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER) :])
    return None


def refusals(parsed, labels):
    """One line per rank whose argv the image's parser refused, naming the rank and the image's vLLM version."""
    return [
        f"{label}: vLLM {parsed['version']} in the image refuses its argv: {reply['error']}"
        for label, reply in zip(labels, parsed["answers"], strict=True)
        if not reply["ok"]
    ]


def public_version(version):
    """A PEP 440 version without its local part: `0.32.0+cpu` and `0.32.0` are one engine release."""
    return str(version).strip().split("+", 1)[0]


def version_problem(engine_version, image_version):
    """The profile's engine_version against the vLLM the image reports; None when they are one release. The block
    and the flag rules are those of engine_version: another release in the image would be judged by the wrong ones."""
    if public_version(engine_version) == public_version(image_version):
        return None
    return (
        f"engine_version={engine_version!r}: the image holds vLLM {image_version} (rule: engine-version-matches-image; "
        "the flags and the cache block are judged by engine_version's rules). Set the profile's engine_version to "
        f"{public_version(image_version)!r} (spark_serve_profile_overrides) or deploy an image of vLLM {engine_version}"
    )
