"""The progress of a long transfer: bytes counted, rate, time left, the printed line and the stall verdict."""

import pytest
from ansible.module_utils.transfer_progress import Transfer, bytes_of, human_bytes, human_duration

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
