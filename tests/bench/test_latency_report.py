"""bench.latency's targets: name lists judged on the round trip kube-scheduler waits for, NodeList
bodies on the server's own time."""

from __future__ import annotations

import math

from bench.latency import target_ms
from bench.latency_report import Row, table


def _row(mode: str, nodes: int, p99: float, server_p99: float, errors: int = 0) -> Row:
    timing = (0.5, p99, p99, 0.3, server_p99, math.nan, math.nan)
    return Row(mode, False, nodes, "filter", 300, *timing, errors, 0, 0, target_ms(mode, nodes))


def test_budgets_by_mode_and_size() -> None:
    assert target_ms("names", 500) == target_ms("names", 5000) == 1.0
    assert target_ms("names", 5001) == target_ms("names", 15000) == 3.0
    assert target_ms("names", 15001) is None
    assert target_ms("nodelist", 1000) == 10.0
    assert target_ms("nodelist", 1000, queues=True) == 15.0


def test_a_name_list_is_judged_on_the_round_trip_not_the_servers_share() -> None:
    assert _row("names", 5000, p99=1.2, server_p99=0.5).verdict == "MISS"
    assert _row("names", 5000, p99=0.9, server_p99=0.5).verdict == "PASS"
    assert _row("names", 15000, p99=2.9, server_p99=2.0).verdict == "PASS"


def test_a_nodelist_is_judged_on_the_servers_time() -> None:
    assert _row("nodelist", 1000, p99=14.0, server_p99=9.0).verdict == "PASS"
    assert _row("nodelist", 1000, p99=11.0, server_p99=10.5).verdict == "MISS"


def test_errors_miss_and_rows_without_a_budget_are_not_judged() -> None:
    assert _row("names", 5000, p99=0.5, server_p99=0.3, errors=1).verdict == "MISS"
    assert _row("names", 50000, p99=9.0, server_p99=9.0).verdict == "-"


def test_the_table_says_which_p99_each_target_applies_to() -> None:
    printed = table([_row("names", 5000, 0.9, 0.5), _row("nodelist", 1000, 14.0, 9.0)])
    names_line, nodelist_line = printed.splitlines()[2:]
    assert "| p99 <= 1 ms" in names_line and names_line.endswith("PASS")
    assert "| srv p99 <= 10 ms" in nodelist_line and nodelist_line.endswith("PASS")
