"""The server tests' fixture: a generate that holds the model thread until released (helpers: serving_helpers)."""

from __future__ import annotations

import pytest

from serving_helpers import Gate


@pytest.fixture
def gate():
    gate = Gate()
    yield gate
    gate.release.set()  # never leave the model thread waiting
