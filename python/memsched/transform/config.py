"""Reading memsched's PassContext config keys.

TVM rejects unknown config keys, so ``memsched.*`` keys exist only once the native library has
registered them; without it the pass constructor arguments (and their defaults) apply.
"""
from __future__ import annotations

KEYS = ("memsched.algorithm", "memsched.time_limit_s", "memsched.memory_model")


def get(ctx, key: str, default):
    try:
        cfg = ctx.config if ctx is not None else None
        if cfg is not None and key in cfg:
            v = cfg[key]
            return type(default)(v.value if hasattr(v, "value") else v)
    except Exception:  # noqa: BLE001 - a config map without the key behaves as absent
        pass
    return default
