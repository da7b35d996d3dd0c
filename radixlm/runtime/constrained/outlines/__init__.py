"""The outlines-core engine: grammars as one regex, an index per grammar, compiles in worker processes.

Kept empty: ``compile_worker`` runs in its own process and must import only what compiling needs.
"""
