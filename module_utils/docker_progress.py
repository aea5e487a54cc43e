"""Progress of an image pull or build, read from the Docker Engine API's own stream: the layers' bytes summed, or the
build's current step; written to a progress file that spark_transfer reads (its `progress_file` meter).

Pure Python (no Ansible): the unit tests import it as ansible.module_utils.docker_progress, and roles/engine_image
sends this very file to the node as a script (`python3 - pull|build ...`, the node's python3-docker SDK), so that
what the node counts is what the tests test.

A pull's stream gives, per layer, `progressDetail` {current, total} while it downloads and while it extracts; a
layer the node already holds says "Already exists" and needs no byte. Bytes done are the layers' downloaded bytes;
the total is the sum of the sizes known so far, marked as not exact until every layer has told its size (a layer
waiting for its turn has not). Extracted bytes are movement too: a big layer's extraction is not a stall.

A build whose series does not apply ends with the Engine API's "The command '/bin/sh -c python3 ...apply_series.py
...' returned a non-zero code: 1"; the applier's own marked line before it names the series, patch, file and hunk,
and the build's failure is then that, with what to do, as the whole message of the spark_transfer task.
"""

import json
import os
import sys
import time

# Layer statuses after which every byte of the layer is downloaded (the size may never have been told: a tiny
# layer can go from "Pulling fs layer" straight to "Download complete").
DOWNLOADED = ("Verifying Checksum", "Download complete", "Extracting", "Pull complete")
WRITE_EVERY_S = 1.0  # the progress file is rewritten at most this often (the controller looks every few seconds)
NOTE_CHARS = 72  # a build step shown in a progress line is cut to this length
SERIES_FAILED = "spark-serve-series-failed "  # images/apply_series.py's line (JSON) when a series does not apply
OWN_FAILURE = "spark-transfer-failed: "  # transfer_progress.OWN_FAILURE: this stderr line is the task's message


class StreamError(Exception):
    """The Engine API said the pull or build failed (its own message)."""


class SeriesFailed(StreamError):
    """The build failed because the image's series does not apply; the message says which patch and what to do."""


class Layer:
    def __init__(self):
        self.size = None  # bytes, once the stream tells it
        self.downloaded = 0
        self.extracted = 0
        self.other = 0  # progress in another unit (containerd's image store counts extraction in seconds)
        self.finished = False  # pulled, or already on the node
        self.present = False  # "Already exists": no byte to move


class PullMeter:
    """The layers of one pull, fed the decoded events of `APIClient.pull(..., stream=True, decode=True)`."""

    def __init__(self):
        self.layers = {}

    def feed(self, event):
        """Take one event; raises StreamError on the API's error event."""
        if not isinstance(event, dict):
            return
        if event.get("error") or event.get("errorDetail"):
            raise StreamError(str(event.get("error") or event["errorDetail"].get("message", event["errorDetail"])))
        status, layer_id = str(event.get("status", "")), event.get("id")
        if not layer_id or status.startswith(("Pulling from", "Digest:", "Status:")):  # the pull's own, no layer's
            return
        layer = self.layers.setdefault(layer_id, Layer())
        detail = event.get("progressDetail") or {}
        counted = isinstance(detail.get("total"), int) and detail.get("units") in (None, "", "B")
        if not counted and isinstance(detail.get("current"), int):
            layer.other = detail["current"]
        if status == "Already exists":
            layer.finished = layer.present = True
        elif status == "Downloading" and counted:
            layer.size, layer.downloaded = detail["total"], min(detail.get("current") or 0, detail["total"])
        elif status in DOWNLOADED:
            if status == "Extracting" and counted:
                layer.size = layer.size or detail["total"]
                layer.extracted = min(detail.get("current") or 0, detail["total"])
            layer.size = layer.size or 0  # done without a size told: too small to have shown one
            layer.downloaded = layer.size
            layer.finished = layer.finished or status == "Pull complete"
            layer.extracted = layer.size if layer.finished else layer.extracted

    def report(self):
        """What the progress file holds: bytes done and total (exact once every layer to pull told its size), the
        movement counter the stall verdict watches, and the layers in a note."""
        pulled = [layer for layer in self.layers.values() if not layer.present]
        sizes_known = all(layer.size is not None for layer in pulled)
        present = sum(layer.present for layer in self.layers.values())
        finished = sum(layer.finished for layer in self.layers.values())
        note = f"{finished} of {len(self.layers)} layers" if self.layers else "reading the manifest"
        note += f", {present} already here" if present else ""
        return {
            "done": sum(layer.downloaded for layer in pulled),
            "total": sum(layer.size or 0 for layer in pulled),
            "exact": bool(self.layers) and sizes_known,
            "moved": sum(layer.downloaded + layer.extracted + layer.other for layer in pulled) + finished,
            "note": note,
        }


