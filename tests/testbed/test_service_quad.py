"""Four test nodes behind one switch (inventories/testbed-quad): site.yml prepares nodes 2 and 3 (bare on a new
machine: baseline, driver and toolkit stand-ins, the fabric, the image) with the other two, fans the model out and
starts TP4 of the tiny qwen3_next (Gated DeltaNet + full attention + MoE) on vLLM's own multi-node engine: rank 0 on
node-0 serves, ranks 1-3 are headless workers, prefix caching in align mode.

The seeds' cache path runs on this served hybrid, end to end (one start serves both): the engine's logged block
equals the prediction, a request shorter than one block never hits while one of two blocks or more does (seed 001),
diagnose.yml names it from the engine's own metrics, the gate passes, status finds every rank running the spec the
deploy rendered, and a retention interval that is not a multiple of the block is refused before any host changes.
Then the faults: a worker killed after ready (status.yml names it) and one killed mid-start (found in seconds,
every rank stopped).

Runs after test_service.py and before test_service_single.py: it replaces the pair on nodes 0 and 1 (the staged
start stops stale ranks) and leaves nothing running on any node."""

import datetime
import json
import re
import shutil
import sys
import time
import uuid

import pytest

from tests.testbed import service_faults as sf
from tests.testbed import standins
from tests.testbed.helpers import ROOT, assert_never_ran, node_exec, playbook, run

# Scale: in the extended suite (make test-extended), not in make test (docs/tests.md says why).
pytestmark = [pytest.mark.testbed, pytest.mark.extended]
QUAD, NODES, MODEL = "inventories/testbed-quad", 4, "tiny-qwen3-next"
RECORDS = ROOT / ".testbed" / sf.INSTANCE / "spark-serve" / "records"
MANIFESTS = "/var/lib/spark-serve/huggingface/spark-serve-manifests"
RAIL, RAIL_NETDEV = "roceP2p1s0f1", "enP2p1s0f1np1"  # the second RoCE function of a Spark's CX-7 port


def rail_dir(index):
    """Node `index`'s stand-in sysfs directory of the second rail (testbed.py mounts .testbed/<I>/node-<n>/sys)."""
    return ROOT / ".testbed" / sf.INSTANCE / f"node-{index}" / "sys" / "class" / "infiniband" / RAIL


def rail_address(index):
    """Node `index`'s address on the second rail, as inventories/testbed-quad gives it (its own subnet)."""
    return f"10.253.{16 * int(sf.INSTANCE) + 6}.{10 + index}"


def add_second_rails():
    """The second rail of every quad node, as a Spark has it: its own netdev on the same cable (a macvlan on the
    fabric's netdev, left for roce_network to set up), ACTIVE, the RoCE v2 GID of its address at index 3 like the
    first."""
    for index in range(NODES):
        rc, out = node_exec(
            index,
            f"ip link show dev {RAIL_NETDEV} >/dev/null 2>&1 || "
            f"ip link add link {sf.FAST_NETDEV} name {RAIL_NETDEV} type macvlan mode bridge",
        )
        assert rc == 0, out
        standins.rdma_sysfs_tree(rail_dir(index).parents[2], RAIL_NETDEV, gid_address=rail_address(index), device=RAIL)


def memory_mib(index):
    """The resident memory of node `index`'s engine container (cgroup usage as `docker stats` reports it), in MiB."""
    rc, out = node_exec(index, f"docker stats --no-stream --format '{{{{.MemUsage}}}}' spark-serve-rank{index}")
    assert rc == 0, out
    value, unit = re.match(r"\s*([\d.]+)\s*([KMG]i?B)", out).groups()
    return float(value) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[unit]


def host_available_mib():
    with open("/proc/meminfo") as meminfo:
        fields = dict(line.split(":", 1) for line in meminfo)
    return int(fields["MemAvailable"].split()[0]) // 1024


def fresh_cluster():
    """The quad's model gone from every node, so site.yml downloads it once and copies it to three nodes (nodes 2
    and 3 are bare on a new machine; on later runs they keep their images, which the pull then only checks). The
    head forgets the copy's host keys too, so it learns three at once (a race that once lost one of them)."""
    cache = "/var/lib/spark-serve/huggingface"
    node_exec(0, "rm -f /root/.ssh/spark_serve_hf_model_known_hosts")
    for index in range(NODES):
        node_exec(index, f"rm -rf {cache}/hub/models--spark-serve--{MODEL} {MANIFESTS}/models--spark-serve--{MODEL}@*")


def hub_requests():
    path = ROOT / ".testbed" / sf.INSTANCE / "services" / "hub-state" / "requests.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="module")
