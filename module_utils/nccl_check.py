"""The pinned image's NCCL against known NCCL faults of the Sparks. Pure Python (no Ansible): the in-image check
(roles/vllm_service/library/vllm_container_paths.py) reads the version inside the image and asks here.

Known fault: cross-node tensor parallel with CUDA graphs deadlocks on GB10 with NCCL 2.28.9; NCCL 2.30.4 fixes it
(vLLM issue #52504; docs/engine-facts.md).
"""

import re
import shlex

CUDA_GRAPH_DEADLOCK_FIXED_IN = (2, 30, 4)
CUDA_GRAPH_DEADLOCK_ISSUE = "vLLM issue #52504"

# Where an image keeps its NCCL, in the order torch finds it: the pip wheel's metadata (nvidia-nccl-cu12/13, what
# a pip-installed torch loads), the system library's versioned file name (NGC images), then NGC's NCCL_VERSION.
_DIST_INFO = [
    "/usr/local/lib/python3*/dist-packages",
    "/usr/lib/python3*/dist-packages",
    "/usr/local/lib/python3*/site-packages",
    "/opt/*/lib/python3*/site-packages",
]


def version_script(root=""):
    """POSIX shell that prints `nccl:<version>` (`nccl:none` without NCCL) for the file system at `root`."""
    wheels = " ".join(f"{root}{d}/nvidia_nccl_cu*.dist-info" for d in _DIST_INFO)
    libraries = f"{root}/usr/lib/*-linux-gnu/libnccl.so.2.* {root}/usr/local/lib/libnccl.so.2.*"
    wheel_version = shlex.quote(r"s/.*nvidia_nccl_cu[0-9]*-\([0-9.]*\)\.dist-info$/\1/p")
    library_version = shlex.quote(r"s/.*libnccl\.so\.\([0-9.]*\)$/\1/p")
    return (
        f"v=$(ls -d {wheels} 2>/dev/null | sed -n {wheel_version} | head -n 1); "
        f'[ -n "$v" ] || v=$(ls {libraries} 2>/dev/null | sed -n {library_version} | head -n 1); '
        'echo "nccl:${v:-${NCCL_VERSION:-none}}"'
    )


def parse_version(text):
    """(major, minor, patch) from '2.28.9' (a suffix such as '-1+cuda13.0' ignored), or None."""
    match = re.match(r"^\s*(\d+)\.(\d+)\.(\d+)", str(text or ""))
    return tuple(int(part) for part in match.groups()) if match else None


def uses_cuda_graphs(argv):
    """Whether the engine captures CUDA graphs: unless --enforce-eager, or a compilation config with
    cudagraph_mode NONE."""
    args = [str(a) for a in argv]
    if "--enforce-eager" in args:
        return False
    return not any(re.search(r'"?cudagraph_mode"?\s*[:=]\s*"?NONE', a) for a in args)


def cuda_graph_deadlock(nccl_version, cross_node, cuda_graphs):
    """Why this combination would deadlock, or None. `nccl_version` is the image's ('none' without NCCL)."""
    version = parse_version(nccl_version)
    if not (cross_node and cuda_graphs) or version is None or version >= CUDA_GRAPH_DEADLOCK_FIXED_IN:
        return None
    fixed = ".".join(map(str, CUDA_GRAPH_DEADLOCK_FIXED_IN))
    return (
        f"the pinned image's NCCL {nccl_version} deadlocks cross-node tensor parallel with CUDA graphs on GB10 "
        f"({CUDA_GRAPH_DEADLOCK_ISSUE}, fixed in NCCL {fixed}): pin an image with NCCL >= {fixed}, or set "
        "engine.enforce_eager: true in the profile"
    )


def what_was_checked(nccl_version, cross_node, cuda_graphs):
    """One line for the task output: what the NCCL check looked at and concluded."""
    if parse_version(nccl_version) is None:
        return (
            "no NCCL in the image (a CPU build): the CUDA-graph deadlock of NCCL < "
            + ".".join(map(str, CUDA_GRAPH_DEADLOCK_FIXED_IN))
            + " cannot occur; the check reads the NCCL wheel's metadata, libnccl.so.2.x or NCCL_VERSION"
        )
    problem = cuda_graph_deadlock(nccl_version, cross_node, cuda_graphs)
    setup = f"{'cross-node' if cross_node else 'one node'}, CUDA graphs {'on' if cuda_graphs else 'off'}"
    return f"NCCL {nccl_version} ({setup}): " + ("REFUSED" if problem else "no known deadlock")
