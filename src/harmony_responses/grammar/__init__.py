"""Grammars over what the model writes for a tool call, in the EBNF subset every constraining engine reads.

Sans-I/O compilers shared by two stages: ``request/`` asks ``schema_problem`` whether a strict function's schema
can be held to a grammar (a 400 if not), and ``engine/`` (``_constrain.py``) puts the grammars in each engine's
form (xgrammar structural tags for vLLM and SGLang, llama.cpp's lazy GBNF).

- ``_input.py``: a custom tool's ``format`` (regex or Lark) as a grammar over its JSON-escaped input;
- ``_schema.py``: a JSON schema (strict functions, MCP tools' inputs) as a grammar over the arguments.
"""

from ._input import UnsupportedGrammar, input_grammar
from ._schema import object_grammar, schema_grammar, schema_problem

__all__ = ["UnsupportedGrammar", "input_grammar", "object_grammar", "schema_grammar", "schema_problem"]
