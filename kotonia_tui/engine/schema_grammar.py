"""A JSON schema as a GBNF grammar, by llama.cpp's own converter (llama-cpp-python's).

llama-cpp-python's server takes a schema on its chat path, but on its completions path (the
prompt rendered here) only a grammar. The server backend never imports llama_cpp (it talks
HTTP, and loads no native library): the app hands it this function, and llama_cpp loads only
when a schema is first sent that way.
"""

from __future__ import annotations


def schema_grammar(schema: str) -> str:
    """The GBNF grammar of a JSON schema given as JSON text."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    return str(json_schema_to_gbnf(schema))
