"""``from radixlm.global_config import global_config``, where SGLang programs import
``sglang.global_config`` (the settings live in ``radixlm.frontend.global_config``)."""

from radixlm.frontend.global_config import GlobalConfig, global_config

__all__ = ["GlobalConfig", "global_config"]
