# harmony-responses serve in a container: the package built from this checkout, bubblewrap for the code
# interpreter's sandbox, a user that is not root. docs/production/index.md "Docker" says how to run it;
# compose.yaml puts it in front of vLLM.
#   docker build -t harmony-responses .
#   docker run --rm --init -p 127.0.0.1:8400:8400 harmony-responses --engine vllm:http://gpu-box:8000

FROM python:3.12-slim AS build
# A C compiler for the engine's line scanner (setup.py; without one the wheel is built without it and the
# server reads engine lines in pure Python). Only in this stage: the image gets the built wheel.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE MANIFEST.in ./
COPY src ./src
# The package and every dependency as wheels, so that the image's own install needs no index.
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[postgres,otel,file-search]"

FROM python:3.12-slim
# bubblewrap: the code interpreter's sandbox. Unpinned: a pinned Debian version stops installing as soon as
# the suite updates it.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*
# Not pinned by version: the only harmony-responses wheel there is the one just built.
# hadolint ignore=DL3013
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels "harmony-responses[postgres,otel,file-search]"
RUN useradd --create-home --uid 10001 harmony \
    && mkdir /data \
    && chown harmony /data
USER 10001
# The SQLite store and the key that seals reasoning live here: keep it on a volume across restarts.
ENV HARMONY_RESPONSES_DATA_DIR=/data
VOLUME /data
EXPOSE 8400
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8400/health', timeout=4)"]
# Arguments given to `docker run` follow these (--engine …, --api-key …).
ENTRYPOINT ["harmony-responses", "serve", "--host", "0.0.0.0"]
