"""Pure scheduling logic: pod requests, node snapshots, Filter checks and Score plugins.

Nothing in this package performs I/O or knows about HTTP or the Kubernetes client: data in,
decisions out, like kube-scheduler's framework plugins.
"""
