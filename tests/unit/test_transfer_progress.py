"""The progress of a long transfer: bytes counted, rate, time left, the printed line and the stall verdict."""

import pytest
from ansible.module_utils.transfer_progress import (
    OWN_FAILURE,
    Transfer,
    bytes_of,
    human_bytes,
    human_duration,
    own_failure,
    reported,
)

GB = 10**9


@pytest.mark.parametrize(
    ("count", "shown"),
    [(0, "0 B"), (999, "999 B"), (1000, "1.0 kB"), (410 * 10**6, "410.0 MB"), (107 * GB, "107.0 GB"), (2e12, "2.0 TB")],
)
def test_bytes_are_shown_in_decimal_units(count, shown):
    assert human_bytes(count) == shown


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0 s"), (0.2, "1 s"), (59, "59 s"), (60, "1 min"), (61, "2 min"), (3600, "1 h 00 min"), (7500, "2 h 05 min")],
)
def test_durations_round_up_to_whole_units(seconds, shown):
    assert human_duration(seconds) == shown


LISTING = "\n".join(
    [
        "aaa 100",  # a finished blob of this snapshot
        ".bbb.Xy12Qz 40",  # rsync's temporary file of blob bbb
        "ccc.1a2b3c4d.incomplete 7",  # the hf client's partial file of blob ccc
        "other 1000",  # a blob of another revision
        "garbage",  # a line that does not parse
        "with space 5",  # a name with a space: the size is the last field
    ]
)


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (None, 100 + 40 + 7 + 1000 + 5),
        (["aaa", "bbb", "ccc"], 147),
        (["aaa"], 100),
        ([], 0),
        (["with"], 5),
    ],
)
def test_bytes_of_counts_finished_and_partial_files_of_the_named_blobs(names, expected):
    assert bytes_of(LISTING, names) == expected


def run(samples, total=100 * GB, window_s=60.0):
    transfer = Transfer(total, 0.0, window_s=window_s)
    for at, done in samples:
        transfer.observe(at, done)
    return transfer


@pytest.mark.parametrize(
    ("samples", "rate", "left"),
    [
        ([], None, None),
        ([(0, 0)], None, None),
        ([(0, 0), (10, 4 * GB)], 0.4 * GB, 240.0),
        # the window forgets the fast start: the rate is the last minute's
        ([(0, 0), (30, 30 * GB), (60, 31 * GB), (90, 32 * GB)], 2 * GB / 60, 68 * GB / (2 * GB / 60)),
        # bytes that drop (a partial file moved into place) are not a negative rate
        ([(0, 10 * GB), (10, 9 * GB)], 0.0, None),
        # a resumed transfer: what was there before counts as done, not as rate
        ([(0, 50 * GB), (10, 51 * GB)], 0.1 * GB, 490.0),
    ],
)
def test_rate_over_the_window_and_time_left(samples, rate, left):
    transfer = run(samples)
    assert transfer.rate() == (pytest.approx(rate) if rate is not None else None)
    assert transfer.seconds_left() == (pytest.approx(left) if left is not None else None)


@pytest.mark.parametrize(
    ("samples", "at", "stall_s", "stalled"),
    [
        ([(0, 0)], 599, 600, False),  # nothing moved yet, but not for long
        ([(0, 0)], 600, 600, True),  # the start counts as the last change
        ([(0, 0), (100, 5), (650, 5)], 650, 600, False),  # moved at 100 s
        ([(0, 0), (100, 5), (700, 5)], 700, 600, True),
        ([(0, 0), (100, 4), (700, 3)], 700, 600, False),  # a drop is a change (a file moved into place)
        ([(0, 0)], 10**6, 0, False),  # stall_s 0: never
    ],
)
def test_stall_verdict(samples, at, stall_s, stalled):
    assert run(samples).stalled(at, stall_s) is stalled


@pytest.mark.parametrize(
    ("samples", "total", "at", "line"),  # quiet_s 20
    [
        ([(0, 0)], 107 * GB, 0, "spark-b: model copy from spark-a 0.0 of 107.0 GB (0.0%)"),
        (
            [(0, 0), (30, int(12.4 * GB))],
            107 * GB,
            30,
            "spark-b: model copy from spark-a 12.4 of 107.0 GB (11.6%) at 413.3 MB/s, 4 min left",
        ),
        # nothing yet, but only for one look: no time left to tell, no complaint either
        ([(0, 0), (10, 0)], 107 * GB, 10, "spark-b: model copy from spark-a 0.0 of 107.0 GB (0.0%) at 0 B/s"),
        # two looks without a byte: how long, not a time left from the last minute's rate
        (
            [(0, 0), (10, GB), (20, GB), (30, GB)],
            107 * GB,
            30,
            "spark-b: model copy from spark-a 1.0 of 107.0 GB (0.9%) at 33.3 MB/s, no byte for 20 s",
        ),
        ([(0, 0), (1, 300)], 900, 1, "spark-b: model copy from spark-a 300 of 900 B (33.3%) at 300 B/s, 2 s left"),
        ([(0, 0)], 0, 0, "spark-b: model copy from spark-a 0 of 0 B"),
        # past its estimate: no percent above 100, the total said to be one
        (
            [(0, 0), (10, int(2.7 * GB))],
            int(2.6 * GB),
            10,
            "spark-b: model copy from spark-a 2.7 of about 2.6 GB at 270.0 MB/s",
        ),
    ],
)
def test_the_progress_line(samples, total, at, line):
    assert run(samples, total=total).line("spark-b", "model copy from spark-a", at, quiet_s=20) == line


