"""Tests of the server backend against a real llama-cpp-python server on loopback."""