def quad(testbed):
    rc, out = run([sys.executable, str(ROOT / "tests/testbed/testbed.py"), "up", "--nodes", str(NODES)], timeout=1800)
    assert rc == 0, out[-3000:]
    fresh_cluster()
    rc, out = run([sys.executable, str(ROOT / "tests/testbed/engine_image.py"), "push"], timeout=3600)
    assert rc == 0, out[-3000:]
    rc, out = playbook("molecule/shared/dgx_os.yml", QUAD)
    assert rc == 0, out[-3000:]
    add_second_rails()
    hub_seen, started_at, started = len(hub_requests()), datetime.datetime.now(), time.monotonic()
    rc, out = playbook("site.yml", QUAD, timeout=3600)
    print(f"\n[site.yml testbed-quad] {time.monotonic() - started:.0f} s")
    assert rc == 0, out[-8000:]
    found = [json.loads(path.read_text()) for path in sorted(RECORDS.glob("*.json"))]
    records = [r for r in found if r.get("inventory") == "testbed-quad"]
    assert records, "no record of the quad"
    yield {"out": out, "record": records[-1], "hub": hub_requests()[hub_seen:], "started_at": started_at}
    for index in range(NODES):  # the next module starts from nodes without a quad rank or a second rail
        node_exec(index, f"docker rm -f spark-serve-rank{index} >/dev/null 2>&1; ip link del {RAIL_NETDEV}; true")
        shutil.rmtree(rail_dir(index), ignore_errors=True)


def test_four_ranks_serve_tp4_each_with_its_rank_flags(quad):
    assert "ready: /health 200 and all 4 rank(s) running" in quad["out"]
    for index in range(NODES):
        rc, cmd = node_exec(index, f"docker inspect -f '{{{{json .Config.Cmd}}}}' spark-serve-rank{index}")
        assert rc == 0, cmd
        argv = json.loads(cmd)
        flags = {flag: argv[argv.index(flag) + 1] for flag in ("--tensor-parallel-size", "--nnodes", "--node-rank")}
        assert flags == {"--tensor-parallel-size": "4", "--nnodes": "4", "--node-rank": str(index)}, argv
        assert argv[argv.index("--master-addr") + 1] == f"10.253.{16 * int(sf.INSTANCE) + 1}.10", argv
        assert ("--headless" in argv) == (index > 0), argv
    body = sf.chat("hello four Sparks", max_tokens=8) | {"model": MODEL}
    with sf.post("/v1/chat/completions", body) as response:
        answer = json.load(response)
    assert answer["usage"]["completion_tokens"] > 0, answer


def test_every_rail_of_every_pair_is_measured_beside_its_floor(quad):
    """Both rails set up from the inventory's addresses: each rail of each of the six pairs measured on its own
    addresses, the floor, the queue pairs and the seconds printed beside the rate."""
    fabric = f"10.253.{16 * int(sf.INSTANCE) + 1}"
    for client, server in ((a, b) for a in range(NODES) for b in range(a + 1, NODES)):
        for rail, address in (("rocep1s0f1", f"{fabric}.{10 + server}"), (RAIL, rail_address(server))):
            path = rf"node-{client} -> node-{server} rail {rail} \({re.escape(address)}\)"
            assert re.search(path + r": [0-9.]+ Gb/s \(floor 1, 4 QPs, 1 s\)", quad["out"]), (path, quad["out"][-4000:])


def ask(prompt):
    body = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": prompt}]}
    with sf.post("/v1/chat/completions", body) as response:
        usage = json.load(response)["usage"]
    return usage["prompt_tokens"], (usage.get("prompt_tokens_details") or {}).get("cached_tokens")


def words(count):
    """A prompt of `count` words that nothing before shares (the nonce comes first)."""
    return uuid.uuid4().hex + " " + " ".join(f"item{index % 97}" for index in range(count))


def test_the_logged_block_equals_the_prediction_and_the_gate_passes(quad):
    record = quad["record"]
    readback = record["acceptance"]["readback"]
    print(f"\n[hybrid block, TP4] predicted {record['effective_block']}, logged {readback['attention_block']}")
    assert record["status"] == "passed", record.get("reason")
    assert record["effective_block"] == readback["attention_block"] == 384, readback
    assert readback["kv_cache_tokens"] > 0 and readback["max_concurrency"] > 0
    assert record["acceptance"]["failures"] == []


