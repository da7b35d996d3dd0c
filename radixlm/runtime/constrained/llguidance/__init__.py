"""The llguidance engine: grammars as llguidance text (also ``ebnf`` and ``structural_tag``), fuel-bounded."""
