"""Reading memsched's PassContext config keys.

TVM rejects unknown config keys, so ``memsched.*`` keys exist only once the native library has
registered them: ``import memsched`` does so as soon as TVM is imported
(`memsched.native.register_config_keys_on_tvm_import`); without the library the pass
constructor arguments (and their defaults) apply.
"""
from __future__ import annotations

from ..native import CONFIG_KEYS as KEYS  # noqa: F401


def get(ctx, key: str, default, kind=None):
    """The value of ``key`` in ``ctx.config`` converted to ``kind`` (default: the type of
    ``default``), or ``default`` when absent."""
    kind = kind or type(default)
    try:
        cfg = ctx.config if ctx is not None else None
        if cfg is not None and key in cfg:
            v = cfg[key]
            return kind(v.value if hasattr(v, "value") else v)
    except Exception:  # noqa: BLE001 - a config map without the key behaves as absent
        pass
    return default
