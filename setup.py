"""The package's compiled modules, beside pyproject.toml (which says everything else).

- ``harmony_responses.engine._completion_lines``: the engine stream loop's scanner for the common completions
  line (engine/_lines.py);
- ``harmony_responses.translate._text_run``: the translator's run of plain text tokens (translate/_translator.py);
- ``harmony_responses._sse_frames``: a batch of events framed as SSE (sse.py).

Optional: where they cannot be built (no C compiler, no Python headers) the install goes on without them, and
the server does their work in pure Python, saying so at start-up.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "harmony_responses.engine._completion_lines",
            ["src/harmony_responses/engine/_completion_lines.c"],
            optional=True,
        ),
        Extension(
            "harmony_responses._sse_frames",
            ["src/harmony_responses/_sse_frames.c"],
            optional=True,
        ),
        Extension(
            "harmony_responses.translate._text_run",
            ["src/harmony_responses/translate/_text_run.c"],
            optional=True,
        ),
    ]
)
