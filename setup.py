"""Build script. Metadata lives in pyproject.toml; this file exists so the native core
(passes/, built with CMake) can hook into the install step."""
from setuptools import setup

setup()
