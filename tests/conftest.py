"""Hypothesis runs derandomized by default: the README's test command passes or fails the same
way every time (CI's rule). ``HYPOTHESIS_PROFILE=explore`` draws new examples on each run, to
look for new failures."""
import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, deadline=None,
                          print_blob=True)
settings.register_profile("explore", derandomize=False, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="module")
def fw():
    """The emulated Cortex-M55's TFLite Micro firmware (`memsched.board`), or a skip with the
    reason it cannot run here."""
    from memsched import board

    try:
        return board.firmware("tflm")
    except board.BoardUnavailable as e:
        pytest.skip(f"the board: {e}")
