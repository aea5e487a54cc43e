"""A rank's spec, mounts, configuration hash and rank file (module_utils/rank_spec.py) and its module
vllm_rank_spec: the hash is the one Ansible's own filters computed before (running containers carry it as a label)."""

import dataclasses
import hashlib
import json

import pytest
from ansible.module_utils.rank_spec import RankInputs, config_hash, key_digest, render, tuned_tables
from ansible.modules import vllm_rank_spec
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template

from tests.module_harness import run_module

KEY_TEXT = "sk-engine-0123456789abcdef\n\n"
CACHE = "/var/lib/spark-serve/vllm-cache/84e8fdf1c40d26f0"
OVERLAYS = [
    {"name": "0-interface.py", "dest": "/vllm/platforms/interface.py", "sha256": "8" * 64, "src": "overlays/a.py"},
    {"name": "1-interface.py", "dest": "/vllm/other/interface.py", "sha256": "4" * 64, "src": "overlays/b.py"},
]
# As ansible.builtin.find returns them (more keys than these), in the order it walked the folder.
FOUND = [
    {"path": "/srv/project/tuned_configs/e=8,N=64,device_name=NVIDIA_GB10.json", "checksum": "b" * 40, "mode": "0644"},
    {"path": "/srv/project/tuned_configs/E=512,N=320,device_name=NVIDIA_GB10.json", "checksum": "a" * 40},
]
TUNED = "/opt/spark-serve/tuned_configs"
# The hash expression tasks/render.yml held before module_utils/rank_spec.py, verbatim: what every running
# container's label was computed with.
ANSIBLE_HASH = """{{ vllm_service_spec | combine({'container': vllm_service_spec.container | dict2items
                                      | rejectattr('key', 'equalto', 'restart') | items2dict,
                                      'api_key': (lookup('ansible.builtin.file', vllm_service_engine_key)
                                                  | hash('sha256')) if vllm_service_spec.api_key | bool else ''})
         | to_json(sort_keys=true) | hash('sha256') }}"""


def rank(host, number, nodes, key_file="", **changes):
    """One rank of a GB10 profile as render.yml passes it; a pair's and a quad's ranks run with restart `no`."""
    argv = ["vllm", "serve", "nvidia/Qwen3.8-Flash-Next-NVFP4", "--tensor-parallel-size", str(nodes)]
    if nodes > 1:
        argv += ["--nnodes", str(nodes), "--node-rank", str(number)] + (["--headless"] if number else [])
    env = {
        "HF_HOME": "/var/lib/spark-serve/huggingface",
        "VLLM_CACHE_ROOT": CACHE,
        "VLLM_HOST_IP": f"192.168.100.{10 + number}",
        "VLLM_TUNED_CONFIG_FOLDER": TUNED,
    }
    inputs = RankInputs(
        host=host,
        rank=number,
        image="registry.local:5000/spark-serve/vllm-gb10@sha256:" + "0" * 64,
        argv=argv,
        env=env,
        effective_block=832,
        scheduler_block=None,
        container_defaults={"ipc": "host", "shm_size": "1gb", "gpus": True, "log_max_files": 5},
        container={"mem_limit": "112g", "shm_size": "2gb"},
        container_overrides={},
        restart="unless-stopped" if nodes == 1 else "no",
        engine_key_file=key_file,
        hf_cache_dir="/var/lib/spark-serve/huggingface",
        engine_cache_dir=CACHE,
        overlays=OVERLAYS,
        tuned_files=FOUND,
        tuned_folder=TUNED,
        service_dir="/etc/spark-serve",
    )
    return dataclasses.replace(inputs, **changes)


@pytest.fixture(scope="module")
def key_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("controller") / "engine-key"
    path.write_text(KEY_TEXT)
    return str(path)


@pytest.fixture(scope="module")
def ansible_hash(key_file):
    """The configuration hash as Ansible's own templating computed it (to_json, hash, the file lookup)."""
    init_plugin_loader()  # the file lookup is found through Ansible's plugin loader, as in a playbook

    def compute(spec):
        variables = {"vllm_service_spec": spec, "vllm_service_engine_key": key_file}
        return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(ANSIBLE_HASH))

    return compute


