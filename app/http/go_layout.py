"""Request bodies as kube-scheduler's Go encoder writes them, split without a JSON decode.

Go's encoding/json writes ExtenderArgs' fields in declaration order (Pod, Nodes, NodeNames) and a
Node's ObjectMeta.Name first, always with the same spacing. A body in exactly that layout can be cut
where its parts begin; anything else returns None and ``app.http.wire`` decodes it in full (which
also says precisely what is wrong with a bad body).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Generic, TypeVar

import msgspec

__all__ = [
    "NODES_CLOSE",
    "NodeListItems",
    "encoded_node_names",
    "node_name",
    "node_names",
    "remember_node_names",
    "split_node_names",
]

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
_ITEMS_KEPT_MIN = 1024  # NodeList items kept at least, whatever the body (NodeListItems)
# What follows a Node's name in ObjectMeta's field order when it comes from the API server.
_NODE_VERSION = re.compile(rb'","uid":"[0-9A-Za-z\-]{1,64}","resourceVersion":"[0-9]{1,24}"')

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


def encoded_node_names(names: list[str]) -> bytes | None:
    """The bytes this very list was remembered with, or None: an in-process caller (the simulator)
    builds the prioritize body from filter's answer without encoding the names again."""
    for encoded, kept in _name_lists:
        if kept is names:
            return encoded
    return None


class NodeListItems(Generic[T]):
    """Splits NodeList-mode bodies, keeping the latest item of each node (``T`` is what
    ``node(name, bytes)`` makes of one).

    Scanning 1,000 full Nodes (10 MB) as JSON takes about 5 ms; finding where each one starts takes
    a fraction of that. Quotes inside JSON strings are escaped, and no object nested in a v1.Node
    (images, taints, conditions, addresses, managedFields...) begins with a ``metadata`` member, so
    ``},{"metadata":{"name":"`` can only be the seam between two items. The nodes are not checked as
    JSON here (kube-scheduler's encoder wrote them; a node the cache does not know is decoded when
    its allocatable is read, and a broken one fails as "invalid allocatable"); the caller decodes
    (and so checks) the Pod.

    kube-scheduler sends the same Node objects request after request; one changes when the API
    server gives it a new resourceVersion. An item that begins as the kept item of that name began,
    through its uid and resourceVersion, and has a seam (or the end) where that item ended, is that
    item: its object is the one made for it last time, found without reading its 10 KB. (Go writes
    one object's JSON the same way every time; kube-scheduler does not modify nodes.) An item
    without a resourceVersion is recognised by all its bytes. The latest item of every name seen is
    kept, its bytes copied out of the body (a /prioritize body between two /filter bodies holds only
    a few of their nodes); once they are more than twice a body's and ``_ITEMS_KEPT_MIN``, only that
    body's are kept (nodes leave the cluster).
    """

    def __init__(self, node: Callable[[str, msgspec.Raw], T]) -> None:
        self.node = node
        # name -> (the bytes an item must begin with to be this one, its length, its object)
        self.items: dict[str, tuple[bytes, int, T]] = {}

    def split(self, body: bytes) -> tuple[bytes, list[T]] | None:
        """The Pod's bytes and each item's object, or None when ``body`` is not in Go's layout."""
        if not body.startswith(b'{"Pod":{') or not body.endswith(NODES_CLOSE):
            return None
        opening = body.find(_NODES_OPEN)
        if opening < 0:
            return None
        position, end = opening + len(_NODES_OPEN), len(body) - len(NODES_CLOSE)
        if position < end and not body.startswith(_NODE_OPEN, position):
            return None
        known, items, nodes = self.items, dict[str, tuple[bytes, int, T]](), list[T]()
        while position < end:
            name_start = position + len(_NODE_OPEN)
            name_end = body.find(b'"', name_start, end)
            name = body[name_start:name_end].decode("ascii", "replace") if name_end > name_start else ""
            entry = known.get(name)
            if entry is not None:
                stop = position + entry[1]
                if (
                    stop > end
                    or not body.startswith(entry[0], position)
                    or (stop != end and not body.startswith(_NODE_NEXT, stop - 1))
                ):
                    entry = None  # a new version, or the same start but the item goes on
            if entry is None:
                seam = body.find(_NODE_NEXT, name_start, end)
                stop = end if seam < 0 else seam + 1  # the item's closing brace
                if not name_start < name_end < stop or _NODE_NAME_CHARS.fullmatch(name) is None:
                    return None
                if body[stop - 1 : stop] != b"}":
                    return None
                raw = body[position:stop]
                version = _NODE_VERSION.match(body, name_end, stop)
                mark = raw if version is None else raw[: version.end() - position]
                entry = (mark, stop - position, self.node(name, msgspec.Raw(raw)))
            items[name] = entry
            nodes.append(entry[2])
            position = stop + 1  # past the closing brace and the comma (or past the end)
        known.update(items)  # only once the whole body is split
        if len(known) > max(2 * len(items), _ITEMS_KEPT_MIN):
            self.items = items
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
