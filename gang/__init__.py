"""Gangs: pods that are useless unless enough of them run together, placed as one decision.

Pure, like the other domain packages: a group's members, the nodes' free room and their topology
labels in; a placement of every member (or a reason in numbers why there is none) out.

- ``spec``: what a group asks for (members, how many must run, topology) in the API's own terms.
- ``topology``: domains of nodes by a label, and the levels a preferred request falls back through.
- ``planner``: the all-or-nothing placement of a group.
"""
