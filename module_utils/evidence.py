"""What a diagnostics bundle holds and how it is kept clean (library/vllm_evidence.py on each node,
library/spark_bundle.py on the controller): the kernel lines a GB10 or CX-7 fault leaves, the secrets' literal values
to hide, the final scan that refuses a bundle still holding one, and the tarball both write.

Python's standard library only, so that plain pytest can test it.
"""

import io
import os
import re
import tarfile
import time

from ansible.module_utils.redaction import redact_text

# Kernel lines an upstream report asks for: NVIDIA Xid and NVRM errors, PCIe AER, the CX-7's mlx5 driver, the
# out-of-memory killer, hung tasks and soft lockups.
KERNEL_FAULT = re.compile(
    r"NVRM|Xid|\bAER\b|pcieport|mlx5|Out of memory|oom-kill|oom_reaper|blocked for more than|soft lockup|hung_task",
    re.IGNORECASE,
)


def kernel_lines(dmesg_text, limit=2000):
    """The last `limit` kernel lines that mention a fault of the GPU, the PCIe bus, the CX-7 or memory."""
    return [line for line in dmesg_text.splitlines() if KERNEL_FAULT.search(line)][-limit:]


def env_file_secrets(text):
    """Literal values of an env file's assignments (`NAME=value` per line; the rank's secrets.env): what a bundle
    must never hold, whatever name or line it appears under."""
    values = []
    for line in text.splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and name and not name.startswith("#") and len(value.strip().strip("'\"")) >= 8:
            values.append(value.strip().strip("'\""))
    return values


def scrub(text, secrets):
    """(text with every known secret and every secret-looking assignment, bearer token and option hidden, whether
    anything changed)."""
    clean = redact_text(text, secrets)
    return clean, clean != text


def leaks(members, secrets):
    """Names of the members (name -> bytes) that still hold a secret's literal value: a bundle with any is refused."""
    needles = [secret.encode() for secret in secrets if secret]
    return sorted(name for name, data in members.items() if any(needle in data for needle in needles))


def write_tarball(dest, members, top=""):
    """members (name -> bytes) as a gzipped tarball at `dest`, each under `top`/ when given, readable by root only."""
    with tarfile.open(dest, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(f"{top}/{name}" if top else name)
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o600
            tar.addfile(info, io.BytesIO(data))
    os.chmod(dest, 0o600)