def test_a_prompt_shorter_than_one_block_never_hits_while_two_blocks_do(quad):
    block = quad["record"]["effective_block"]
    short, long = words(60), words(250)  # about 5 tokens a word: 2-3 blocks, within 4096
    short_runs = [ask(short) for _ in range(3)]
    long_runs = [ask(long) for _ in range(3)]
    print(f"\n[hybrid cache, block {block}] short (prompt, cached): {short_runs}; long: {long_runs}")
    assert all(prompt < block for prompt, _ in short_runs), short_runs
    assert [cached for _, cached in short_runs] == [0, 0, 0], short_runs
    assert all(prompt >= 2 * block for prompt, _ in long_runs), long_runs
    assert long_runs[0][1] == 0, "the first sighting of a new prompt cannot hit"
    for _, cached in long_runs[1:]:
        assert cached >= block and cached % block == 0, long_runs


def test_diagnose_names_the_block_from_the_engine_metrics(quad):
    rc, out = playbook("playbooks/diagnose.yml", QUAD, "-e", "spark_serve_diagnose_words=60")
    assert rc == 0, out[-4000:]
    verdicts = re.findall(r"VERDICT ([\w-]+)", out)
    print(f"\n[diagnose, hybrid, 60 words] {verdicts}")
    assert verdicts[0] == "block-larger-than-request", out[-3000:]
    assert "effective cache block 384 tokens (engine /metrics cache_config_info) > the whole request" in out


def test_a_retention_that_is_not_a_multiple_of_the_block_is_refused_before_any_host_changes(quad):
    before = [sf.container_identity(i) for i in range(NODES)]
    overrides = {"spark_serve_profile_overrides": {"engine": {"prefix_cache_retention_interval": 1000}}}
    rc, out = playbook("site.yml", QUAD, "-e", json.dumps(overrides))
    assert rc != 0, out[-3000:]
    assert "engine.prefix_cache_retention_interval=1000: must be a multiple of the scheduler block" in out
    assert "compute as 384 tokens" in out and "nearest valid values: 768, 1152" in out, out[-3000:]
    # validate renders every rank as a play of the nodes without reaching them: no change, and no later play began.
    assert all(sf.recap(out)[f"node-{i}"]["changed"] == 0 for i in range(NODES)), sf.recap(out)
    first_node_play = "Check every node before changing any"  # playbooks/prepare.yml's first play
    assert f"- name: {first_node_play}" in (ROOT / "playbooks/prepare.yml").read_text()
    assert f"PLAY [{first_node_play}]" not in out, out[-3000:]
    assert [sf.container_identity(i) for i in range(NODES)] == before


def test_status_finds_every_rank_running_the_spec_the_deploy_rendered(quad):
    rc, out = playbook("playbooks/status.yml", QUAD)
    assert rc == 0, out[-3000:]
    compared = re.search(r"every rank runs the spec the deploy rendered \(([^)]*)\)", out)
    assert compared and "all 4 rank(s) alive" in out, out[-3000:]
    print(f"\n[hybrid spec vs docker inspect] equal on every rank: {compared.group(1)}")
    for field in ("command", "env", "mounts", "restart", "image"):
        assert field in compared.group(1), compared.group(1)


def test_what_validate_shows_is_what_runs_on_every_rank(quad):
    ranks = sf.validated_vs_running(QUAD, "testbed-quad", NODES)
    print(f"\n[validate spec vs docker inspect, quad] {ranks}")
    assert [r["differences"] for r in ranks] == [[]] * NODES, ranks
    assert all(len(r["marked"]) == 2 for r in ranks), ranks


def test_one_download_then_every_copy_at_once_over_the_fabric(quad):
    """The head alone fetched from the hub; the three other nodes got their copies from it over the fabric in
    parallel (their rsync intervals, all on the head's clock, overlap), not one after the other."""
    clients = {entry["client"] for entry in quad["hub"] if entry.get("file")}
    assert clients <= {f"10.253.{16 * int(sf.INSTANCE)}.10"}, clients
    copies = {}
    for index in range(1, NODES):
        rc, out = node_exec(index, f"cat {MANIFESTS}/models--spark-serve--{MODEL}@*.json")
        assert rc == 0, out
        copies[index] = json.loads(out)["copy"]
    fresh = {index: copy for index, copy in copies.items() if stamp(copy["started"]) >= quad["started_at"]}
    spans = {
        index: (stamp(c["started"]) - quad["started_at"], stamp(c["ended"]) - quad["started_at"])
        for index, c in fresh.items()
    }
    wall = (max(end for _, end in spans.values()) - min(start for start, _ in spans.values())).total_seconds()
    total = sum(copy["bytes"] for copy in fresh.values())
    fastest = max(
        fresh[index]["bytes"] / 2**20 / (end - start).total_seconds() for index, (start, end) in spans.items()
    )
    print(
        f"\n[quad fan-out] {len(fresh)} copies of {total // len(fresh) / 2**20:.0f} MiB from node-0: "
        + ", ".join(f"node-{i} {a.total_seconds():.2f}-{b.total_seconds():.2f} s" for i, (a, b) in spans.items())
        + f"; {total / 2**20 / wall:.0f} MiB/s together, the fastest stream {fastest:.0f} MiB/s"
    )
    assert fresh.keys() == {1, 2, 3}, copies
    assert all(copy["source"] == "node-0" for copy in fresh.values()), fresh
    assert max(start for start, _ in spans.values()) < min(end for _, end in spans.values()), spans


