# usher: the controller image (`usher --no-ui` in deploy/40-deployment.yaml; the console and
# `usher demo` work from it too). Build from the repository root:
#   docker build -t registry.example.com/usher:0.1.0 .
# Only the package sources are copied in (see [tool.setuptools] package-dir in pyproject.toml).

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/usher
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src src
COPY engine engine
COPY console console
COPY themes themes
COPY fixtures fixtures
COPY sandbox sandbox
RUN /opt/usher/bin/pip install .

FROM python:3.11-slim
ENV PATH=/opt/usher/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/usher /opt/usher
# A numeric, non-root user, so that Kubernetes' runAsNonRoot can verify it.
RUN useradd --uid 10001 --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin usher
USER 10001:10001
# /metrics, /healthz, /readyz
EXPOSE 8080
ENTRYPOINT ["usher"]
CMD ["--no-ui"]
