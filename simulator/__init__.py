"""The trace simulator: an offline driver of the extender's verbs, playing kube-scheduler's part.

``trace`` loads trace files, ``schedconfig`` reads a KubeSchedulerConfiguration profile as
kube-scheduler 1.36 does, ``simulate`` runs a trace through ``app.service.ExtenderService`` in
process, ``jobs`` and ``jobsim`` do the same for job traces (pod by pod against gangs), ``cli`` is
``kube-gpu-extender simulate``. Not part of the service: nothing in app/ imports
it except the CLI's subcommand.
"""