def stamp(text):
    return datetime.datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f")


def test_four_cpu_ranks_fit_this_machine(quad):
    """The memory of the 4 CPU ranks (printed), held to what leaves the test tiers room on a 24 GiB machine."""
    ranks = [memory_mib(index) for index in range(NODES)]
    available = host_available_mib()
    print(
        f"\n[quad memory] ranks {[round(m) for m in ranks]} MiB, total {sum(ranks):.0f} MiB; host available "
        f"{available} MiB"
    )
    assert sum(ranks) < 12 * 1024, ranks
    assert available > 4 * 1024, available


def test_a_missing_rail_a_rail_without_its_gid_and_a_wrong_mtu_are_refused_before_anything_starts(quad):
    """Three nodes wrong at once, all named in one run, and the serving quad left exactly as it was."""
    before = [sf.container_identity(index) for index in range(NODES)]
    missing = rail_dir(3).with_name(f".{RAIL}")
    rail_dir(3).rename(missing)
    gid = rail_dir(1) / "ports" / "1" / "gids" / "3"
    gid.write_text("0000:0000:0000:0000:0000:0000:0000:0000\n")
    node_exec(2, f"ip link set dev {sf.FAST_NETDEV} mtu 1500")
    try:
        rc, out = sf.deploy(inventory=QUAD)
    finally:
        missing.rename(rail_dir(3))
        add_second_rails()
        # The kernel lowered the macvlan twin with its fabric netdev: both back to 9000, the fabric's first.
        node_exec(
            2, f"ip link set dev {sf.FAST_NETDEV} mtu {sf.FAST_MTU} && ip link set dev {RAIL_NETDEV} mtu {sf.FAST_MTU}"
        )
    assert rc != 0, out[-4000:]
    assert f"node-3: RDMA port {RAIL}/1 not found" in out, out[-4000:]
    assert f"node-1: rail {RAIL}/1 has no RoCE v2 GID at index 3" in out, out[-4000:]
    assert f"node-2: {sf.FAST_NETDEV} live MTU is 1500, expected 9000" in out, out[-4000:]
    assert re.search(r"node-0: DF ping at MTU 9000 .* to node-2 ", out), out[-4000:]
    assert_never_ran(out, "vllm_service", "Start every rank in stages")  # nothing starts after a failed fabric check
    assert [sf.container_identity(index) for index in range(NODES)] == before
    assert sf.health() == 200


def test_a_worker_killed_after_ready_is_named_by_status(quad):
    node_exec(2, "docker kill spark-serve-rank2")
    killed = time.monotonic()
    rc, out = playbook("playbooks/status.yml", QUAD)
    print(f"\n[quad dead worker after ready] status.yml answered {time.monotonic() - killed:.1f} s after the kill")
    assert rc != 0 and "node-2 (rank 2): exited" in out, out[-3000:]
    assert "site.yml --tags deploy" in out, out[-3000:]


def test_a_worker_killed_mid_start_is_found_in_seconds_and_every_rank_stops(quad):
    """A rank that dies mid-start (its container exits while the others wait at the rendezvous): found from its exit,
    blamed by name, the three others stopped. The only killed-mid-start test: the pair's would prove the same path
    with one peer fewer (tests/bench/start_faults_bench.py still times it on the pair)."""
    result = sf.kill_worker_during_start(worker=3, inventory=QUAD, nodes=NODES, model=MODEL)
    out = result["out"]
    assert result["seconds"] is not None, out[-4000:]
    print(
        f"\n[quad worker killed during start] detected {result['seconds']:.1f} s after the kill "
        f"(engine's own timeout {sf.GLOO_TIMEOUT_S} s)"
    )
    print(f"[quad worker killed during start] the run ended {result['ended_s']:.0f} s after the DETECTED line")
    assert result["rc"] != 0 and "rank 3 (node-3) failed first" in out, out[-4000:]
    assert "Nothing serves now: every rank was stopped" in out, out[-4000:]
    assert result["seconds"] < sf.GLOO_TIMEOUT_S / 30, out[-4000:]
    assert result["running"] == [], "a rank was left running"
    assert result["cache_intact"] and result["worker_logs"], result
