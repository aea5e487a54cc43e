"""An image pull's and build's progress read from the Docker Engine API's stream (module_utils/docker_progress.py):
layers summed, the total as it becomes known, the build's step, the progress file, and the script as the node runs
it (no traceback when the API refuses)."""

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from ansible.module_utils import docker_progress
from ansible.module_utils.docker_progress import BuildMeter, ProgressFile, PullMeter, SeriesFailed, StreamError, follow

from tests.profiles import ROOT

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


RUN_FAILED = "The command '/bin/sh -c python3 /opt/spark-serve/image/apply_series.py' returned a non-zero code: 1"
ERROR = {"errorDetail": {"code": 1, "message": RUN_FAILED}, "error": RUN_FAILED}
UNTOUCHED = "No image was tagged and no rank was stopped: a deployment that serves keeps serving its current image."
HUNK_FAILED = {
    "series": "patches.local",
    "patch": "0001-my-fix.patch",
    "file": "vllm/platforms/cpu.py",
    "hunk": 2,
    "line": 143,
    "reason": "does not match: the base's code differs",
}


def marked(failure):
    """apply_series.py's line for `failure`, as the build's stream carries a RUN's output."""
    return {"stream": docker_progress.SERIES_FAILED + json.dumps(failure) + "\n"}


@pytest.mark.parametrize(
    ("output", "message"),
    [
        # a local patch written for another vLLM: the series, patch, file and hunk, and where to fix it
        (
            [marked(HUNK_FAILED)],
            "patch 0001-my-fix.patch of the series patches.local does not apply to the base's vLLM: "
            "vllm/platforms/cpu.py: hunk 2 (@@ -143) does not match: the base's code differs. To go on, fix the patch "
            "against this base or drop it from /ctl/images/gb10/patches.local/series, update "
            "/ctl/images/gb10/patches.local/SHA256SUMS (`sha256sum *.patch > SHA256SUMS` there) and rerun. "
            + UNTOUCHED,
        ),
        # the project's own series on a base it was not written for: the pinned base is the first suspect
        (
            [{"stream": "applied patches/0001-a.patch: vllm/a.py\n"}, marked({**HUNK_FAILED, "series": "patches"})],
            "patch 0001-my-fix.patch of the series patches does not apply to the base's vLLM: vllm/platforms/cpu.py: "
            "hunk 2 (@@ -143) does not match: the base's code differs. To go on, pin the base the image folder's "
            "README.md names, or fix the patch against this base or drop it from /ctl/images/gb10/patches/series, "
            "update /ctl/images/gb10/patches/SHA256SUMS (`sha256sum *.patch > SHA256SUMS` there) and rerun. "
            + UNTOUCHED,
        ),
        # a file the base does not have: no hunk to name
        (
            [
                marked(
                    {
                        "series": "patches.local",
                        "patch": "0002-new.patch",
                        "file": "vllm/gone.py",
                        "reason": "no such file under /usr/lib/python3/dist-packages",
                    }
                )
            ],
            "patch 0002-new.patch of the series patches.local does not apply to the base's vLLM: vllm/gone.py: no "
            "such file under /usr/lib/python3/dist-packages. To go on, fix the patch against this base or drop it "
            "from /ctl/images/gb10/patches.local/series, update /ctl/images/gb10/patches.local/SHA256SUMS "
            "(`sha256sum *.patch > SHA256SUMS` there) and rerun. " + UNTOUCHED,
        ),
        # no patch reached: the base's Python has no vLLM
        (
            [marked({"reason": "no vllm package in this image's Python"})],
            "the image's series could not be applied: no vllm package in this image's Python. " + UNTOUCHED,
        ),
    ],
)
def test_a_series_that_does_not_apply_fails_the_build_naming_patch_file_and_hunk(output, message):
    meter = BuildMeter("/ctl/images/gb10")
    for event in [{"stream": "Step 3/3 : RUN python3 /opt/spark-serve/image/apply_series.py\n"}, *output]:
        meter.feed(event)
    with pytest.raises(SeriesFailed) as failed:
        meter.feed(ERROR)
    assert str(failed.value) == message


@pytest.mark.parametrize(
    "output",
    [
        [],  # another RUN failed
        [{"stream": docker_progress.SERIES_FAILED + "{not json\n"}],
        [{"stream": docker_progress.SERIES_FAILED + '{"patch": "0001-x.patch"}\n'}],  # no reason: not the applier's
        [{"stream": "echo " + docker_progress.SERIES_FAILED + json.dumps(HUNK_FAILED) + "\n"}],  # not at a line's start
    ],
)
def test_without_the_appliers_line_a_failed_build_keeps_the_apis_words(output):
    meter = BuildMeter("/ctl/images/gb10")
    for event in output:
        meter.feed(event)
    with pytest.raises(StreamError, match="returned a non-zero code: 1") as failed:
        meter.feed(ERROR)
    assert not isinstance(failed.value, SeriesFailed)


def test_the_appliers_own_failure_becomes_the_builds_message(tmp_path):
    """images/apply_series.py run on a tree whose code moved, its output fed as a build's stream: the message names
    what the applier named (the two ends of the marked line held together)."""
    series = tmp_path / "context" / "patches.local"
    series.mkdir(parents=True)
    patch = "--- a/vllm/mod.py\n+++ b/vllm/mod.py\n@@ -2,2 +2,2 @@\n a = 1\n-b = 2\n+b = 3\n"
    (series / "0001-b.patch").write_text(patch)
    (series / "series").write_text("0001-b.patch\n")
    (series / "SHA256SUMS").write_text(subprocess.check_output(["sha256sum", "0001-b.patch"], cwd=series, text=True))
    (tmp_path / "site" / "vllm").mkdir(parents=True)
    (tmp_path / "site" / "vllm" / "mod.py").write_text("a = 1\nb = 20\n")
    applier = [sys.executable, str(ROOT / "images" / "apply_series.py"), str(series.parent)]
    proc = subprocess.run([*applier, "--root", str(tmp_path / "site")], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1, proc.stderr
    meter = BuildMeter("/ctl/images/demo")
    for line in (proc.stdout + proc.stderr).splitlines(keepends=True):
        meter.feed({"stream": line})
    with pytest.raises(
        SeriesFailed, match=r"^patch 0001-b\.patch of the series patches\.local does not apply"
    ) as failed:
        meter.feed(ERROR)
    assert "vllm/mod.py: hunk 1 (@@ -2) does not match: the base's code differs." in str(failed.value)


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


def test_the_script_gives_a_series_failure_as_the_tasks_whole_message(tmp_path, monkeypatch, capsys):
    """main() with the docker SDK faked: the one stderr line is marked for spark_transfer, which shows it alone."""
    client = FakeClient([marked(HUNK_FAILED), ERROR])
    sdk = types.SimpleNamespace(APIClient=lambda **_: client, utils=types.SimpleNamespace(kwargs_from_env=dict))
    monkeypatch.setitem(sys.modules, "docker", sdk)
    spec = {"path": "/ctx", "tag": "spark-serve/gb10:abc", "folder": "/ctl/images/gb10"}
    assert docker_progress.main(["build", json.dumps(spec), str(tmp_path / "p.json")]) == 1
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and said[0].startswith(docker_progress.OWN_FAILURE + "patch 0001-my-fix.patch "), said
    assert "folder" not in client.calls[0][1], "the folder is for the message, not the Engine API"


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