# (case, host, rank, nodes, reads the key, restart)
RANKS = [
    ("pair head", "spark-a", 0, 2, True, "no"),
    ("pair worker", "spark-b", 1, 2, False, "no"),
    ("single node", "spark-a", 0, 1, True, "unless-stopped"),
    ("quad rank 2", "spark-c", 2, 4, False, "no"),
]


@pytest.mark.parametrize(("case", "host", "number", "nodes", "reads_key", "restart"), RANKS, ids=[r[0] for r in RANKS])
def test_each_rank_is_described_whole(key_file, case, host, number, nodes, reads_key, restart):
    inputs = rank(host, number, nodes, key_file)
    described = render(inputs, key_digest(KEY_TEXT) if inputs.api_key else "")
    spec = described["spec"]
    assert inputs.api_key is reads_key and spec["api_key"] is reads_key, case
    assert spec["container"] == {
        "ipc": "host",
        "shm_size": "2gb",  # the profile's over the role's default, key by key
        "gpus": True,
        "log_max_files": 5,
        "mem_limit": "112g",
        "restart": restart,
    }
    assert [table["name"] for table in described["tuned_tables"]] == [
        "E=512,N=320,device_name=NVIDIA_GB10.json",
        "e=8,N=64,device_name=NVIDIA_GB10.json",
    ], "ordered by name ignoring case, as Jinja's sort did"
    assert spec["tuned_tables"] == [{"name": t["name"], "checksum": t["checksum"]} for t in described["tuned_tables"]]
    assert described["mounts"] == [
        {"src": "/var/lib/spark-serve/huggingface", "dest": "/var/lib/spark-serve/huggingface", "ro": True},
        {"src": CACHE, "dest": CACHE, "ro": False},
        {"src": "/etc/spark-serve/overlays/0-interface.py", "dest": "/vllm/platforms/interface.py", "ro": True},
        {"src": "/etc/spark-serve/overlays/1-interface.py", "dest": "/vllm/other/interface.py", "ro": True},
        {"src": "/etc/spark-serve/tuned_configs", "dest": TUNED, "ro": True},
    ]
    rank_file = described["rank_file"]
    assert "api_key" not in rank_file
    assert rank_file == {
        **{key: value for key, value in spec.items() if key != "api_key"},
        "host": host,
        "rank": number,
        "mounts": described["mounts"],
        "env_file": ["secrets.env"] if reads_key else [],
        "effective_block": 832,
        "scheduler_block": None,
        "config_hash": described["config_hash"],
    }


@pytest.mark.parametrize(("case", "host", "number", "nodes", "reads_key", "restart"), RANKS, ids=[r[0] for r in RANKS])
def test_the_hash_is_the_one_ansibles_filters_computed(
    key_file, ansible_hash, case, host, number, nodes, reads_key, restart
):
    inputs = rank(host, number, nodes, key_file)
    described = render(inputs, key_digest(KEY_TEXT) if reads_key else "")
    assert described["config_hash"] == ansible_hash(described["spec"]), case


@pytest.mark.parametrize(
    "changes",
    [
        {"overlays": [], "tuned_files": []},
        {"env": {"VLLM_CACHE_ROOT": CACHE, "NOTE": 'é ü \u2028 \U0001f600 "quoted" \\ </tag>'}},
        {"container": {"cpus": 2.5, "shm_size": None, "devices": ["/dev/infiniband"], "nested": {"b": 1, "a": [True]}}},
        {"effective_block": None, "scheduler_block": 16, "restart": "always"},
    ],
    ids=["bare", "non-ascii env", "typed container options", "other blocks"],
)
def test_the_hash_matches_ansible_for_any_value_json_can_hold(key_file, ansible_hash, changes):
    inputs = rank("spark-a", 0, 2, key_file, **changes)
    described = render(inputs, key_digest(KEY_TEXT))
    assert described["config_hash"] == ansible_hash(described["spec"])


