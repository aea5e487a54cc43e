"""README's "Your first real Sparks" as a newcomer follows it: in a scratch clone of this working tree (no
`.spark-serve/` yet), every command the table prints that needs no Spark runs verbatim with `bash -e` and does what
its step promises. The commands and the setting are read from README.md, never copied here; every step is classified
below, so a new step fails this test until it is."""

import json
import re
import shutil
import stat
import subprocess

import pytest
import yaml

from tests.runner import ROOT, command_env

pytestmark = pytest.mark.playbook

# What the test does with each step's commands: "run" them; "set" the step's setting in the file it names; "skip"
# them (why); "none": the step prints no command (held: a command added there must be classified).
STEPS = {
    "1": ("skip", "`make install` builds the virtualenv this test runs in (its tools come first on the PATH here)"),
    "2": ("none", "the shipped hosts.yml's placeholder addresses are all that --tags validate reads"),
    "2b": ("run", "the Hub token; the commands in NEEDS_A_SPARK are skipped"),
    "3": ("none", "a cable"),
    "4": ("set", "the image base, pinned by digest, in the inventory file the step names"),
    "5": ("run", "the API key"),
    "6": ("run", "validate: every rank's spec on the controller"),
    "7": ("skip", "the deploy prepares and starts the Sparks"),
    "8": ("none", "the client commands need the deployed head"),
    "9": ("none", "a reboot of a Spark"),
}
# Commands of a "run" step that reach a Spark (by their first words): skipped.
NEEDS_A_SPARK = {
    "ssh-copy-id ": "copies the SSH key to a Spark",
    "ansible-playbook site.yml -K ": "becomes root on every Spark to write its sudoers file",
}
# Step 4's placeholders, as a user fills them in.
PLACEHOLDERS = {"<arm64 vLLM build>": "nvcr.example/nvidia/vllm", "<64 hex>": "ab" * 32}
HUB_TOKEN = "hf_" + "7e57" * 8
STEP = re.compile(r"^(\d+[a-z]?)\. ")
# A code span that is a command: a program's name (or a subshell's parenthesis) and its arguments.
COMMAND = re.compile(r"^\(?[a-z][a-z0-9_.-]* ")


def table_rows():
    """{step number: its "what you do" cell} of the table under "## Your first real Sparks"."""
    section = (ROOT / "README.md").read_text().split("## Your first real Sparks", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        # A cell ends at a pipe outside code spans (a command may hold a pipe).
        cells = [cell.strip() for cell in re.split(r"\|(?=(?:[^`]*`[^`]*`)*[^`]*$)", line)[1:-1]]
        if cells and STEP.match(cells[0]):
            rows[STEP.match(cells[0]).group(1)] = cells[1]
    return rows


def code_spans(cell):
    return re.findall(r"`([^`]+)`", cell)


def commands(cell):
    return [span for span in code_spans(cell) if COMMAND.match(span)]


def needs_a_spark(command):
    return any(command.startswith(prefix) for prefix in NEEDS_A_SPARK)


def scratch_clone(tmp_path):
    """A `git clone` of this repository with the working tree laid over it as it is now (tracked files edited or
    not, new files git does not ignore; deleted ones gone): what a clone of the next commit would hold."""
    clone = tmp_path / "spark-serve"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, capture_output=True)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    for name in filter(None, listed.split("\0")):
        source, target = ROOT / name, clone / name
        if target.is_symlink() or target.exists():
            target.unlink()
        if source.is_symlink() or source.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)
    return clone


def set_as_printed(clone, cell):
    """Step 4 as a user does it: the step's `name: value` setting, placeholders filled, added to the file it names."""
    (setting,) = [span for span in code_spans(cell) if re.match(r"^\w+: ", span)]
    (path,) = [span for span in code_spans(cell) if span.endswith(".yml")]
    for placeholder, value in PLACEHOLDERS.items():
        setting = setting.replace(placeholder, value)
    assert "<" not in setting, f"README step 4: a placeholder this test does not fill: {setting}"
    with (clone / path).open("a") as file:
        file.write(f"{setting}\n")
    return yaml.safe_load((clone / path).read_text())


def run_as_printed(clone, command):
    """(rc, output) of `command` typed at a shell in the clone's root: bash -e, Ansible finding the clone's own
    ansible.cfg there, a Hub token on stdin for the step that prompts for one."""
    env = command_env()
    del env["ANSIBLE_CONFIG"]
    proc = subprocess.run(
        ["bash", "-e", "-c", command],
        cwd=clone,
        env=env,
        input=f"{HUB_TOKEN}\n",
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr


def mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_every_step_of_the_table_is_classified_and_each_skipped_command_is_printed():
    rows = table_rows()
    assert list(rows) == list(STEPS), "classify README's new or renumbered steps in STEPS"
    for step, (kind, _why) in STEPS.items():
        if kind == "none":
            assert commands(rows[step]) == [], f"README step {step} now prints a command: classify it"
    printed = [command for step, (kind, _) in STEPS.items() if kind == "run" for command in commands(rows[step])]
    for prefix in NEEDS_A_SPARK:
        assert any(command.startswith(prefix) for command in printed), f"no README command starts {prefix!r}"


def test_the_steps_commands_work_as_printed_in_a_fresh_clone(tmp_path):
    rows, clone = table_rows(), scratch_clone(tmp_path)
    state = clone / ".spark-serve"
    assert not state.exists(), "a fresh clone has no .spark-serve/ (.gitignore)"
    assert set_as_printed(clone, rows["4"])["spark_serve_image_base"].endswith("@sha256:" + "ab" * 32)
    ran = []
    for step, (kind, _why) in STEPS.items():
        if kind != "run":
            continue
        for command in filter(lambda command: not needs_a_spark(command), commands(rows[step])):
            rc, out = run_as_printed(clone, command)
            assert rc == 0, f"README step {step}: {command}\n{out[-4000:]}"
            ran.append(command)
    assert any("hf-token" in c for c in ran) and any("api-key" in c for c in ran), ran
    assert any(c.startswith("ansible-playbook site.yml --tags validate") for c in ran), ran
    assert mode(state) == 0o700
    assert (state / "hf-token").read_text() == f"{HUB_TOKEN}\n" and mode(state / "hf-token") == 0o600
    key = state / "api-key"
    assert re.fullmatch(r"[0-9a-f]{64}\n", key.read_text()) and mode(key) == 0o600
    for rank in (0, 1):
        spec = json.loads((state / "pair" / f"rank{rank}.spec.json").read_text())
        assert re.fullmatch(r"spark-serve/gb10:[0-9a-f]{16}", spec["image"]), spec["image"]
