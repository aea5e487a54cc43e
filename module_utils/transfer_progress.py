"""Progress of a long transfer (model download, model copy, image pull, load and build): rate, time left, the line,
the stall verdict.

Pure Python (no Ansible) so plain pytest can test it; action_plugins/spark_transfer.py samples the bytes present
at the destination (or what the command reports in its progress file) and asks this module what to print and
whether the transfer stalled.
"""

import collections
import json

# The rate is taken over the last RATE_WINDOW_S seconds: long enough to smooth out a file boundary, short enough
# that the time left follows a link that slowed down.
RATE_WINDOW_S = 60.0
OWN_FAILURE = "spark-transfer-failed: "  # docker_progress.OWN_FAILURE: a command's failure told in its own words


def human_bytes(count):
    """Bytes in the unit a reader expects of a transfer: '512 B', '3.4 MB', '12.4 GB' (decimal, like the Hub)."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(count) >= size:
            return f"{count / size:.1f} {unit}"
    return f"{int(count)} B"


def bytes_of(listing, names=None):
    """Bytes of the files in `listing` ('<file name> <size>' lines, as `find -printf '%f %s\\n'` prints them); with
    `names`, only files named after one of them: the finished file (<name>) and the one being written (rsync's
    .<name>.XXXXXX, the hf client's <name>.<id>.incomplete). Lines that do not parse count nothing."""
    wanted = tuple(names) if names is not None else None
    total = 0
    for line in listing.splitlines():
        name, _, size = line.rpartition(" ")
        if not size.isdigit() or (wanted is not None and not name.lstrip(".").startswith(wanted)):
            continue
        total += int(size)
    return total


def human_duration(seconds):
    """'45 s', '4 min', '2 h 05 min': whole units, rounded up (a time left of 20 s is not '0 min')."""
    seconds = max(0, int(-(-seconds // 1)))
    if seconds < 60:
        return f"{seconds} s"
    minutes = -(-seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def reported(text):
    """The progress a command wrote to its progress file (docker_progress's report: done, total, exact, moved,
    note), as a dict; None when there is none yet or it does not parse (the command writes it whole, but a node's
    `cat` may still fail)."""
    try:
        report = json.loads(text)
    except ValueError:
        return None
    if not isinstance(report, dict) or not isinstance(report.get("moved", 0), int):
        return None
    for key in ("done", "total"):
        if key in report and not (isinstance(report[key], int) and report[key] >= 0):
            return None
    return report


def own_failure(stderr):
    """The message a command wrote for its own failure, whole (docker_progress.py for a series that does not
    apply): its last stderr line after OWN_FAILURE; None when it gave none (the exit code and stderr's tail then)."""
    lines = stderr.strip().splitlines()
    if lines and lines[-1].startswith(OWN_FAILURE):
        return lines[-1][len(OWN_FAILURE) :].strip()
    return None


class Transfer:
    """Samples (seconds, bytes present) of one transfer; bytes may restart lower (a partial file moved into place
    is counted once) and that is not progress. A transfer whose command reports its own progress may also give its
    total as it learns it (not exact until then), a movement counter beside the bytes (an image's layers extracted)
    and a note (the layers, a build's step)."""

    def __init__(self, total, started_at, window_s=RATE_WINDOW_S):
        self.total = max(0, int(total))
        self.exact = True  # False: the total is a floor (an image pull before every layer told its size)
        self.window_s = window_s
        self.samples = collections.deque()
        self.first = None  # bytes at the first sample: what was there before this run (a resumed transfer)
        self.moved_at = started_at  # when the bytes last changed (the start counts as a change)
        self.last = None
        self.moved = None  # the command's own movement counter, when it reports one
        self.note = ""
        self.counts_bytes = True  # False for a command that reports a step and no bytes (a build)

    def resize(self, total, exact=True):
        """The total as the command now knows it."""
        self.total, self.exact = max(0, int(total)), bool(exact)

    def observe(self, at, done, moved=None):
        """Record `done` bytes present at `at` seconds (and the command's movement counter: a change is movement
        even when no byte is added, such as a layer being extracted)."""
        done = max(0, int(done))
        if self.first is None:
            self.first = done
        if self.last is not None and (done != self.last or (moved is not None and moved != self.moved)):
            self.moved_at = at
        self.last = done
        self.moved = moved if moved is not None else self.moved
        self.samples.append((at, done))
        while len(self.samples) > 2 and at - self.samples[1][0] >= self.window_s:
            self.samples.popleft()

    def take(self, at, report):
        """A command's own report at `at` seconds (reported()): its total as it now knows it, the bytes done (none
        for a build, which reports its step), its movement counter and its note."""
        if "total" in report:
            self.resize(report["total"], report.get("exact", True))
        self.counts_bytes = "done" in report
        self.note = str(report.get("note", ""))
        self.observe(at, report.get("done", 0), report.get("moved"))

    def rate(self):
        """Bytes per second over the window, or None before two samples; never negative."""
        if len(self.samples) < 2:
            return None
        (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
        return max(0.0, (b1 - b0) / (t1 - t0)) if t1 > t0 else None

    def seconds_left(self):
        """Seconds to the total at the current rate; None without a rate (or at rate 0: unknown, not infinite)."""
        rate = self.rate()
        if not rate or self.last is None or self.last > self.total or not self.exact:  # the end is unknown
            return None
        return (self.total - self.last) / rate

    def stalled_for(self, at):
        """Seconds since the bytes last changed."""
        return at - self.moved_at

    def stalled(self, at, stall_s):
        """True when no byte moved for stall_s seconds (stall_s <= 0: never)."""
        return stall_s > 0 and self.stalled_for(at) >= stall_s

    def line(self, node, step, at, quiet_s):
        """'spark-b: model copy from spark-a 12.4 of 107.0 GB (11.6%) at 410 MB/s, 4 min left'; once no byte has
        moved for quiet_s, how long instead of the time left (the rate of the last minute still reads above 0)."""
        if self.last is None and not self.total:  # a command that reports its own bytes has not yet
            return f"{node}: {step} starting, {human_duration(at)} in"
        done = self.last or 0
        total = human_bytes(self.total)
        scale = dict(TB=1e12, GB=1e9, MB=1e6, kB=1e3).get(total.split()[-1])
        shown = f"{done / scale:.1f}" if scale else str(done)
        # A stream can outgrow its estimate (an image's save stream against its size): the total then reads as one.
        # A total still being learnt (a pull's layers yet to start) is a floor, and no percent.
        percent = f" ({100.0 * done / self.total:.1f}%)" if self.total and done <= self.total and self.exact else ""
        total = total if done <= self.total or not self.total else f"about {total}"
        total = total if self.exact else f"at least {total}"
        rate = self.rate()
        speed = f" at {human_bytes(rate)}/s" if rate is not None else ""
        left = self.seconds_left()
        if self.stalled_for(at) >= quiet_s:
            tail = f", no byte for {human_duration(self.stalled_for(at))}"
        else:
            tail = f", {human_duration(left)} left" if left is not None else ""
        note = f" ({self.note})" if self.note else ""
        return f"{node}: {step} {shown} of {total}{percent}{speed}{tail}{note}"

    def step_line(self, node, step, at, quiet_s):
        """Where a command that moves no bytes is (a build): 'spark-a: image build at Step 3/9 : RUN ..., 2 min
        in'; once it has said nothing for quiet_s, for how long."""
        tail = f", no output for {human_duration(self.stalled_for(at))}" if self.stalled_for(at) >= quiet_s else ""
        return f"{node}: {step} at {self.note or 'its start'}, {human_duration(at)} in{tail}"

    def stall_message(self, node, step, at, resume, counts_bytes=True):
        """Why the transfer was stopped, for the task's failure: the node, the step, the bytes (or where a build
        was) and how to resume."""
        if not counts_bytes:
            return (
                f"{node}: {step} stalled: no output for {human_duration(self.stalled_for(at))} at "
                f"{self.note or 'its start'}; it was stopped. {resume}"
            )
        return (
            f"{node}: {step} stalled: no byte moved for {human_duration(self.stalled_for(at))} at "
            f"{human_bytes(self.last or 0)} of {human_bytes(self.total)}; the transfer was stopped. {resume}"
        )