def test_the_hash_leaves_out_the_restart_policy_and_takes_the_keys_digest(key_file):
    inputs = rank("spark-a", 0, 2, key_file)
    digest = key_digest(KEY_TEXT)
    assert digest == hashlib.sha256(KEY_TEXT.rstrip().encode()).hexdigest(), "trailing whitespace is no part of a key"
    first = render(inputs, digest)
    assert render(dataclasses.replace(inputs, restart="always"), digest)["config_hash"] == first["config_hash"]
    assert render(inputs, key_digest("sk-other"))["config_hash"] != first["config_hash"]
    assert render(dataclasses.replace(inputs, tuned_files=FOUND[:1]), digest)["config_hash"] != first["config_hash"]
    spec = first["spec"]
    expected = dict(spec, container={k: v for k, v in spec["container"].items() if k != "restart"}, api_key=digest)
    assert config_hash(spec, digest) == hashlib.sha256(json.dumps(expected, sort_keys=True).encode()).hexdigest()


def test_without_tables_there_is_no_tuned_mount_and_no_tuned_tables_key():
    described = render(rank("spark-a", 0, 1, tuned_files=[], overlays=[]), "")
    assert "tuned_tables" not in described["spec"] and described["tuned_tables"] == []
    assert [mount["dest"] for mount in described["mounts"]] == ["/var/lib/spark-serve/huggingface", CACHE]


def test_hf_home_falls_back_to_huggingface_hubs_own_default():
    described = render(rank("spark-a", 0, 1, env={"VLLM_CACHE_ROOT": CACHE}), "")
    assert described["mounts"][0]["dest"] == "/root/.cache/huggingface"


def test_tuned_tables_keep_the_controller_path_for_the_copy():
    assert tuned_tables(FOUND[1:]) == [
        {"name": "E=512,N=320,device_name=NVIDIA_GB10.json", "path": FOUND[1]["path"], "checksum": "a" * 40}
    ]


def test_the_module_returns_the_hash_never_the_key_or_its_digest(key_file):
    inputs = rank("spark-a", 0, 2, key_file)
    result = run_module(vllm_rank_spec, dataclasses.asdict(inputs))
    assert not result["failed"] and result["changed"] is False, result
    assert result["config_hash"] == render(inputs, key_digest(KEY_TEXT))["config_hash"]
    assert result["spec"]["api_key"] is True and result["rank_file"]["env_file"] == ["secrets.env"]
    shown = json.dumps(result)
    assert key_digest(KEY_TEXT) not in shown and KEY_TEXT.strip() not in shown


def test_the_module_runs_whole_in_check_mode(key_file):
    inputs = rank("spark-a", 0, 1, key_file)
    result = run_module(vllm_rank_spec, dataclasses.asdict(inputs), check_mode=True)
    assert result["config_hash"] == render(inputs, key_digest(KEY_TEXT))["config_hash"], "a dry run shows the same hash"


def test_a_worker_never_reads_the_key_file(tmp_path):
    inputs = rank("spark-b", 1, 2, str(tmp_path / "absent"))
    result = run_module(vllm_rank_spec, dataclasses.asdict(inputs))
    assert not result["failed"] and result["config_hash"] == render(inputs, "")["config_hash"], result


@pytest.mark.parametrize(
    ("content", "reason"),
    [(None, "cannot be read (No such file or directory)"), (b"sk-\xff\xfe", "is not UTF-8 text")],
    ids=["missing", "not utf-8"],
)
def test_an_unreadable_key_fails_naming_the_file_never_its_bytes(tmp_path, content, reason):
    path = tmp_path / "engine-key"
    if content is not None:
        path.write_bytes(content)
    result = run_module(vllm_rank_spec, dataclasses.asdict(rank("spark-a", 0, 1, str(path))))
    assert result["failed"] and result["msg"] == f"{path}: the engine's key file {reason}", result
    assert "xff" not in result["msg"] and "sk-" not in json.dumps(result)
