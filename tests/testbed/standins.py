"""Stand-ins for what cannot exist on this machine, built as real Debian packages in a flat apt repository.

TEST CODE ONLY: nothing here is used by a role. The roles install and verify these packages exactly as they
would the real ones from NVIDIA's apt repository on DGX OS:
  nvidia-driver-580-open   nvidia-smi reporting an NVIDIA GB10 on driver 580.173.02
  nvidia-driver-570-open   the wrong driver branch, for the preflight fault test
  nvidia-container-toolkit nvidia-ctk (runtime configure edits daemon.json like the real one) and a runtime shim
  spark-testbed-rdma       ibdev2netdev for the CX-7 RoCE device rocep1s0f1, reading the sysfs stand-in tree
                           that the test bed writes under /opt/testbed/sys (roce_network_sysfs_root), and
                           perftest's ib_write_bw, measuring over the fast link with TCP
"""

import hashlib
import subprocess
import tempfile
from pathlib import Path

NVIDIA_SMI = r"""#!/bin/sh
# STAND-IN nvidia-smi (spark-serve test bed): one NVIDIA GB10, driver @VERSION@, CUDA 13.0.
case "$*" in
  *--query-gpu=*)
    q=$(printf '%s\n' "$@" | sed -n 's/^--query-gpu=//p')
    out=""
    for f in $(printf '%s' "$q" | tr ',' ' '); do
      case "$f" in
        name) v="NVIDIA GB10" ;;
        driver_version) v="@VERSION@" ;;
        compute_cap) v="12.1" ;;
        memory.total) v="[N/A]" ;;
        *) echo "Field \"$f\" is not a valid field to query." >&2; exit 2 ;;
      esac
      out="${out:+$out, }$v"
    done
    echo "$out" ;;
  *)
    echo "| NVIDIA-SMI @VERSION@    Driver Version: @VERSION@    CUDA Version: 13.0 |"
    echo "|   0  NVIDIA GB10                  On  |   0000000F:01:00.0 Off |  N/A |" ;;
esac
"""

NVIDIA_CTK = r"""#!/usr/bin/python3
# STAND-IN nvidia-ctk (spark-serve test bed): `runtime configure --runtime=docker` adds the nvidia runtime to
# daemon.json the way the real tool does; `--version` prints the toolkit version.
import json, sys
args = sys.argv[1:]
if args[:1] == ["--version"]:
    print("NVIDIA Container Toolkit CLI version @VERSION@")
    sys.exit(0)
if args[:2] != ["runtime", "configure"]:
    sys.exit("usage: nvidia-ctk runtime configure --runtime=docker [--config=PATH] [--set-as-default]")
config = "/etc/docker/daemon.json"
for a in args[2:]:
    if a.startswith("--config="):
        config = a.split("=", 1)[1]
try:
    data = json.load(open(config))
except FileNotFoundError:
    data = {}
data.setdefault("runtimes", {})["nvidia"] = {"args": [], "path": "nvidia-container-runtime"}
if "--set-as-default" in args:
    data["default-runtime"] = "nvidia"
with open(config, "w") as out:
    json.dump(data, out, indent=4)
    out.write("\n")
print(f"INFO Wrote updated config to {config}")
"""

# The runtime shim runs containers with runc: there is no GPU to inject on the test bed.
NVIDIA_RUNTIME = (
    '#!/bin/sh\n# STAND-IN nvidia-container-runtime: plain runc (no GPU on the test bed).\nexec runc "$@"\n'
)

IBDEV2NETDEV = r"""#!/bin/sh
# STAND-IN ibdev2netdev (spark-serve test bed): maps the RDMA devices of the sysfs stand-in tree to netdevs.
root=${SPARK_TESTBED_SYSFS:-/opt/testbed/sys}
for dev in "$root"/class/infiniband/*; do
  [ -d "$dev" ] || continue
  name=$(basename "$dev")
  for port in "$dev"/ports/*; do
    p=$(basename "$port")
    state=$(sed 's/^[0-9]*: *//' "$port/state")
    netdev=$(cat "$dev/netdev" 2>/dev/null || echo "?")
    [ "$state" = "ACTIVE" ] && up=Up || up=Down
    echo "$name port $p ==> $netdev ($up)"
  done
done
"""

