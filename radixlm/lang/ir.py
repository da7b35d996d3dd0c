"""``from radixlm.lang.ir import REGEX_INT`` where SGLang programs import ``sglang.lang.ir``."""

from radixlm.frontend.ir import REGEX_BOOL, REGEX_FLOAT, REGEX_INT, REGEX_STR

__all__ = ["REGEX_BOOL", "REGEX_FLOAT", "REGEX_INT", "REGEX_STR"]
