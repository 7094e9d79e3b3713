"""Hypothesis runs derandomized by default: the README's test command passes or fails the same
way every time (CI's rule). ``HYPOTHESIS_PROFILE=explore`` draws new examples on each run, to
look for new failures."""
import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, deadline=None,
                          print_blob=True)
settings.register_profile("explore", derandomize=False, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
