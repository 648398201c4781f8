"""DRA device allocation (resource.k8s.io/v1) with KEP-5773 ResourceSlice priorities.

Pure: ResourceSlices, DeviceClasses and ResourceClaims in, AllocationResults out. No I/O, no
HTTP, no Kubernetes client, like kube-scheduler's structured allocator.
"""
