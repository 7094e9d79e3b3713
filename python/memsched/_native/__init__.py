"""Build output directory of the native core (libmemsched_native.so, built by setup.py)."""