def test_the_stall_message_names_node_step_bytes_and_how_to_resume():
    transfer = run([(0, 0), (10, 3 * GB), (700, 3 * GB)])
    message = transfer.stall_message("spark-b", "model copy from spark-a", 700, "A rerun resumes the copy.")
    assert message == (
        "spark-b: model copy from spark-a stalled: no byte moved for 12 min at 3.0 GB of 100.0 GB; "
        "the transfer was stopped. A rerun resumes the copy."
    )


@pytest.mark.parametrize(
    ("text", "report"),
    [
        ("", None),  # not written yet
        ('{"done": 5, "total": 9', None),  # cut (a write is whole, a node's cat may not be)
        ("[1, 2]", None),
        ('{"done": -1, "total": 9}', None),
        ('{"done": 5, "total": "9"}', None),
        ('{"moved": "3"}', None),
        (
            '{"done": 5, "total": 9, "exact": false, "moved": 6, "note": "1 of 3 layers"}\n',
            {"done": 5, "total": 9, "exact": False, "moved": 6, "note": "1 of 3 layers"},
        ),
        ('{"moved": 3, "note": "Step 1/9 : FROM base"}', {"moved": 3, "note": "Step 1/9 : FROM base"}),
    ],
)
def test_a_commands_own_report_is_read_or_ignored(text, report):
    assert reported(text) == report


@pytest.mark.parametrize(
    ("stderr", "message"),
    [
        ("", None),
        ("APIError: returned a non-zero code: 1\n", None),  # the API's words: the generic failure with exit code
        (f"{OWN_FAILURE}patch 0001-x.patch does not apply ...\n", "patch 0001-x.patch does not apply ..."),
        (f"a warning first\n{OWN_FAILURE}the series could not be applied\n", "the series could not be applied"),
        (f"{OWN_FAILURE}earlier words\nTraceback: the last line is another's\n", None),
    ],
)
def test_a_commands_own_failure_is_its_last_marked_stderr_line(stderr, message):
    assert own_failure(stderr) == message


def taken(reports, total=0):
    transfer = Transfer(total, 0.0)
    for at, report in reports:
        transfer.take(at, report)
    return transfer


@pytest.mark.parametrize(
    ("reports", "at", "line"),  # quiet_s 20
    [
        ([], 3, "spark-b: image pull starting, 3 s in"),
        # a total still being learnt is a floor: no percent, no time left
        (
            [
                (0, {"done": 0, "total": GB, "exact": False, "moved": 0, "note": "0 of 9 layers"}),
                (10, {"done": GB // 2, "total": 2 * GB, "exact": False, "moved": GB // 2, "note": "2 of 9 layers"}),
            ],
            10,
            "spark-b: image pull 0.5 of at least 2.0 GB at 50.0 MB/s (2 of 9 layers)",
        ),
        (
            [
                (0, {"done": 0, "total": 2 * GB, "exact": True, "moved": 0, "note": "0 of 9 layers"}),
                (10, {"done": GB, "total": 2 * GB, "exact": True, "moved": GB, "note": "4 of 9 layers"}),
            ],
            10,
            "spark-b: image pull 1.0 of 2.0 GB (50.0%) at 100.0 MB/s, 10 s left (4 of 9 layers)",
        ),
        # extraction: no byte for 30 s, but the counter moved, so no complaint
        (
            [
                (0, {"done": GB, "total": GB, "moved": GB}),
                (10, {"done": GB, "total": GB, "moved": GB + 5}),
                (30, {"done": GB, "total": GB, "moved": GB + 9}),
            ],
            30,
            "spark-b: image pull 1.0 of 1.0 GB (100.0%) at 0 B/s",
        ),
        (
            [(0, {"done": GB, "total": GB, "moved": GB}), (30, {"done": GB, "total": GB, "moved": GB})],
            30,
            "spark-b: image pull 1.0 of 1.0 GB (100.0%) at 0 B/s, no byte for 30 s",
        ),
    ],
)
def test_the_line_of_a_command_that_reports_its_bytes(reports, at, line):
    assert taken(reports).line("spark-b", "image pull", at, quiet_s=20) == line


@pytest.mark.parametrize(
    ("reports", "at", "line", "stalled"),  # quiet_s 20, stall_s 600
    [
        ([], 5, "spark-a: image build at its start, 5 s in", False),
        (
            [(0, {"moved": 1, "note": "Step 3/9 : RUN x"}), (90, {"moved": 7, "note": "Step 4/9 : RUN y"})],
            100,
            "spark-a: image build at Step 4/9 : RUN y, 2 min in",
            False,
        ),
        (
            [(0, {"moved": 1, "note": "Step 3/9 : RUN x"}), (90, {"moved": 1, "note": "Step 3/9 : RUN x"})],
            90,
            "spark-a: image build at Step 3/9 : RUN x, 2 min in, no output for 2 min",
            False,
        ),
        (
            [(0, {"moved": 1, "note": "Step 3/9 : RUN x"}), (600, {"moved": 1, "note": "Step 3/9 : RUN x"})],
            600,
            "spark-a: image build at Step 3/9 : RUN x, 10 min in, no output for 10 min",
            True,
        ),
    ],
)
def test_a_builds_line_and_stall(reports, at, line, stalled):
    transfer = taken(reports)
    assert transfer.step_line("spark-a", "image build", at, quiet_s=20) == line
    assert transfer.stalled(at, 600) is stalled
    assert transfer.counts_bytes is (not reports)


def test_a_builds_stall_message_names_node_step_and_where_it_was():
    transfer = taken([(0, {"moved": 4, "note": "Step 6/9 : RUN pip install"}), (700, {"moved": 4, "note": "x"})])
    message = transfer.stall_message("spark-a", "image build", 700, "A rerun builds again.", counts_bytes=False)
    assert message == "spark-a: image build stalled: no output for 12 min at x; it was stopped. A rerun builds again."
