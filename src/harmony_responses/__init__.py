"""harmony-responses: a spec-exact OpenAI Responses API for Harmony-format models (gpt-oss).

Data flows one way: ``api`` (HTTP) → ``render`` (request → Harmony prompt tokens) → ``engine`` (prompt
tokens → generated tokens) → ``translate`` (tokens → Responses events, sans-I/O) → SSE bytes.
"""

__version__ = "0.1.0"
