"""Reading the results of read-only probe tasks (command, slurp) that a role registered and hands to its checks
module. Pure: no Ansible imports."""

import base64

MISSING_BINARY = "Error executing command."  # Ansible's msg when the command's binary cannot be run


def command_error(result):
    """What a failed command said: its stderr, else Ansible's message (a missing binary said in plain words)."""
    stderr = str(result.get("stderr", "")).strip()
    return stderr or str(result.get("msg", "")).replace(MISSING_BINARY, "not found or not executable")


def output_lines(result):
    """A command's output lines; none when the probe was skipped."""
    return list(result.get("stdout_lines") or [])


def slurped(results):
    """{path: text} of a slurp loop's results that were read (unreadable or skipped files left out)."""
    return {
        result["item"]: base64.b64decode(result["content"]).decode("utf-8", errors="replace")
        for result in results
        if "content" in result
    }
