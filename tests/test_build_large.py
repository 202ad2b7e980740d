"""``coda build`` of the catalogue's five largest specs (``tests.test_build.LARGE``), GPU-blind:
the same checks as tests/test_build.py, on its other part of the catalogue.

Why a second file: with ``--dist loadfile`` a file runs whole on one xdist worker, and building
the whole catalogue in one file kept one worker compiling for 9 minutes while the other ran out
of work. These five hold three fifths of the catalogue's sm_90a kernels; the two files build in
parallel on CI's two workers.
"""

from __future__ import annotations

import pytest

from tests.conftest import SPECS, needs_build
from tests.test_build import (  # noqa: F401 - the fixture and tests run here on CATALOGUE
    LARGE,
    built,
    pytest_generate_tests,
    test_accumulating_kernels_reduce_add_their_d,
    test_cubins_are_sm90a_with_tma_and_no_local_memory,
    test_manifest_epilogue_arguments_are_the_specs,
    test_spec_builds,
)

pytestmark = [pytest.mark.slow, needs_build, pytest.mark.usefixtures("at_root")]
CATALOGUE = [p for p in SPECS if p.stem in LARGE]
