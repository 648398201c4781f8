"""bench.latency's candidate lists: one order repeated, or new orders as kube-scheduler sends them;
/prioritize asked about the nodes /filter passed."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from bench.latency import main, prioritize_after_filter
from bench.request_bodies import chosen_host, pending_pod, reordered

NAMES = [f"node-{i:03d}" for i in range(50)]


def test_reordered_keeps_the_first_list_and_shuffles_the_others_by_seed() -> None:
    orders = reordered(NAMES, 4, seed=7)
    assert len(orders) == 4 and orders[0] is NAMES
    assert all(sorted(order) == NAMES for order in orders)
    assert len({tuple(order) for order in orders}) == 4  # every order differs (50! makes a repeat absurd)
    assert reordered(NAMES, 4, seed=7) == orders
    assert reordered(NAMES, 1, seed=7) == [NAMES]


def test_reorder_below_one_is_refused() -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--reorder", "0", "--sizes", "", "--nodelist", ""])
    assert exit_.value.code == 2


class _FilterAnswers:
    """A client whose /filter passes the candidates named in ``passing``, in the request's order."""

    def __init__(self, passing: set[str]) -> None:
        self.passing = passing
        self.asked: list[tuple[str, Any]] = []

    def request(self, method: str, path: str, body: bytes) -> tuple[int, bytes, str]:
        sent = json.loads(body)
        self.asked.append((path, sent))
        passed = [n for n in sent["NodeNames"] if n in self.passing]
        return 200, json.dumps({"NodeNames": passed, "Error": ""}).encode(), ""

    def close(self) -> None: ...


def test_prioritize_is_asked_about_the_nodes_filter_passed_in_its_order() -> None:
    pod = pending_pod("gpu-1")
    client = _FilterAnswers({"n3", "n1"})
    bodies = prioritize_after_filter(client, [(pod, ["n1", "n2", "n3"]), (pod, ["n3", "n2", "n1"])])
    assert [json.loads(b)["NodeNames"] for b in bodies] == [["n1", "n3"], ["n3", "n1"]]
    assert all(json.loads(b)["Pod"] == pod for b in bodies)
    assert [path for path, _ in client.asked] == ["/filter", "/filter"]
    with pytest.raises(RuntimeError, match="passed no node"):
        prioritize_after_filter(_FilterAnswers(set()), [(pod, ["n1"])])


def test_chosen_host_takes_the_best_score_and_counts_a_host_left_out_as_zero() -> None:
    rng = random.Random(1)
    answer = [{"Host": "b", "Score": 9}, {"Host": "c", "Score": 10}]
    assert chosen_host(answer, ["a", "b", "c"], rng) == "c"
    # Every host left out (all scored 0): any candidate may be taken, and only a candidate.
    picks = {chosen_host([], ["a", "b", "c"], rng) for _ in range(60)}
    assert picks == {"a", "b", "c"}
    # Ties among the listed best go to either of them, never to a lower score.
    tied = [{"Host": "a", "Score": 7}, {"Host": "b", "Score": 7}, {"Host": "c", "Score": 3}]
    assert {chosen_host(tied, ["a", "b", "c"], rng) for _ in range(60)} == {"a", "b"}


@pytest.mark.parametrize(
    "answer",
    [
        {"Host": "a", "Score": 1},  # not a list
        [{"Host": "z", "Score": 5}],  # not a candidate
        [{"Host": "a", "Score": 5}, {"Host": "a", "Score": 6}],  # a host twice
        [{"Host": "a", "Score": 11}],  # out of range
        [{"Host": "a", "Score": 5.0}],  # not an integer
        [{"Host": "a", "Score": True}],  # a bool is no score
        ["a"],  # not an entry
    ],
)
def test_chosen_host_refuses_what_is_not_a_host_priority_list_of_the_candidates(answer: Any) -> None:
    assert chosen_host(answer, ["a", "b"], random.Random(1)) is None
