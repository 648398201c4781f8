# Stages: builder (project wheel), base (non-root user and examples, shared by the
# next two), loadgen (locust, for docker-compose.yml) and runtime (the extender;
# last, so it is the default target of `docker build .`).

# ---- builder ---------------------------------------------------------------
FROM python:3.11-slim AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
# Only what the wheel is built from: every package of the setuptools
# packages.find include list in pyproject.toml (tests/deploy checks they agree).
COPY pyproject.toml README.md ./
COPY app/ app/
COPY scoring/ scoring/
COPY allocator/ allocator/
COPY fairshare/ fairshare/
COPY gang/ gang/
COPY k8s_semantics/ k8s_semantics/
COPY simulator/ simulator/
# Just our wheel; dependencies are installed from the index in the next stages.
RUN pip wheel --no-deps --wheel-dir /dist .

# ---- base: what loadgen and runtime share ---------------------------------
FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Numeric uid/gid 65532 so Kubernetes runAsNonRoot can verify it without
# reading /etc/passwd; matches runAsUser in deploy/deployment.yaml.
RUN groupadd --gid 65532 nonroot \
    && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin nonroot
WORKDIR /srv
# Bundled example cluster snapshot and config, so the image runs the demo as is.
COPY examples/ examples/

# ---- loadgen: locust + bench/ (docker-compose service "locust") ------------
FROM base AS loadgen
COPY --from=builder /dist/ /tmp/dist/
# Install the local wheel with its "bench" extra (locust).
RUN set -- /tmp/dist/*.whl \
    && pip install --no-cache-dir "$1[bench]" \
    && rm -rf /tmp/dist
COPY bench/ bench/
USER 65532:65532
ENTRYPOINT ["locust"]

# ---- runtime: the extender (default target) ---------------------------------
FROM base AS runtime
COPY --from=builder /dist/ /tmp/dist/
RUN pip install --no-cache-dir /tmp/dist/*.whl \
    && rm -rf /tmp/dist
USER 65532:65532
EXPOSE 8888
# Used by plain docker and compose; the kubelet ignores it (the Deployment has
# its own probes). Assumes the default port 8888.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8888/healthz', timeout=2)"]
ENTRYPOINT ["kube-gpu-extender"]
# Demo: snapshot mode on the bundled example. --host 0.0.0.0 is for the compose
# demo only (published port), hence --allow-unauthenticated-debug (fake data,
# no credentials); in-cluster the Deployment overrides these args with
# in-cluster config and --host 127.0.0.1.
CMD ["serve", "--snapshot", "/srv/examples/cluster.yaml", "--config", "/srv/examples/config.yaml", "--host", "0.0.0.0", "--port", "8888", "--allow-unauthenticated-debug"]
