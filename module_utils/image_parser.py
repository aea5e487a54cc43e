"""Every rank's argv parsed by the pinned image's own vLLM (docs/images.md): the script a throw-away container of
the image runs, and what its answer means. Pure: no Ansible imports; roles/vllm_service/library/vllm_image_parser.py
runs the container.

The script builds `vllm`'s CLI parser the way `vllm.entrypoints.cli.main` does (the serve subcommand's own
subparser_init) and parses each argv after `vllm`; argparse's own error line ("unrecognized arguments: --x",
"argument --max-num-seqs: invalid int value: 'many'") is what the user sees, with the image's vLLM version.

When vLLM does not import (a patch of the image's series broke it), the answer says so instead: the exception's own
line, the vLLM file and line it names, the traceback, and the patches the image applied (its provenance.json).
"""

import hashlib
import json

PARSE_SCRIPT = r"""
import contextlib, importlib.metadata, io, json, os, sys, traceback
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
try:
    version = importlib.metadata.version("vllm")
except importlib.metadata.PackageNotFoundError:
    version = "unknown"

def applied():
    try:
        with open(sys.argv[2]) as handle:
            return [patch["name"] for patch in json.load(handle)["patches"]]
    except (IndexError, OSError, ValueError, KeyError, TypeError):
        return None  # not built from an image folder (a registry image)

def failure(error):
    # A SyntaxError names the file it could not compile; any other error, the last vLLM frame it passed through.
    if isinstance(error, SyntaxError):
        path, line, text = error.filename, error.lineno, error.msg
    else:
        frames = traceback.extract_tb(error.__traceback__)
        frame = ([f for f in frames if "/vllm/" in f.filename] or frames)[-1]
        path, line, text = frame.filename, frame.lineno, str(error)
    lines = traceback.format_exception(type(error), error, error.__traceback__)
    return {"type": type(error).__name__, "message": text, "file": path, "line": line, "traceback": "".join(lines)}

try:
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ModuleNotFoundError as missing:
        if missing.name != "vllm.utils.argparse_utils":  # only an older vLLM lacks it; anything else is broken
            raise
        from vllm.utils import FlexibleArgumentParser
    import vllm.entrypoints.cli.serve as serve
except Exception as error:
    broken = {"version": version, "import_error": failure(error), "patches": applied()}
    print("spark-serve-parser " + json.dumps(broken))
    sys.exit(0)
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
PROVENANCE = "/opt/spark-serve/image/provenance.json"  # what images/apply_series.py applied (docs/images.md)


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


def in_vllm(path):
    """A file as vLLM's package names it (vllm/x.py), wherever the image installed it."""
    return path[path.rfind("/vllm/") + 1 :] if "/vllm/" in path else path


def import_failure(image, parsed):
    """One line for an image whose vLLM does not import: the exception's own line with the vLLM file and line, and
    the likely cause, the image's patch series (the traceback stays out: the module returns it apart)."""
    error, patches = parsed["import_error"], parsed.get("patches")
    if patches:
        cause = (
            f"a patch of its series likely broke it ({', '.join(patches)}): fix or drop it in the image folder "
            "(series and SHA256SUMS) and rerun"
        )
    elif patches == []:
        cause = "the image applies no patch: its base's vLLM does not import"
    else:
        cause = "the image was not built from an image folder (no provenance.json): its vLLM does not import"
    text = " ".join(str(error["message"]).split())
    return (
        f"vLLM {parsed['version']} in {image} does not import: {error['type']}: {text} ({in_vllm(error['file'])}, "
        f"line {error['line']}); {cause}; nothing was started (the traceback is in this task's `traceback`)"
    )


def last_line(text):
    """The last line that says something (a container's error output ends with its cause)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
