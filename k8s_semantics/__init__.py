"""Kubernetes semantics shared by the domain packages, written to kube-scheduler's component-helpers
and apimachinery rules: node selectors and required node affinity (``nodeselector``), taints and
tolerations (``taints``), resource quantities (``quantity``). Pure: no I/O, no API client.
scoring/, allocator/ and fairshare/ use these; none of them keeps its own copy.
"""