# roles/roce_network measures each rail with `--qp=N` (one word): the stand-in skips it, one TCP stream standing for
# every queue pair.
IB_WRITE_BW = r"""#!/usr/bin/python3
# STAND-IN ib_write_bw (spark-serve test bed): perftest's RDMA-write bandwidth test, measured with TCP over the same
# fast link (the test bed has no RDMA). Server: no host argument, one client on -p, then exit. Client: sends for -D
# seconds and prints perftest's summary table, BW average in Gb/sec (--report_gbits). -d -i -x -F are accepted.
import socket, sys, time
args, host, port, seconds, i = sys.argv[1:], None, 18515, 5.0, 0
while i < len(args):
    flag = args[i]
    if flag in ("-p", "--port"):
        port, i = int(args[i + 1]), i + 2
    elif flag in ("-D", "--duration"):
        seconds, i = float(args[i + 1]), i + 2
    elif flag in ("-d", "-i", "-x", "--ib-dev", "--ib-port", "--gid-index"):
        i += 2
    elif flag.startswith("-"):
        i += 1
    else:
        host, i = flag, i + 1
line = "-" * 87
if host is None:
    server = socket.create_server(("0.0.0.0", port))
    server.settimeout(seconds + 60)
    conn, _ = server.accept()
    while conn.recv(1 << 20):
        pass
    sys.exit(0)
for _ in range(50):
    try:
        conn = socket.create_connection((host, port), timeout=seconds + 30)
        break
    except OSError as error:
        failure = error
        time.sleep(0.1)
else:
    sys.exit(f"Couldn't connect to {host}:{port} ({failure})")
chunk, sent, started = b"\0" * (1 << 16), 0, time.monotonic()
while time.monotonic() - started < seconds:
    sent += conn.send(chunk)
elapsed = time.monotonic() - started
conn.close()
gbits = sent * 8 / elapsed / 1e9
print(line)
print(" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]")
print(f" 65536      {sent // 65536:<16d} {gbits:<18.2f} {gbits:<20.2f} {gbits * 1e9 / 8 / 65536 / 1e6:.6f}")
print(line)
"""

PACKAGES = {
    "nvidia-driver-580-open": ("580.173.02-0ubuntu1", {"usr/bin/nvidia-smi": NVIDIA_SMI}, "580.173.02"),
    "nvidia-driver-570-open": ("570.195.03-0ubuntu1", {"usr/bin/nvidia-smi": NVIDIA_SMI}, "570.195.03"),
    "nvidia-container-toolkit": (
        "1.17.8-1",
        {"usr/bin/nvidia-ctk": NVIDIA_CTK, "usr/bin/nvidia-container-runtime": NVIDIA_RUNTIME},
        "1.17.8",
    ),
    "spark-testbed-rdma": ("1.1-1", {"usr/bin/ibdev2netdev": IBDEV2NETDEV, "usr/bin/ib_write_bw": IB_WRITE_BW}, "1.1"),
}
CONFLICTS = {"nvidia-driver-580-open": "nvidia-driver-570-open", "nvidia-driver-570-open": "nvidia-driver-580-open"}


def build_deb(name, version, files, upstream, out_dir):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "DEBIAN").mkdir()
        control = [
            f"Package: {name}",
            f"Version: {version}",
            "Architecture: all",
            "Maintainer: spark-serve test bed",
            f"Description: STAND-IN {name} for the spark-serve test bed",
        ]
        if name in CONFLICTS:
            control += [f"Conflicts: {CONFLICTS[name]}", f"Replaces: {CONFLICTS[name]}"]
        (root / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
        for rel, text in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text.replace("@VERSION@", upstream))
            path.chmod(0o755)
        deb = out_dir / f"{name}_{version}_all.deb"
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "-Zgzip", "-b", str(root), str(deb)], check=True, capture_output=True
        )
    return deb


def packages_index(debs):
    stanzas = []
    for deb in debs:
        control = subprocess.run(
            ["dpkg-deb", "-f", str(deb)], check=True, capture_output=True, text=True
        ).stdout.strip()
        data = deb.read_bytes()
        stanzas.append(
            f"{control}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
            f"MD5sum: {hashlib.md5(data).hexdigest()}\nSHA256: {hashlib.sha256(data).hexdigest()}\n"
        )
    return "\n".join(stanzas)


def build_apt_repo(out_dir):
    """A flat apt repository (`deb [trusted=yes] http://HOST/apt ./`) with every stand-in package."""
    out_dir.mkdir(parents=True, exist_ok=True)
    debs = [
        build_deb(name, version, files, upstream, out_dir)
        for name, (version, files, upstream) in sorted(PACKAGES.items())
    ]
    (out_dir / "Packages").write_text(packages_index(debs))
    return out_dir


def rdma_sysfs_tree(root, netdev, gid_address, state="4: ACTIVE", device="rocep1s0f1"):
    """The sysfs files roce_network reads for an RDMA device's port 1, laid out as on a CX-7: GIDs 0/1 are
    link-local (RoCE v1/v2), 2/3 the IPv4-mapped address of the netdev (RoCE v1/v2), so the RoCEv2 index is 3."""
    dev = root / "class" / "infiniband" / device
    port = dev / "ports" / "1"
    (port / "gids").mkdir(parents=True, exist_ok=True)
    (port / "gid_attrs" / "types").mkdir(parents=True, exist_ok=True)
    (port / "state").write_text(f"{state}\n")
    (dev / "netdev").write_text(f"{netdev}\n")
    a, b, c, d = (int(x) for x in gid_address.split("."))
    mapped = f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"
    gids = ["fe80:0000:0000:0000:0000:0000:0000:0001"] * 2 + [mapped] * 2
    for index, (gid, kind) in enumerate(zip(gids, ["IB/RoCE v1", "RoCE v2"] * 2, strict=True)):
        (port / "gids" / str(index)).write_text(f"{gid}\n")
        (port / "gid_attrs" / "types" / str(index)).write_text(f"{kind}\n")
    return dev
