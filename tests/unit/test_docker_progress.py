"""An image pull's and build's progress read from the Docker Engine API's stream (module_utils/docker_progress.py):
layers summed, the total as it becomes known, the build's step, the progress file, and the script as the node runs
it (no traceback when the API refuses)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils import docker_progress
from ansible.module_utils.docker_progress import BuildMeter, ProgressFile, PullMeter, StreamError, follow

SCRIPT = Path(docker_progress.__file__)
DIGEST = "sha256:" + "d" * 64


def layer(layer_id, status, current=None, total=None, **extra):
    detail = {"current": current, "total": total} if total is not None else {}
    return {"status": status, "id": layer_id, "progressDetail": {**detail, **extra}}


START = [{"status": "Pulling from spark-serve/vllm-cpu", "id": DIGEST}]


@pytest.mark.parametrize(
    ("events", "report"),
    [
        ([], {"done": 0, "total": 0, "exact": False, "moved": 0, "note": "reading the manifest"}),
        # a layer waiting for its turn has not told its size: the total is a floor
        (
            [
                *START,
                layer("a", "Pulling fs layer"),
                layer("b", "Pulling fs layer"),
                layer("b", "Waiting"),
                layer("a", "Downloading", 1000, 4000),
            ],
            {"done": 1000, "total": 4000, "exact": False, "moved": 1000, "note": "0 of 2 layers"},
        ),
        # every layer told its size: exact; a downloaded layer counts whole
        (
            [
                *START,
                layer("a", "Downloading", 4000, 4000),
                layer("b", "Downloading", 500, 6000),
                layer("a", "Verifying Checksum"),
                layer("a", "Download complete"),
            ],
            {"done": 4500, "total": 10000, "exact": True, "moved": 4500, "note": "0 of 2 layers"},
        ),
        # a layer already on the node needs no byte, and counts as finished
        (
            [*START, layer("x", "Already exists"), layer("a", "Downloading", 10, 300)],
            {"done": 10, "total": 300, "exact": True, "moved": 11, "note": "1 of 2 layers, 1 already here"},
        ),
        # extraction moves no download byte but is progress (moved), and finishes the layer
        (
            [
                *START,
                layer("a", "Downloading", 300, 300),
                layer("a", "Download complete"),
                layer("a", "Extracting", 100, 300),
            ],
            {"done": 300, "total": 300, "exact": True, "moved": 400, "note": "0 of 1 layers"},
        ),
        (
            [
                *START,
                layer("a", "Downloading", 300, 300),
                layer("a", "Extracting", 300, 300),
                layer("a", "Pull complete"),
                {"status": f"Digest: {DIGEST}"},
                {"status": "Status: Downloaded newer"},
            ],
            {"done": 300, "total": 300, "exact": True, "moved": 601, "note": "1 of 1 layers"},
        ),
        # a tiny layer that went straight to "Download complete" told no size: 0, not unknown
        (
            [*START, layer("t", "Pulling fs layer"), layer("t", "Download complete")],
            {"done": 0, "total": 0, "exact": True, "moved": 0, "note": "0 of 1 layers"},
        ),
        # containerd's extraction in seconds is no byte count, but progress; a current above the total is capped
        (
            [*START, layer("a", "Downloading", 900, 800), layer("a", "Extracting", 3, 10, units="s")],
            {"done": 800, "total": 800, "exact": True, "moved": 803, "note": "0 of 1 layers"},
        ),
        # only the whole pull's final answer: every layer was here
        (
            [*START, layer("x", "Already exists"), layer("y", "Already exists")],
            {"done": 0, "total": 0, "exact": True, "moved": 2, "note": "2 of 2 layers, 2 already here"},
        ),
    ],
)
def test_a_pulls_layers_are_summed(events, report):
    meter = PullMeter()
    for event in events:
        meter.feed(event)
    assert meter.report() == report


@pytest.mark.parametrize(
    "event",
    [
        {"error": "manifest unknown", "errorDetail": {"message": "manifest unknown"}},
        {"errorDetail": {"message": "manifest unknown"}},
    ],
)
def test_the_apis_error_event_fails_the_pull_with_its_words(event):
    with pytest.raises(StreamError, match="manifest unknown"):
        PullMeter().feed(event)


@pytest.mark.parametrize(
    ("events", "report", "image_id"),
    [
        ([], {"moved": 0, "note": "sending the build context"}, None),
        (
            [
                {"stream": "Step 1/3 : ARG BASE_IMAGE"},
                {"stream": "\n"},
                {"stream": "Step 2/3 : FROM ${BASE_IMAGE}"},
                {"stream": "\n ---> 0123abcd\n"},
            ],
            {"moved": 3, "note": "Step 2/3 : FROM ${BASE_IMAGE}"},
            None,
        ),
        # a long RUN is cut for the line; the aux event names the image
        (
            [
                {"stream": "Step 3/3 : RUN " + "x" * 100 + "\n"},
                {"aux": {"ID": "sha256:" + "e" * 64}},
                {"stream": "Successfully built eeeeeeeeeeee\n"},
            ],
            {"moved": 3, "note": "Step 3/3 : RUN " + "x" * 54 + "..."},
            "sha256:" + "e" * 64,
        ),
    ],
)
def test_a_builds_step_and_output(events, report, image_id):
    meter = BuildMeter()
    for event in events:
        meter.feed(event)
    assert (meter.report(), meter.image_id) == (report, image_id)
    assert len(meter.report()["note"]) <= docker_progress.NOTE_CHARS


def test_a_failed_build_step_fails_with_the_apis_words():
    error = "The command '/bin/sh -c python3 apply_series.py' returned a non-zero code: 1"
    with pytest.raises(StreamError, match="returned a non-zero code: 1"):
        BuildMeter().feed({"errorDetail": {"code": 1, "message": error}, "error": error})


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_progress_file_is_replaced_whole_at_most_every_second(tmp_path):
    path, clock = str(tmp_path / "progress.json"), Clock()
    progress = ProgressFile(path, clock)
    progress.write({"moved": 1})
    progress.write({"moved": 2})  # within the second: not written
    assert json.loads(Path(path).read_text()) == {"moved": 1}
    clock.now = 1.0
    progress.write({"moved": 3})
    assert json.loads(Path(path).read_text()) == {"moved": 3}
    progress.write({"moved": 4}, force=True)
    assert json.loads(Path(path).read_text()) == {"moved": 4}
    assert os.listdir(tmp_path) == ["progress.json"], "the temporary file outlived the write"


class FakeClient:
    """The part of docker.APIClient the script uses: a pull's and a build's decoded stream."""

    def __init__(self, events, images=()):
        self.events, self.calls, self.listed = events, [], list(images)

    def pull(self, ref, stream, decode):
        self.calls.append(("pull", ref, stream, decode))
        return iter(self.events)

    def build(self, **kwargs):
        self.calls.append(("build", kwargs))
        return iter(self.events)

    def images(self, name, quiet):
        return self.listed


def test_a_pull_writes_its_last_report_and_says_what_it_pulled(tmp_path, capsys):
    client = FakeClient([*START, layer("a", "Downloading", 300, 300), layer("a", "Pull complete")])
    docker_progress.pull(client, f"reg/vllm@{DIGEST}", ProgressFile(str(tmp_path / "p.json")))
    assert client.calls == [("pull", f"reg/vllm@{DIGEST}", True, True)]
    report = json.loads((tmp_path / "p.json").read_text())
    assert (report["done"], report["total"], report["note"]) == (300, 300, "1 of 1 layers")
    assert capsys.readouterr().out == f"pulled reg/vllm@{DIGEST}\n"


def test_a_build_passes_what_the_docker_image_task_passed(tmp_path, capsys):
    spec = {
        "path": "/ctx",
        "tag": "spark-serve/testbed:abc",
        "buildargs": {"BASE_IMAGE": "b@" + DIGEST},
        "labels": {"org.spark-serve.image": "testbed"},
    }
    client = FakeClient([{"stream": "Step 1/1 : FROM b\n"}, {"aux": {"ID": "sha256:" + "f" * 64}}])
    docker_progress.build(client, spec, ProgressFile(str(tmp_path / "p.json")))
    assert client.calls == [
        ("build", {**spec, "pull": False, "rm": True, "decode": True}),
    ]
    assert json.loads((tmp_path / "p.json").read_text()) == {"moved": 2, "note": "Step 1/1 : FROM b"}
    assert capsys.readouterr().out == f"built spark-serve/testbed:abc sha256:{'f' * 64}\n"


def test_a_build_that_leaves_no_image_fails(tmp_path):
    client = FakeClient([{"stream": "Step 1/1 : FROM b\n"}], images=[])
    with pytest.raises(StreamError, match="ended without an image spark-serve/testbed:abc"):
        docker_progress.build(
            client, {"path": "/ctx", "tag": "spark-serve/testbed:abc"}, ProgressFile(str(tmp_path / "p"))
        )


def test_follow_writes_a_report_before_the_first_event(tmp_path):
    path = tmp_path / "p.json"

    def events():
        assert json.loads(path.read_text())["note"] == "reading the manifest"
        yield layer("a", "Already exists")

    follow(events(), PullMeter(), ProgressFile(str(path)))
    assert json.loads(path.read_text())["note"] == "1 of 1 layers, 1 already here"


@pytest.mark.parametrize(
    ("argv", "code", "said"),
    [
        (["pull"], 2, "usage: docker_progress.py pull|build"),
        (["push", "x", "p"], 2, "usage: docker_progress.py pull|build"),
        # no daemon at that socket: the API client's own words on one line, no traceback
        (["pull", f"reg/vllm@{DIGEST}", "{tmp}/p.json", "5"], 1, "DockerException: Error while fetching server API"),
        (["build", "not json", "{tmp}/p.json"], 1, "JSONDecodeError"),
    ],
)
def test_the_script_as_the_node_runs_it(tmp_path, argv, code, said):
    """Fed on stdin to python3, as roles/engine_image sends it (the docker SDK of this venv as the node's)."""
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    args = [arg.format(tmp=tmp_path) for arg in argv]
    proc = subprocess.run(
        [sys.executable, "-", *args], input=SCRIPT.read_text(), capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == code, proc.stderr
    assert said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
