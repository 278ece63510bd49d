"""The package's one compiled module, beside pyproject.toml (which says everything else).

``harmony_responses.engine._completion_lines``: the engine stream loop's scanner for the common completions line
(engine/_lines.py). Optional: where it cannot be built (no C compiler, no Python headers) the install goes on
without it, and the server reads those lines in pure Python, saying so at start-up.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "harmony_responses.engine._completion_lines",
            ["src/harmony_responses/engine/_completion_lines.c"],
            optional=True,
        )
    ]
)
