"""The test bed: up to four Docker-in-Docker nodes with sshd, a registry and a services host, on one machine.

    python tests/testbed/testbed.py up [--nodes 2]   # 1-4 nodes; start dockerd if needed, build images (cached)
    python tests/testbed/testbed.py down             # remove containers and network (volumes kept: --purge)
    python tests/testbed/testbed.py status

Everything lives on the docker network 10.253.0.0/24 (explicit subnet; inner daemons and the host daemon
get their own explicit ranges inside 10.253.0.0/16). Ansible reaches the nodes over SSH with a key
generated into .testbed/, exactly like real Sparks. Stand-ins for what cannot exist here (NVIDIA driver,
container toolkit, CX-7 RDMA device, model hub) are built by tests/testbed/standins.py and are never part
of a role.
"""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import standins

# Several test beds can run side by side (SPARK_TESTBED_INSTANCE=0..11), each in its own /20 of 10.253.0.0/16:
#   10.253.B.0/24    management network: .2 registry, .3 services (apt stand-in repo, model hub), .10+ nodes
#   10.253.B+1.0/24  the "CX-7" fabric (MTU 9000), renamed enp1s0f1np1 inside each node: one bridge for all
#                    nodes, as a switch (the pair's point-to-point cable is the two-node case of it)
#   10.253.B+2+n     node n's inner docker bridge (n < 4); 10.253.B+8+2n/23 its address pool
#   10.253.B+6.0/24  the quad's second rail (test_service_quad.py: a macvlan on each node's fabric netdev)
INSTANCE = int(os.environ.get("SPARK_TESTBED_INSTANCE", "0"))
BASE = 16 * INSTANCE
PREFIX = f"spark-serve-tb{INSTANCE}"
IMAGE_PREFIX = "spark-serve-tb"
STATE = ROOT / ".testbed" / str(INSTANCE)
KEY_DIR = ROOT / ".testbed"
NETWORK, FAST_NETWORK = f"{PREFIX}-net", f"{PREFIX}-fast"
SUBNET, GATEWAY = f"10.253.{BASE}.0/24", f"10.253.{BASE}.1"
FAST_SUBNET, FAST_GATEWAY = f"10.253.{BASE + 1}.0/24", f"10.253.{BASE + 1}.1"
REGISTRY_IP, SERVICES_IP = f"10.253.{BASE}.2", f"10.253.{BASE}.3"
MAX_NODES = 4
NODE_IPS = [f"10.253.{BASE}.{10 + n}" for n in range(MAX_NODES)]
FAST_NETDEV, FAST_MTU = "enp1s0f1np1", 9000
REGISTRY = f"{REGISTRY_IP}:5000"
REGISTRY_HOST_PORT = 5000 + INSTANCE
HOST_DOCKERD_ARGS = ["--bip", "10.253.250.1/24", "--default-address-pool", "base=10.253.192.0/19,size=24"]
SUITE = "trixie"  # Compose v2 (docker-compose 2.26) and docker.io 26, like DGX OS
NODE_PACKAGES = [
    "python3",
    "python3-apt",
    "openssh-server",
    "sudo",
    "docker.io",
    "docker-cli",
    "docker-compose",
    "docker-registry",
    "iproute2",
    "iputils-ping",
    "rsync",
    "ca-certificates",
    "procps",
    "curl",
    "gnupg",
    "tini",
    "less",
    "python3-docker",  # the Docker SDK community.docker's modules use on the node
    "nginx",  # what roles/front_door installs on a real head; pinned there to the version this image holds
    "libnginx-mod-http-js",  # the door's njs module (roles/front_door: the key compared as its SHA-256 digest)
    "nftables",  # roles/fabric_firewall's table (DGX OS ships it)
    "python3-venv",  # roles/vllm_router's own venv on the fleet's router host (node-2)
    "python3-packaging",  # what ansible.builtin.pip needs on that host (roles/vllm_router installs both)
    # roles/monitoring's packages, pinned there to the versions this image holds (nodes reach no Debian mirror)
    "prometheus",
    "prometheus-alertmanager",
    "prometheus-node-exporter",
]
# `--privileged` fails here (no CAP_SYS_RESOURCE in the host's bounding set): emulate it.
NODE_RUN_OPTS = [
    "--cap-add",
    "ALL",
    "--cap-drop",
    "SYS_RESOURCE",
    "--security-opt",
    "seccomp=unconfined",
    "--security-opt",
    "apparmor=unconfined",
    "--security-opt",
    "systempaths=unconfined",
    "--device-cgroup-rule",
    "a *:* rwm",
    "--cgroupns",
    "host",
    "--tmpfs",
    "/run",
    "--tmpfs",
    "/tmp",
    "--shm-size",
    "2g",
]
# Services the packages enable that a Spark's boot does not start for spark-serve (nginx: once roles/front_door has;
# the monitoring services: once roles/monitoring has).
BOOT_DISABLED = [
    "nginx",
    "docker-registry",
    "rsync",
    "prometheus",
    "prometheus-alertmanager",
    "prometheus-node-exporter",
]
# Debian's /etc/init.d/docker raises rlimits, which a node without CAP_SYS_RESOURCE cannot: let it go on.
INIT_SCRIPT_PATCH = r"s/^\(\s*ulimit -[npu] [0-9a-z]*\)$/\1 2>\/dev\/null || true/"


