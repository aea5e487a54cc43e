"""What a probe task registers, for the role check modules' tests (module_utils/probe_results.py reads it)."""


def ran(*lines, rc=0, stderr=""):
    """A command task's registered result: its output lines, exit code and error text."""
    return {"rc": rc, "stdout": "\n".join(lines), "stdout_lines": list(lines), "stderr": stderr}
