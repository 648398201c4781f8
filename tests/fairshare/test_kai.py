"""KAI division tests. Expected values are the KAI priority-based fair-share design examples
(seed 002, section 6) and the flag-off results worked by hand with the default algorithm
(reference 6.2/6.4: 20/40/40, 20/40/50, 20/50/90)."""

from __future__ import annotations

import pytest

from fairshare.errors import QueueConfigError
from fairshare.kai import KaiQueue, QueueResource, fair_shares, parse_kai_queue


def abc(b_request: float, c_request: float) -> list[KaiQueue]:
    return [
        KaiQueue("A", priority=100, resources={"cpu": QueueResource(deserved=20, over_quota_weight=0, request=70)}),
        KaiQueue(
            "B", priority=100, resources={"cpu": QueueResource(deserved=30, over_quota_weight=2, request=b_request)}
        ),
        KaiQueue(
            "C", priority=50, resources={"cpu": QueueResource(deserved=30, over_quota_weight=1, request=c_request)}
        ),
    ]


CASES = [
    # capacity, B request, C request, priority-based (A, B, C), default (A, B, C)
    (100, 40, 50, (60, 40, 0), (20, 40, 40)),
    (120, 40, 50, (70, 40, 10), (20, 40, 50)),
    (200, 50, 90, (70, 50, 80), (20, 50, 90)),
]


@pytest.mark.parametrize(("total", "b_req", "c_req", "with_flag", "without_flag"), CASES)
def test_design_examples(
    total: float,
    b_req: float,
    c_req: float,
    with_flag: tuple[float, float, float],
    without_flag: tuple[float, float, float],
) -> None:
    on = fair_shares(abc(b_req, c_req), {"cpu": total}, priority_based=True)
    off = fair_shares(abc(b_req, c_req), {"cpu": total})
    assert tuple(on[n]["cpu"] for n in "ABC") == with_flag
    assert tuple(off[n]["cpu"] for n in "ABC") == without_flag


def test_default_deserved_not_capped_by_capacity() -> None:
    # Upstream "gives up to deserved when over subscribed": deserved 2, total 1 -> fair share 2.
    out = fair_shares([KaiQueue("q", resources={"gpu": QueueResource(deserved=2, request=3)})], {"gpu": 1})
    assert out["q"]["gpu"] == 2


def test_phase1_order_dependent_case_uses_creation_then_name() -> None:
    # Capacity 40, A deserved 20, B deserved 30, same bucket: the older queue is served first.
    def qs(a_created: float, b_created: float) -> list[KaiQueue]:
        return [
            KaiQueue(
                "A", creation=a_created, resources={"gpu": QueueResource(deserved=20, over_quota_weight=0, request=20)}
            ),
            KaiQueue(
                "B", creation=b_created, resources={"gpu": QueueResource(deserved=30, over_quota_weight=0, request=30)}
            ),
        ]

    first_a = fair_shares(qs(1, 2), {"gpu": 40}, priority_based=True)
    assert (first_a["A"]["gpu"], first_a["B"]["gpu"]) == (20, 20)
    first_b = fair_shares(qs(2, 1), {"gpu": 40}, priority_based=True)
    assert (first_b["A"]["gpu"], first_b["B"]["gpu"]) == (10, 30)
    same_time = fair_shares(qs(0, 0), {"gpu": 40}, priority_based=True)  # name breaks the tie: A first
    assert (same_time["A"]["gpu"], same_time["B"]["gpu"]) == (20, 20)


