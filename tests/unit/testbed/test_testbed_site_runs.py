"""The site runs' comparison table (a pure part of glidein_ext/testbed/site_runs.py): one line per
(architecture, workflow), the requests by kind last."""

from __future__ import annotations

from glidein_ext.testbed.site_runs import Row, table


def test_the_table_has_a_line_per_run_and_the_requests_by_kind_last() -> None:
    rows = [
        Row(
            "pre-dht",
            "w1",
            80,
            3.3,
            {"work": 70, "done": 80},
            0.02,
            0.5,
            1.0,
            0.9,
            16.75,
            0,
            0,
            0,
            0,
        ),
        Row("distributed", "w3", 120, 0.625, {}, None, None, None, None, None, 0, 0, 0, 0),
    ]
    assert table(rows).splitlines() == [
        "architecture wf  tasks req/task delay p50 delay p99 cache hit local hit turnaround"
        "  requests by kind",
        "pre-dht      w1     80     3.30      0.02      0.50      1.00      0.90       16.8"
        "  done=80 work=70",
        "distributed  w3    120     0.62         -         -         -         -          -  ",
    ]
