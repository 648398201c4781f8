"""Answers assembled from prebuilt bytes: the node table keeps each node's name as a JSON key and as
the start of its HostPriority, so a 15,000-node answer is one join, with no dict or bytes object
built per node and no name encoded again. A HostPriorityList leaves out the hosts scored 0:
kube-scheduler adds nothing for a host the answer does not list, exactly as for a 0, and the
answer (0 is the lowest-scored candidates' priority, and that of nodes the pod does not fit) is that
much shorter to write, send and decode. A
long HostPriorityList asked for again (kube-scheduler sends the same candidates request after
request) with the same hosts scored is the last answer for them with its scores rewritten in
place."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec
import numpy as np
import numpy.typing as npt

__all__ = ["host_priority_raw", "node_reasons_raw"]

_encode = msgspec.json.Encoder().encode

# What closes a prebuilt '{"Host":...,"Score":' for each score 0..10, and the comma before the next
# (an object array: a score array picks its tails in one indexing, not one call per node). Every
# score takes two characters, a single digit after a space (JSON allows it), so that an answer's
# scores can be rewritten in place.
_SCORE_TAIL = np.array([f"{score:>2}}},".encode() for score in range(11)], dtype=object)
_TENS = np.frombuffer(b"".join(f"{score:>2}".encode()[:1] for score in range(11)), dtype=np.uint8)
_ONES = np.frombuffer(b"".join(f"{score:>2}".encode()[1:] for score in range(11)), dtype=np.uint8)
# Lists this long are kept for rewriting (below it a join costs less than keeping them).
_REWRITE_MIN = 256
_REWRITE_KEPT = 4


class _Rewritable:
    """The last answer for one hosts list (kept by identity: the node table hands back the same list
    for the same candidates) and which of them it lists (those scored above 0), and where each
    listed score's two characters are, found on first reuse."""

    __slots__ = ("answer", "hosts", "scored", "slots")

    def __init__(self, hosts: Sequence[bytes], scored: npt.NDArray[np.bool_], answer: bytes) -> None:
        self.hosts = hosts
        self.scored = scored
        self.answer = answer
        self.slots: npt.NDArray[np.intp] | None = None

    def rewritten(self, scores: npt.NDArray[np.intp]) -> bytearray:
        if self.slots is None:
            # Entry i is its host prefix, then two score characters and "}," (or "}]"): 4 bytes.
            lengths = np.fromiter(map(len, self.hosts), np.intp, len(self.hosts))[self.scored]
            self.slots = np.cumsum(lengths + 4) - 3  # after the "[" and the entry's prefix
        answer = bytearray(self.answer)
        view = np.frombuffer(answer, dtype=np.uint8)
        view[self.slots] = _TENS[scores]
        view[self.slots + 1] = _ONES[scores]
        return answer


_rewritable: list[_Rewritable] = []  # most recent first


def _joined(heads: Sequence[bytes], tails: Iterable[bytes], opening: bytes, closing: bytes) -> bytes:
    """``opening``, then each head followed by its tail, then ``closing``, joined once: no bytes object
    built per entry. Every tail ends with a comma; the last one's becomes ``closing``."""
    parts: list[bytes] = [b""] * (2 * len(heads))
    parts[0::2] = heads
    parts[1::2] = tails
    parts[0] = opening + heads[0]
    parts[-1] = parts[-1][:-1] + closing
    return b"".join(parts)


def host_priority_raw(hosts: Sequence[bytes], scores: Sequence[int] | npt.NDArray[np.int64]) -> msgspec.Raw:
    """``HostPriorityList`` from per-node prebuilt ``{"Host":"<name>","Score":`` prefixes: no dict per
    node, no re-encoding of names (scores are 0..10; the verb passes them as the array it computed).
    Hosts scored 0 are left out (kube-scheduler counts a host not listed as 0)."""
    if len(hosts) != len(scores):
        raise ValueError(f"{len(hosts)} hosts but {len(scores)} scores")
    if not hosts:
        return msgspec.Raw(b"[]")
    at = np.asarray(scores, dtype=np.intp)
    if at.min() < 0 or at.max() > 10:
        raise ValueError(f"scores must be 0..10, not {int(at.min())}..{int(at.max())}")
    scored = at > 0
    if len(hosts) >= _REWRITE_MIN:
        for index, kept in enumerate(_rewritable):
            if kept.hosts is hosts and np.array_equal(kept.scored, scored):
                if index:
                    _rewritable.insert(0, _rewritable.pop(index))
                return msgspec.Raw(kept.rewritten(at[scored]))
    positions = scored.nonzero()[0]
    if not len(positions):
        return msgspec.Raw(b"[]")
    listed = hosts if len(positions) == len(hosts) else list(map(hosts.__getitem__, positions.tolist()))
    answer = _joined(listed, _SCORE_TAIL[at[positions]].tolist(), b"[", b"]")
    if len(hosts) >= _REWRITE_MIN:
        _rewritable[:] = [_Rewritable(hosts, scored, answer), *_rewritable][:_REWRITE_KEPT]
    return msgspec.Raw(answer)


def node_reasons_raw(keys: Iterable[bytes], reasons: Sequence[str], reason_index: Iterable[int]) -> msgspec.Raw:
    """A map of node name to reason (``FailedNodes``) from per-node prebuilt ``"<name>":`` keys and
    the index of each node's reason in ``reasons``: names are not encoded again, and reasons (a few
    distinct strings) once each."""
    heads = list(keys)
    if not heads:
        return msgspec.Raw(b"{}")
    tails = [_encode(reason) + b"," for reason in reasons]
    return msgspec.Raw(_joined(heads, map(tails.__getitem__, reason_index), b"{", b"}"))