class BuildMeter:
    """The classic builder's stream (`APIClient.build(..., decode=True)`): the current step, every output chunk
    counted as movement, the image id at the end."""

    def __init__(self, folder=""):
        self.step = "sending the build context"
        self.chunks = 0
        self.image_id = None
        self.folder = folder  # the image folder on the controller, where a failed patch is fixed
        self.series_failure = None  # what apply_series.py said when the series did not apply

    def feed(self, event):
        if not isinstance(event, dict):
            return
        if event.get("error") or event.get("errorDetail"):
            if self.series_failure is not None:  # the API only says the RUN exited 1; the applier said why
                raise SeriesFailed(series_message(self.series_failure, self.folder))
            raise StreamError(str(event.get("error") or event["errorDetail"].get("message", event["errorDetail"])))
        aux = event.get("aux")
        if isinstance(aux, dict) and aux.get("ID"):
            self.image_id = aux["ID"]
        text = str(event.get("stream") or event.get("status") or "")
        if not text.strip() and not aux:
            return
        self.chunks += 1
        for line in text.splitlines():
            if line.startswith("Step ") and " : " in line:
                self.step = line.strip()
            self.series_failure = series_failure(line) or self.series_failure

    def report(self):
        step = self.step if len(self.step) <= NOTE_CHARS else self.step[: NOTE_CHARS - 3] + "..."
        return {"moved": self.chunks, "note": step}


def series_failure(line):
    """apply_series.py's account of the patch that did not apply (series, patch, file, hunk, line, reason), or None
    for any other line of the build's output."""
    if not line.startswith(SERIES_FAILED):
        return None
    try:
        failure = json.loads(line[len(SERIES_FAILED) :])
    except ValueError:
        return None
    return failure if isinstance(failure, dict) and failure.get("reason") else None


def series_message(failure, folder):
    """One message for a series that does not apply: the series, the patch, the file and the hunk the applier
    named, and what to do. The build stopped at that step: no image was tagged, no rank was touched."""
    untouched = "No image was tagged and no rank was stopped: a deployment that serves keeps serving its current image."
    if not failure.get("patch"):  # no patch reached (no vllm in the base's Python)
        return f"the image's series could not be applied: {failure['reason']}. {untouched}"
    series = failure.get("series", "patches")
    hunk = f"hunk {failure['hunk']} (@@ -{failure.get('line')}) " if failure.get("hunk") else ""
    where = ": ".join(filter(None, (failure.get("file"), hunk + failure["reason"])))
    place = f"{folder}/{series}" if folder else series
    # The project's own series fits the base its README names; a local patch is the user's to redo.
    base = "pin the base the image folder's README.md names, or " if series == "patches" else ""
    return (
        f"patch {failure['patch']} of the series {series} does not apply to the base's vLLM: {where}. To go on, "
        f"{base}fix the patch against this base or drop it from {place}/series, update {place}/SHA256SUMS "
        f"(`sha256sum *.patch > SHA256SUMS` there) and rerun. {untouched}"
    )


class ProgressFile:
    """The progress file, replaced whole (a reader never sees half of it), at most every WRITE_EVERY_S."""

    def __init__(self, path, clock=time.monotonic):
        self.path, self.clock, self.written_at = path, clock, None

    def write(self, report, force=False):
        now = self.clock()
        if not force and self.written_at is not None and now - self.written_at < WRITE_EVERY_S:
            return
        with open(self.path + ".tmp", "w") as handle:
            json.dump(report, handle)
        os.replace(self.path + ".tmp", self.path)
        self.written_at = now


def follow(events, meter, progress):
    """Feed every event to the meter, writing its report as it goes and once at the end; the meter."""
    progress.write(meter.report(), force=True)
    for event in events:
        meter.feed(event)
        progress.write(meter.report())
    progress.write(meter.report(), force=True)
    return meter


def pull(client, ref, progress):
    """Pull `ref` (name@sha256:...) through the API, following its stream."""
    follow(client.pull(ref, stream=True, decode=True), PullMeter(), progress)
    print(f"pulled {ref}")


def build(client, spec, progress):
    """Build as community.docker.docker_image's build source did (classic builder, rm, no pull of the base): the
    context `path`, `tag`, `buildargs` and `labels` of `spec` (its `folder`, the image folder on the controller, only
    goes into a failure's message); the image id is printed."""
    events = client.build(
        path=spec["path"],
        tag=spec["tag"],
        buildargs=spec.get("buildargs") or {},
        labels=spec.get("labels") or {},
        pull=False,
        rm=True,
        decode=True,
    )
    meter = follow(events, BuildMeter(spec.get("folder", "")), progress)
    if not meter.image_id and not client.images(name=spec["tag"], quiet=True):
        raise StreamError(f"the build ended without an image {spec['tag']}")
    print(f"built {spec['tag']} {meter.image_id or ''}".rstrip())


def main(argv):
    """`pull <ref> <progress file> [timeout s]` or `build <spec json> <progress file> [timeout s]`; exit 1 with one
    line on stderr (no traceback) when the API refuses, marked as the task's whole message for a series that does
    not apply."""
    if len(argv) < 3 or argv[0] not in ("pull", "build"):
        print("usage: docker_progress.py pull|build <ref or spec json> <progress file> [timeout s]", file=sys.stderr)
        return 2
    try:
        target = argv[1] if argv[0] == "pull" else json.loads(argv[1])  # a bad spec never reaches the daemon
        import docker  # python3-docker on the node (roles/container_toolkit); only the script needs it

        # The daemon's own API version (an SDK's default may be older than a new daemon accepts); DOCKER_HOST and
        # its TLS settings as community.docker's modules read them.
        timeout = int(float(argv[3])) if len(argv) > 3 else 3600
        client = docker.APIClient(version="auto", timeout=timeout, **docker.utils.kwargs_from_env())
        (pull if argv[0] == "pull" else build)(client, target, ProgressFile(argv[2]))
    except SeriesFailed as error:  # says all there is to say: spark_transfer shows it alone
        print(f"{OWN_FAILURE}{error}", file=sys.stderr)
        return 1
    except Exception as error:  # the API's own words, not a traceback
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