def log(msg):
    print(f"[testbed] {msg}", flush=True)


def sh(args, check=True, capture=True, timeout=600, **kw):
    proc = subprocess.run(args, capture_output=capture, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise SystemExit(
            f"[testbed] {' '.join(map(str, args))} failed ({proc.returncode}):\n"
            f"{(proc.stdout or '')[-3000:]}{(proc.stderr or '')[-3000:]}"
        )
    return proc


def docker(*args, **kw):
    return sh(["docker", *args], **kw)


def wait_for(what, probe, timeout_s, interval_s=0.5):
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / interval_s) + 1):
        if probe():
            return
        if time.monotonic() > deadline:
            break
        time.sleep(interval_s)
    raise SystemExit(f"[testbed] timed out after {timeout_s}s waiting for {what}")


def ensure_dockerd():
    if docker("info", check=False, timeout=20).returncode == 0:
        return
    log("starting dockerd (none running)")
    KEY_DIR.mkdir(exist_ok=True)
    with open(KEY_DIR / "dockerd.log", "ab") as out:
        subprocess.Popen(["dockerd", *HOST_DOCKERD_ARGS], stdout=out, stderr=out, start_new_session=True)
    wait_for("dockerd", lambda: docker("info", check=False, timeout=20).returncode == 0, 60)


def apt_mirror():
    """The Debian mirror apt already uses on this machine (never hard-coded)."""
    for path in sorted(Path("/etc/apt").glob("sources.list.d/*.sources")):
        for line in path.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    for line in Path("/etc/apt/sources.list").read_text().splitlines():
        if line.startswith("deb ") and "security" not in line:
            return line.split()[1]
    raise SystemExit("[testbed] no Debian mirror found in /etc/apt")


def content_tag(*parts):
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part if isinstance(part, bytes) else str(part).encode())
    return digest.hexdigest()[:12]


def image_exists(ref):
    return docker("image", "inspect", ref, check=False).returncode == 0


def build_node_image():
    entrypoint = (HERE / "node-entrypoint.sh").read_bytes()
    recipe = (SUITE, " ".join(NODE_PACKAGES), entrypoint, INIT_SCRIPT_PATCH, " ".join(BOOT_DISABLED))
    tag = f"{IMAGE_PREFIX}/node:{content_tag(*recipe)}"
    if image_exists(tag):
        return tag
    log(f"building node image {tag} with debootstrap ({SUITE}); ~2-3 min once, cached by content")
    with tempfile.TemporaryDirectory(prefix="tb-rootfs-") as rootfs:
        sh(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(NODE_PACKAGES)}",
                "--keyring=/usr/share/keyrings/debian-archive-keyring.gpg",
                SUITE,
                rootfs,
                apt_mirror(),
            ],
            timeout=1500,
        )
        root = Path(rootfs)
        sh(["sed", "-i", INIT_SCRIPT_PATCH, str(root / "etc/init.d/docker")])
        # A node starts the services a role enabled (node-entrypoint.sh): none of the packages' own at first.
        for service in BOOT_DISABLED:
            sh(["chroot", rootfs, "update-rc.d", service, "disable"])
        shutil.copy(HERE / "node-entrypoint.sh", root / "usr/local/sbin/testbed-entrypoint")
        os.chmod(root / "usr/local/sbin/testbed-entrypoint", 0o755)
        (root / "etc/ssh/sshd_config.d/testbed.conf").write_text(
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n"
        )
        for key in root.glob("etc/ssh/ssh_host_*"):
            key.unlink()  # every node generates its own host keys at start
        shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
        (root / "var/cache/apt/archives/partial").mkdir(parents=True)
        tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
        sh(
            [
                "docker",
                "import",
                "--change",
                'ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/sbin/testbed-entrypoint"]',
                "-",
                tag,
            ],
            stdin=tar.stdout,
            timeout=600,
        )
        tar.wait(timeout=60)
    return tag


