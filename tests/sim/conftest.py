import numpy as np
import pytest

from tests.sim.builder import OutDir


@pytest.fixture
def out(tmp_path) -> OutDir:
    return OutDir(tmp_path / "out")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