def test_pr326_reclaim_shares() -> None:
    # 4 GPUs; reclaimer priority 101, weight 0, deserved 0, request 2; low_q priority 100, deserved 1, request 3.
    queues = [
        KaiQueue("high", priority=101, resources={"gpu": QueueResource(deserved=0, over_quota_weight=0, request=2)}),
        KaiQueue("low_q", priority=100, resources={"gpu": QueueResource(deserved=1, over_quota_weight=1, request=3)}),
    ]
    on = fair_shares(queues, {"gpu": 4}, priority_based=True)
    assert (on["high"]["gpu"], on["low_q"]["gpu"]) == (2, 2)
    # Equal priority, flag on: phase 1 gives low_q 1, phase 2 its weight gives it 2 more (request 3),
    # phase 3 (all weights 1) gives the reclaimer the last unit -> low_q 3, reclaimer 1 (reference 6.4).
    equal = [KaiQueue(q.name, priority=100, resources=q.resources) for q in queues]
    on_equal = fair_shares(equal, {"gpu": 4}, priority_based=True)
    assert (on_equal["high"]["gpu"], on_equal["low_q"]["gpu"]) == (1, 3)


def test_limit_and_floor_with_leftover_units() -> None:
    # 10 units, three weight-1 queues deserved 0 requesting 10: each round gives floor(10/3) = 3,
    # one unit left goes to the largest remainder; equal remainders -> older creation, then name: "a".
    queues = [KaiQueue(n, resources={"gpu": QueueResource(request=10)}) for n in ("c", "a", "b")]
    out = fair_shares(queues, {"gpu": 10})
    assert {n: out[n]["gpu"] for n in "abc"} == {"a": 4, "b": 3, "c": 3}
    # A limit caps what is requestable: x limit 2 -> 2, y gets the rest of its request 5.
    limited = [
        KaiQueue("x", resources={"gpu": QueueResource(limit=2, request=8)}),
        KaiQueue("y", resources={"gpu": QueueResource(request=5)}),
    ]
    out = fair_shares(limited, {"gpu": 10})
    assert (out["x"]["gpu"], out["y"]["gpu"]) == (2, 5)


def test_hierarchy_children_split_parent_share() -> None:
    # Two departments deserved 6 and 4 of 10; dept-a's children (weights 1 and 3, deserved 0) split its 6 -> 1.5/4.5
    # floored to 1/4; the last unit goes to the larger remainder (0.5 each: older creation -> t1) -> 2/4.
    queues = [
        KaiQueue("dept-a", resources={"gpu": QueueResource(deserved=6, over_quota_weight=0)}),
        KaiQueue("dept-b", resources={"gpu": QueueResource(deserved=4, over_quota_weight=0)}),
        KaiQueue("t1", parent="dept-a", creation=1, resources={"gpu": QueueResource(over_quota_weight=1, request=10)}),
        KaiQueue("t2", parent="dept-a", creation=2, resources={"gpu": QueueResource(over_quota_weight=3, request=10)}),
        KaiQueue("t3", parent="dept-b", resources={"gpu": QueueResource(deserved=4, request=1)}),
    ]
    out = fair_shares(queues, {"gpu": 10})
    assert out["dept-a"]["gpu"] == 6 and out["dept-b"]["gpu"] == 1
    assert (out["t1"]["gpu"], out["t2"]["gpu"]) == (2, 4)
    assert out["t3"]["gpu"] == 1


def test_parse_kai_queue_defaults_and_errors() -> None:
    q = parse_kai_queue(
        {"metadata": {"name": "team-a"}, "spec": {"parentQueue": "org", "resources": {"gpu": {"quota": 4}}}}, "q[0]"
    )
    assert (q.priority, q.parent) == (100, "org")
    assert q.resources["gpu"] == QueueResource(deserved=4, limit=-1, over_quota_weight=1)
    with pytest.raises(QueueConfigError, match=r"q\[3\]\.spec\.resources\.gpu\.overQuotaWeight: must be >= 0"):
        parse_kai_queue({"metadata": {"name": "x"}, "spec": {"resources": {"gpu": {"overQuotaWeight": -2}}}}, "q[3]")
    with pytest.raises(QueueConfigError, match=r"q\[3\]\.spec\.priority: must be an integer"):
        parse_kai_queue({"metadata": {"name": "x"}, "spec": {"priority": "high"}}, "q[3]")