def ensure_networks():
    if docker("network", "inspect", NETWORK, check=False).returncode != 0:
        docker("network", "create", "--label", f"{PREFIX}=1", "--subnet", SUBNET, "--gateway", GATEWAY, NETWORK)
    if docker("network", "inspect", FAST_NETWORK, check=False).returncode != 0:
        docker(
            "network",
            "create",
            "--label",
            f"{PREFIX}=1",
            "--subnet",
            FAST_SUBNET,
            "--gateway",
            FAST_GATEWAY,
            "--opt",
            f"com.docker.network.driver.mtu={FAST_MTU}",
            FAST_NETWORK,
        )


def ssh_key():
    key = KEY_DIR / "id_ed25519"
    if not key.exists():
        KEY_DIR.mkdir(exist_ok=True)
        sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "spark-serve-testbed", "-f", str(key)])
    return key


def container_state(name):
    proc = docker("inspect", "-f", "{{.State.Status}}", name, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def run_container(name, image, args, cmd=()):
    if container_state(name) == "running":
        return
    if container_state(name):
        docker("rm", "-f", name)
    docker("run", "-d", "--name", name, "--label", f"{PREFIX}=1", "--network", NETWORK, *args, image, *cmd)


def inner_daemon_json(index):
    return {
        "bip": f"10.253.{BASE + 2 + index}.1/24",
        "default-address-pools": [{"base": f"10.253.{BASE + 8 + 2 * index}.0/23", "size": 24}],
        "insecure-registries": [REGISTRY],
        "storage-driver": "overlay2",
    }


def authorizes(name, pubkey):
    """Whether the running node `name` was started with this checkout's key (another checkout's node refuses it)."""
    env = docker("inspect", "-f", "{{range .Config.Env}}{{println .}}{{end}}", name, check=False).stdout
    return f"TESTBED_AUTHORIZED_KEY={pubkey}" in env.splitlines()


def start_node(index, image, pubkey):
    name = f"{PREFIX}-node-{index}"
    if container_state(name) == "running":
        image_now = docker("inspect", "-f", "{{.Config.Image}}", name, check=False).stdout.strip()
        if authorizes(name, pubkey) and image_now == image:
            return name
        log(f"{name} was started by another checkout (its SSH key) or from another node image: starting it again")
        docker("rm", "-f", name)
    node_dir = STATE / f"node-{index}"
    node_dir.mkdir(parents=True, exist_ok=True)
    sysfs = node_dir / "sys"
    shutil.rmtree(sysfs, ignore_errors=True)
    standins.rdma_sysfs_tree(sysfs, FAST_NETDEV, gid_address=fast_address(index))
    run_container(
        name,
        image,
        [
            "--hostname",
            f"node-{index}",
            "--ip",
            NODE_IPS[index],
            *NODE_RUN_OPTS,
            "-v",
            f"{PREFIX}-node-{index}-docker:/var/lib/docker",
            "-v",
            f"{sysfs}:/opt/testbed/sys",
            "-e",
            f"TESTBED_AUTHORIZED_KEY={pubkey}",
            "-e",
            f"TESTBED_DAEMON_JSON={json.dumps(inner_daemon_json(index), indent=2)}",
            "-e",
            f"TESTBED_FAST_ADDRESS={fast_address(index)}",
            "-e",
            f"TESTBED_FAST_NETDEV={FAST_NETDEV}",
        ],
    )
    attach_fast_link(name, index)
    return name


def fast_address(index):
    return f"10.253.{BASE + 1}.{10 + index}"


def attach_fast_link(name, index):
    """The CX-7 stand-in: a real link between the nodes under the CX-7 netdev name, left unconfigured
    (MTU 1500, no address) for roce_network to set up."""
    docker("network", "connect", "--ip", fast_address(index), FAST_NETWORK, name)
    mac = docker(
        "inspect", "-f", f'{{{{(index .NetworkSettings.Networks "{FAST_NETWORK}").MacAddress}}}}', name
    ).stdout.strip()
    script = (
        f"dev=$(ip -o link | awk -F\": \" '/{mac}/ {{print $2}}' | cut -d@ -f1); "
        f'ip link set "$dev" down && ip link set "$dev" name {FAST_NETDEV} && '
        f"ip addr flush dev {FAST_NETDEV} && ip link set {FAST_NETDEV} mtu 1500 up"
    )
    docker("exec", name, "sh", "-c", script)


# The model-hub stand-in (hub_standin.py) serves STATE/services/hub/<org>/<name>/ on the services host.
HUB_PORT = 8080
# repository -> (tiny_model.py --model, --resume-blob-mib)
HUB_REPOS = {
    # 24 MiB > huggingface_hub's 10 MiB chunk: an interrupted transfer of it resumes with Range
    "spark-serve/tiny-llama": ("tiny-llama", 24),
    # 64 MiB: the quad's parallel copies of it last long enough to see them overlap (test_service_quad.py)
    "spark-serve/tiny-qwen3-next": ("tiny-qwen3-next", 64),
}
HUB_STATE = STATE / "services" / "hub-state"  # requests.jsonl (request log) and control.json (test hooks)


def hub_url():
    return f"http://{SERVICES_IP}:{HUB_PORT}"


def ensure_hub_models():
    """Each tiny model (tiny_model.py, with .venv-engine's torch) as its hub repository; remade when its recipe
    changes. Without .venv-engine the hub serves no model (make engine)."""
    hub = STATE / "services" / "hub"
    hub.mkdir(parents=True, exist_ok=True)
    python = ROOT / ".venv-engine" / "bin" / "python"
    for repo, (model, blob_mib) in HUB_REPOS.items():
        target = hub / repo
        recipe = content_tag(
            (HERE / "tiny_model.py").read_bytes(),
            (ROOT / "tests/engine/models" / model / "config.json").read_bytes(),
            blob_mib,
        )
        stamp = hub / f".{repo.replace('/', '--')}.recipe"
        if stamp.exists() and stamp.read_text().strip() == recipe:
            continue
        if not python.exists():
            log(f"no {python.relative_to(ROOT)}: the model hub stand-in serves no model (run `make engine`)")
            return
        shutil.rmtree(target, ignore_errors=True)
        command = [str(python), str(HERE / "tiny_model.py"), str(target), "--model", model]
        sh(command + ["--resume-blob-mib", str(blob_mib)], timeout=600)
        stamp.write_text(recipe + "\n")


def start_services(image):
    """The services host: the stand-in apt repository (NVIDIA packages) over HTTP on port 80 and the model-hub
    stand-in on port HUB_PORT (request log and test hooks in HUB_STATE)."""
    apt = standins.build_apt_repo(STATE / "services" / "apt")
    ensure_hub_models()
    HUB_STATE.mkdir(parents=True, exist_ok=True)
    hub = (
        f"python3 /opt/testbed/lib/hub_standin.py --root /srv/hub --port {HUB_PORT} "
        "--log /var/lib/hub-standin/requests.jsonl --control /var/lib/hub-standin/control.json &"
    )
    run_container(
        f"{PREFIX}-services",
        image,
        [
            "--ip",
            SERVICES_IP,
            "--init",
            "-v",
            f"{apt.parent}:/srv:ro",
            "-v",
            f"{HERE}:/opt/testbed/lib:ro",
            "-v",
            f"{HUB_STATE}:/var/lib/hub-standin",
            "--entrypoint",
            "/bin/sh",
        ],
        ["-c", f"{hub} exec python3 -m http.server --directory /srv 80"],
    )


def hub_ready():
    return sh(["curl", "-sf", "--max-time", "2", f"{hub_url()}/_standin"], check=False).returncode == 0


REGISTRY_CONFIG = """version: 0.1
storage:
  filesystem: {rootdirectory: /var/lib/docker-registry}
  delete: {enabled: true}
http:
  addr: :5000
"""


def start_registry(image):
    """Debian's docker-registry (distribution 2.8), without the package's default htpasswd auth."""
    STATE.mkdir(parents=True, exist_ok=True)
    config = STATE / "registry.yml"
    config.write_text(REGISTRY_CONFIG)
    run_container(
        f"{PREFIX}-registry",
        image,
        [
            "--ip",
            REGISTRY_IP,
            "-p",
            f"127.0.0.1:{REGISTRY_HOST_PORT}:5000",
            "-v",
            f"{PREFIX}-registry:/var/lib/docker-registry",
            "-v",
            f"{config}:/etc/spark-testbed/registry.yml:ro",
            "--entrypoint",
            "/usr/bin/docker-registry",
        ],
        ["serve", "/etc/spark-testbed/registry.yml"],
    )


def node_ready(name):
    probe = docker(
        "exec", name, "sh", "-c", "docker info >/dev/null 2>&1 && pgrep -x sshd >/dev/null", check=False, timeout=30
    )
    return probe.returncode == 0


def up(nodes):
    ensure_dockerd()
    image = build_node_image()
    ensure_networks()
    pubkey = ssh_key().with_suffix(".pub").read_text().strip()
    start_registry(image)
    start_services(image)
    names = [start_node(i, image, pubkey) for i in range(nodes)]
    for name in names:
        wait_for(f"{name} (sshd + docker)", lambda n=name: node_ready(n), 90)
    registry_url = f"http://127.0.0.1:{REGISTRY_HOST_PORT}/v2/"
    wait_for("registry", lambda: sh(["curl", "-sf", registry_url], check=False).returncode == 0, 30)
    for _ in range(20):
        if hub_ready():
            break
        time.sleep(0.5)
    else:  # a services container started before the hub stand-in existed: `down` and `up` to get it
        log(f"model hub stand-in not answering at {hub_url()}")
    (STATE / "image").write_text(image + "\n")
    log(
        f"up (instance {INSTANCE}): {', '.join(f'{n} {NODE_IPS[i]}' for i, n in enumerate(names))}; "
        f"registry {REGISTRY} (127.0.0.1:{REGISTRY_HOST_PORT} from the host); services {SERVICES_IP} "
        f"(apt :80, model hub :{HUB_PORT})"
    )


def down(purge=False):
    if docker("info", check=False, timeout=20).returncode != 0:
        return
    ids = docker("ps", "-aq", "--filter", f"label={PREFIX}=1").stdout.split()
    if ids:
        docker("rm", "-f", *ids, timeout=120)
    for net in (NETWORK, FAST_NETWORK):
        docker("network", "rm", net, check=False)
    if purge:
        # Node volumes go (the next nodes start like fresh machines); the registry keeps its images, as a
        # real registry would, so the next test bed does not push the engine image again.
        vols = [
            v
            for v in docker("volume", "ls", "-q").stdout.split()
            if v.startswith(f"{PREFIX}-node-") or (purge == "all" and v.startswith(PREFIX))
        ]
        if vols:
            docker("volume", "rm", *vols)
    log("down" + (f" (volumes purged: {purge})" if purge else ""))


def status():
    docker("ps", "-a", "--filter", f"label={PREFIX}=1", capture=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    up_p = sub.add_parser("up")
    up_p.add_argument("--nodes", type=int, default=2, choices=[1, 2, 3, MAX_NODES])
    down_p = sub.add_parser("down")
    down_p.add_argument("--purge", action="store_const", const="nodes", help="also remove the node volumes")
    down_p.add_argument(
        "--purge-all", dest="purge", action="store_const", const="all", help="also remove the registry volume"
    )
    sub.add_parser("status")
    args = parser.parse_args()
    if args.cmd == "up":
        up(args.nodes)
    elif args.cmd == "down":
        down(args.purge)
    else:
        status()


if __name__ == "__main__":
    sys.exit(main())
