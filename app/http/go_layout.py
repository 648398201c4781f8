"""Request bodies as kube-scheduler's Go encoder writes them, split without a JSON decode.

Go's encoding/json writes ExtenderArgs' fields in declaration order (Pod, Nodes, NodeNames) and a
Node's ObjectMeta.Name first, always with the same spacing. A body in exactly that layout can be cut
where its parts begin; anything else returns None and ``app.http.wire`` decodes it in full (which
also says precisely what is wrong with a bad body).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

import msgspec

__all__ = ["NODES_CLOSE", "node_name", "node_names", "remember_node_names", "split_node_list", "split_node_names"]

T = TypeVar("T")

_decoder_names = msgspec.json.Decoder(list[str] | None)

# A Node's name at a fixed place (its apiVersion and kind may come first).
_NODE_NAME = re.compile(rb'\A\{(?:"apiVersion":"v1","kind":"Node",)?"metadata":\{"name":"([A-Za-z0-9.\-]+)"')

# NodeList mode: the Pod, then the NodeList (empty metadata), then NodeNames null; each item a v1.Node.
_NODES_OPEN = b',"Nodes":{"metadata":{},"items":['
NODES_CLOSE = b']},"NodeNames":null}'
_NODE_OPEN = b'{"metadata":{"name":"'
_NODE_NEXT = b'},{"metadata":{"name":"'
_NODE_NAME_CHARS = re.compile(r"[A-Za-z0-9.\-]+")

# NodeNames mode: the Pod, "Nodes":null, then the names, last.
_NAMES_MARK = b',"Nodes":null,"NodeNames":['
_POD_OPEN = b'{"Pod":'

# kube-scheduler sends the same candidate list again and again (its feasible nodes change only as
# nodes fill up), and prioritize gets the list filter answered: decoding 5,000 names costs ~0.25 ms,
# comparing their bytes with a recent list a tenth of that. Returning the very same list object
# also lets the node table recognise it at once. Callers must not modify the list.
_NAME_LISTS_KEPT = 8
_name_lists: list[tuple[bytes, list[str]]] = []  # most recent first; compared, not hashed (a hash reads it all)


def node_name(raw: bytes | msgspec.Raw) -> str | None:
    """A Node object's name where Go writes it, or None (then decode the node)."""
    match = _NODE_NAME.match(raw)
    return None if match is None else match[1].decode()


def node_names(raw: bytes | msgspec.Raw) -> list[str] | None:
    """``NodeNames`` as a list of strings (the same object for the same bytes), or None when it is
    not a list of strings (the general path then says what is wrong)."""
    key = bytes(raw)
    for index, (encoded, names) in enumerate(_name_lists):
        if len(encoded) == len(key) and encoded == key:
            if index:
                _name_lists.insert(0, _name_lists.pop(index))
            return names
    try:
        decoded: list[str] | None = _decoder_names.decode(key)
    except msgspec.DecodeError:
        return None
    if decoded is not None:
        remember_node_names(key, decoded)
    return decoded


def remember_node_names(encoded: bytes, names: list[str]) -> None:
    """Keep ``names`` for a later request whose ``NodeNames`` are exactly ``encoded`` (filter's answer
    is what prioritize will be sent)."""
    _name_lists[:] = [(encoded, names), *(entry for entry in _name_lists if entry[0] != encoded)][:_NAME_LISTS_KEPT]


def split_node_list(body: bytes, node: Callable[[str, msgspec.Raw], T]) -> tuple[bytes, list[T]] | None:
    """A NodeList-mode body: the Pod's bytes and ``node(name, bytes)`` for each item, or None.

    Scanning 1,000 full Nodes (10 MB) as JSON takes about 5 ms; finding where each one starts takes
    a fraction of that. Quotes inside JSON strings are escaped, and no object nested in a v1.Node
    (images, taints, conditions, addresses, managedFields...) begins with a ``metadata`` member, so
    ``},{"metadata":{"name":"`` can only be the seam between two items. The nodes are not checked as
    JSON here (kube-scheduler's encoder wrote them; a node the cache does not know is decoded when
    its allocatable is read, and a broken one fails as "invalid allocatable"); the caller decodes
    (and so checks) the Pod.
    """
    if not body.startswith(b'{"Pod":{') or not body.endswith(NODES_CLOSE):
        return None
    opening = body.find(_NODES_OPEN)
    if opening < 0:
        return None
    view = memoryview(body)
    position, end = opening + len(_NODES_OPEN), len(body) - len(NODES_CLOSE)
    nodes: list[T] = []
    if position < end and not body.startswith(_NODE_OPEN, position):
        return None
    while position < end:
        seam = body.find(_NODE_NEXT, position + len(_NODE_OPEN), end)
        stop = end if seam < 0 else seam + 1  # the item's closing brace
        name_start = position + len(_NODE_OPEN)
        name_end = body.find(b'"', name_start, stop)
        name = body[name_start:name_end].decode("ascii", "replace") if name_end > name_start else ""
        if _NODE_NAME_CHARS.fullmatch(name) is None or body[stop - 1 : stop] != b"}":
            return None
        nodes.append(node(name, msgspec.Raw(view[position:stop])))
        position = end if seam < 0 else seam + 2
    return body[len(_POD_OPEN) : opening], nodes


def split_node_names(body: bytes) -> tuple[bytes, list[str]] | None:
    """A NodeNames-mode body: the Pod's bytes and the names, or None. The names are not scanned when
    they are a list seen recently (``node_names`` compares the bytes). No Pod field is named "Nodes"
    and quotes inside strings are escaped, so the mark can only be where the Pod ends."""
    mark = body.find(_NAMES_MARK)
    if mark < 0 or not body.startswith(b'{"Pod":{'):
        return None
    names = node_names(body[mark + len(_NAMES_MARK) - 1 : -1])
    return None if names is None else (body[len(_POD_OPEN) : mark], names)
